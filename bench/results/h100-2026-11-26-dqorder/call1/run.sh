# Call 1: the atomic form with dQ between dV and dK, against the two-launch form in the same process.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
(cd bench && timeout 240 python3 attn_bwd_atomic_check.py) > "$R/checks.txt" 2>&1; echo "checks rc $?: $(tail -2 "$R/checks.txt")"
for run in scores_1 none_1 scores_2; do
  export KITTENS_ATTN_BWD_TURNS=${run%_*}
  timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"atomic_speedup_vs_two_geomean_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"two_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_all_passed": [a-z]*' "$R/bwd_$run.json")"
done
unset KITTENS_ATTN_BWD_TURNS
timeout 120 compute-sanitizer --tool memcheck python3 bench/attn_bwd_atomic_check.py small > "$R/memcheck.txt" 2>&1; echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.txt" | tail -1)"
tar -C "$R" -czf "$OUT/results.tgz" .
