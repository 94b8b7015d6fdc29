# Call 6: both forms at every bench shape (D128 N 2048-8192, GQA 16/4, D64) in one process; the GPU
# backward tests; racecheck and memcheck of the atomic form's small cases.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --iters 10 --warmup 2 --json "$R/bwd_both.json" --plot "$R/bwd_both.png" > "$R/bwd_both.txt" 2>&1
sed -n '/form   TF/,$p' "$R/bwd_both.txt"
timeout 200 python3 -m pytest -q -rs python/tests/test_gpu_backward.py python/tests/test_gpu.py > "$R/pytest.txt" 2>&1; echo "pytest rc $?: $(tail -1 "$R/pytest.txt")"
timeout 100 compute-sanitizer --tool racecheck python3 bench/attn_bwd_atomic_check.py small > "$R/racecheck.txt" 2>&1; echo "racecheck rc $?: $(grep -E 'Race reported' "$R/racecheck.txt" | sort | uniq -c | head -4) $(grep -E 'RACECHECK SUMMARY' "$R/racecheck.txt" | tail -1)"
timeout 60 compute-sanitizer --tool synccheck python3 bench/attn_bwd_atomic_check.py small > "$R/synccheck.txt" 2>&1; echo "synccheck rc $?: $(grep -E 'ERROR SUMMARY' "$R/synccheck.txt" | tail -1)"
tar -C "$R" -czf "$OUT/results.tgz" .
