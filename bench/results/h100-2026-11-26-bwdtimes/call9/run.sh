# Call 9: what a third dS slot would cost (the smem a one-way dQ signal needs, bench/NOTES.md): wheel H
# (3c00438, the submitted kernels), Q1 (f4c10c0: a third, unused dS slot, so the Q/dO ring holds 2
# stages instead of 3), Q2 (79fdd4b: Q1 without the consumers barrier before dQ: racy, dQ wrong, the
# lock-step bound at 2 stages), alternated, atomic form, the done-bar rows interleaved.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel H into /tmp/site
for w in Q1 Q2; do python3 -m pip install -q --no-deps --target /tmp/site$w .carry/python$w/kittens-*.whl; done
BASE="$PYTHONPATH"
for run in H_1 Q1_1 Q2_1 H_2 Q1_2 Q2_2; do
  case $run in H*) export PYTHONPATH="$BASE";; *) export PYTHONPATH="/tmp/site${run%_*}:$BASE";; esac
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"commit": "[0-9a-f]\{7\}' "$R/bwd_$run.json") $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
tar -C "$R" -czf "$OUT/results.tgz" .
