# Call 11: the atomic key blocks handing dSᵀ over by one-way consumer signals (wheel G, 034309b: dQ a
# step behind, three dSᵀ slots, the Q/dO ring at 2 stages) against the submitted ones (wheel H,
# 3c00438), alternated, the done-bar rows interleaved; G's checks (attn_bwd_atomic_check.py), G with
# the turns off, and racecheck / synccheck / memcheck of G's small cases.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel H into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteG .carry/pythonG/kittens-*.whl
BASE="$PYTHONPATH"
export PYTHONPATH="/tmp/siteG:$BASE" KITTENS_VERBOSE=1
(cd bench && timeout 120 python3 attn_bwd_atomic_check.py) > "$R/checks_G.txt" 2>&1; echo "checks G rc $?: $(tail -1 "$R/checks_G.txt") $(grep -o 'kvdq_sm90[^)]*spills' "$R/checks_G.txt" | head -1)"
unset KITTENS_VERBOSE
for run in H_1 G_1 H_2 G_2 Gnone_1; do
  case $run in H*) export PYTHONPATH="$BASE";; *) export PYTHONPATH="/tmp/siteG:$BASE";; esac
  case $run in Gnone*) export KITTENS_ATTN_BWD_TURNS=none;; *) unset KITTENS_ATTN_BWD_TURNS;; esac
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "16x16x4x4096x128" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"commit": "[0-9a-f]\{7\}' "$R/bwd_$run.json") $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
unset KITTENS_ATTN_BWD_TURNS
export PYTHONPATH="/tmp/siteG:$BASE"
timeout 60 compute-sanitizer --tool memcheck python3 bench/attn_bwd_atomic_check.py small > "$R/memcheck.txt" 2>&1; echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.txt" | tail -1)"
timeout 60 compute-sanitizer --tool synccheck python3 bench/attn_bwd_atomic_check.py small > "$R/synccheck.txt" 2>&1; echo "synccheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/synccheck.txt" | tail -1)"
timeout 100 compute-sanitizer --tool racecheck python3 bench/attn_bwd_atomic_check.py small > "$R/racecheck.txt" 2>&1; echo "racecheck rc $?: $(grep -E 'Race reported|RACECHECK SUMMARY' "$R/racecheck.txt" | sort | uniq -c | head -4)"
tar -C "$R" -czf "$OUT/results.tgz" .
