# Call 3: wheel A (7c8564c: dQ between dV and dK) against wheel C (a57dfdf: and the f32 slab in
# unswizzled 32-byte rows), alternated, each with the two-launch form in the same process; C with turns none; ncu of C.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel C into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteA .carry/pythonA/kittens-*.whl
BASE="$PYTHONPATH"
export KITTENS_VERBOSE=1
(cd bench && timeout 240 python3 attn_bwd_atomic_check.py) > "$R/checks_C.txt" 2>&1; echo "checks C rc $?: $(tail -1 "$R/checks_C.txt")"
for run in A_1 C_1 A_2 C_2 Cnone_1; do
  if [ ${run%_*} = A ]; then export PYTHONPATH="/tmp/siteA:$BASE"; else export PYTHONPATH="$BASE"; fi; if [ ${run%_*} = Cnone ]; then export KITTENS_ATTN_BWD_TURNS=none; else unset KITTENS_ATTN_BWD_TURNS; fi
  timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"atomic_speedup_vs_two_geomean_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"two_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"atomic_all_passed": [a-z]*' "$R/bwd_$run.json") $(grep -o 'kvdq[^)]*spills' "$R/bwd_$run.txt" | head -1)"
done
export PYTHONPATH="$BASE"
P=bench/results/h200-2026-11-26-bwdreduce/one_bwd_form.py
timeout 200 ncu -f -o "$R/atomic" --kernel-name regex:kvdq --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters --section InstructionStats --section SchedulerStats python3 $P atomic > "$R/ncu_log.txt" 2>&1; echo "ncu rc $?"
ncu -i "$R/atomic.ncu-rep" --print-details all > "$R/ncu_atomic.txt" 2>&1
ncu -i "$R/atomic.ncu-rep" --page source --csv --print-source sass > "$R/source_atomic.csv" 2>&1
rm -f "$R/atomic.ncu-rep"
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Stall (Barrier|Wait|Long Scoreboard|MIO|Math|Dispatch)" "$R/ncu_atomic.txt" | head -20
unset KITTENS_VERBOSE
timeout 100 compute-sanitizer --tool memcheck python3 bench/attn_bwd_atomic_check.py small > "$R/memcheck.txt" 2>&1; echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.txt" | tail -1)"
timeout 150 compute-sanitizer --tool racecheck python3 bench/attn_bwd_atomic_check.py small > "$R/racecheck.txt" 2>&1; echo "racecheck rc $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$R/racecheck.txt" | tail -1)"
tar -C "$R" -czf "$OUT/results.tgz" .
