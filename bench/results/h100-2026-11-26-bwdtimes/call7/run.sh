# Call 7: the staggered atomic key blocks (wheel S, 54906dc) against the submitted ones (wheel H,
# a04ffe7: the kernels of cddbccf), alternated, the done-bar rows interleaved against the backends;
# S's checks (bench/attn_bwd_atomic_check.py: odd lengths, GQA, D64/D128, both layouts, logits x8),
# racecheck, synccheck and memcheck of its small cases; S with the turns off (three dS slots).
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel H into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteS .carry/pythonS/kittens-*.whl
BASE="$PYTHONPATH"
export PYTHONPATH="/tmp/siteS:$BASE" KITTENS_VERBOSE=1
(cd bench && timeout 120 python3 attn_bwd_atomic_check.py) > "$R/checks_S.txt" 2>&1; echo "checks S rc $?: $(tail -1 "$R/checks_S.txt") $(grep -o 'kvdq[^)]*spill[^)]*' "$R/checks_S.txt" | head -2)"
unset KITTENS_VERBOSE
for run in H_1 S_1 H_2 S_2 Snone_1; do
  case $run in S*) export PYTHONPATH="/tmp/siteS:$BASE";; *) export PYTHONPATH="$BASE";; esac
  case $run in Snone*) export KITTENS_ATTN_BWD_TURNS=none;; *) unset KITTENS_ATTN_BWD_TURNS;; esac
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"commit": "[0-9a-f]\{7\}' "$R/bwd_$run.json") $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
unset KITTENS_ATTN_BWD_TURNS
export PYTHONPATH="/tmp/siteS:$BASE"
SAN=compute-sanitizer
timeout 100 $SAN --tool racecheck python3 bench/attn_bwd_atomic_check.py small > "$R/racecheck.txt" 2>&1; echo "racecheck rc $?: $(grep -E 'Race reported' "$R/racecheck.txt" | sort | uniq -c | head -4) $(grep -E 'RACECHECK SUMMARY' "$R/racecheck.txt" | tail -1)"
timeout 60 $SAN --tool synccheck python3 bench/attn_bwd_atomic_check.py small > "$R/synccheck.txt" 2>&1; echo "synccheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/synccheck.txt" | tail -1)"
timeout 60 $SAN --tool memcheck python3 bench/attn_bwd_atomic_check.py small > "$R/memcheck.txt" 2>&1; echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.txt" | tail -1)"
tar -C "$R" -czf "$OUT/results.tgz" .
