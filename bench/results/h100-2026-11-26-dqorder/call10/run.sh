# Call 10: wheel D (d63e617, the submitted kernels) against wheel F (HEAD: the dQ slab reduced warp by
# warp, no warpgroup barriers around its stores), alternated; the atomic form only. F's correctness
# first: the atomic checks and memcheck of their small cases.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel F into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteD .carry/pythonD/kittens-*.whl
BASE="$PYTHONPATH"
(cd bench && timeout 120 python3 attn_bwd_atomic_check.py) > "$R/checks_F.txt" 2>&1; echo "checks F rc $?: $(tail -1 "$R/checks_F.txt")"
timeout 90 compute-sanitizer --tool memcheck python3 bench/attn_bwd_atomic_check.py small > "$R/memcheck_F.txt" 2>&1; echo "memcheck F rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck_F.txt" | tail -1)"
for run in D_1 F_1 D_2 F_2; do
  if [ ${run%_*} = D ]; then export PYTHONPATH="/tmp/siteD:$BASE"; else export PYTHONPATH="$BASE"; fi
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json" | head -1) $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json" | head -1) $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
tar -C "$R" -czf "$OUT/results.tgz" .
