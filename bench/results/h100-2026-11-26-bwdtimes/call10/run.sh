# Call 10: the atomic key blocks at head dim 128 without the dQ exchange (wheel R, 67c7ec0, reverted:
# each warpgroup adds its own 64 keys' share of both column halves, two reductions per dQ element and
# no consumers barrier) against the submitted ones (wheel H, 3c00438), alternated, the done-bar rows
# interleaved; R's checks (bench/attn_bwd_atomic_check.py).
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel H into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteR .carry/pythonR/kittens-*.whl
BASE="$PYTHONPATH"
export PYTHONPATH="/tmp/siteR:$BASE"
(cd bench && timeout 120 python3 attn_bwd_atomic_check.py) > "$R/checks_R.txt" 2>&1; echo "checks R rc $?: $(tail -1 "$R/checks_R.txt")"
for run in H_1 R_1 H_2 R_2; do
  case $run in H*) export PYTHONPATH="$BASE";; *) export PYTHONPATH="/tmp/siteR:$BASE";; esac
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"commit": "[0-9a-f]\{7\}' "$R/bwd_$run.json") $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
tar -C "$R" -czf "$OUT/results.tgz" .
