# Call 2: wheel A (7c8564c: dQ between dV and dK) against wheel B (0895c08: and D loaded at the end of
# a step), alternated, each with the two-launch form in the same process; then ncu of B's atomic key blocks.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel B into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteA .carry/pythonA/kittens-*.whl
BASE="$PYTHONPATH"
export KITTENS_VERBOSE=1
(cd bench && timeout 240 python3 attn_bwd_atomic_check.py) > "$R/checks_B.txt" 2>&1; echo "checks B rc $?: $(tail -1 "$R/checks_B.txt")"
for run in A_1 B_1 A_2 B_2; do
  if [ ${run%_*} = A ]; then export PYTHONPATH="/tmp/siteA:$BASE"; else export PYTHONPATH="$BASE"; fi
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
tar -C "$R" -czf "$OUT/results.tgz" .
