# Call 4: wheel A (7c8564c: dQ between dV and dK) against wheel D (HEAD: and the f32 slab stored
# without bank conflicts), each with turns `scores` and `none`, alternated, each beside the two-launch
# form in the same process.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel D into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteA .carry/pythonA/kittens-*.whl
BASE="$PYTHONPATH"
export KITTENS_VERBOSE=1
(cd bench && timeout 240 python3 attn_bwd_atomic_check.py) > "$R/checks_D.txt" 2>&1; echo "checks D rc $?: $(tail -1 "$R/checks_D.txt")"
for run in A-scores_1 D-scores_1 A-none_1 D-none_1 A-scores_2 D-scores_2; do
  w=${run%%-*}; t=${run#*-}; t=${t%_*}
  if [ $w = A ]; then export PYTHONPATH="/tmp/siteA:$BASE"; else export PYTHONPATH="$BASE"; fi
  export KITTENS_ATTN_BWD_TURNS=$t
  timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"atomic_speedup_vs_two_geomean_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"two_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_all_passed": [a-z]*' "$R/bwd_$run.json") $(grep -o 'kvdq[^)]*spills' "$R/bwd_$run.txt" | head -1 | grep -o '[0-9]* registers, [0-9]* B spills')"
done
tar -C "$R" -czf "$OUT/results.tgz" .
