# Call 3: the done-bar rows (B16 H16 D128 N 2048-8192, causal and not) timed blocked (each backend's
# iterations together: the method of every earlier backward row) and interleaved (one backward of each
# in turn per iteration: the new default), twice each, alternating, with the GPU's clocks, power and
# throttle reasons logged every 200 ms.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > "$R/clocks.csv" 2>&1 &
SMI=$!
for run in blocked_1 interleaved_1 blocked_2 interleaved_2; do
  date -u +"%T $run" >> "$R/marks.txt"
  timeout 280 python3 -m kittens.bench attn --backward --timing ${run%_*} --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run rc $?: $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
date -u +"%T end" >> "$R/marks.txt"
kill $SMI
grep -v Warn "$R/bwd_interleaved_1.txt" | grep -v "^ " | head -20
tar -C "$R" -czf "$OUT/results.tgz" .
