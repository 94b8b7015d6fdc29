#!/usr/bin/env bash
# A/B of two builds of the clustered GEMM in ONE device call: .carry/kittens_prev (A) and
# .carry/kittens (B), alternated twice, at 3000^3 (B as N x K and K x N, the default plan: clusters of
# two, B in place) and at aligned squares with clusters 1 and 2; then B's checks and memcheck.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
for round in 1 2; do
  for v in prev new; do
    K=.carry/kittens; [ $v = prev ] && K=.carry/kittens_prev
    for L in nk kn; do
      echo -n "round $round $v $L: "
      timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000 --b-layout $L --checks none --json "$R/c3000_${v}_${L}_$round.json" 2>&1 | grep -E "^ +3000x" | tee -a "$R/c3000.txt"
    done
    echo "round $round $v squares:" | tee -a "$R/squares.txt"
    timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192,3000x4096x3000,2000x2000x2000 --clusters 1,2 --checks none --json "$R/sq_${v}_$round.json" 2>&1 | grep -E "^ +[0-9]+x" | tee -a "$R/squares.txt"
  done
done
echo "== checks (new)"
timeout 150 .carry/kittens bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 1,2 > "$R/checks.txt" 2>&1
grep -cE " ok$" "$R/checks.txt"; grep -E "FAIL|rror" "$R/checks.txt" | head -5
[ -x $SAN ] && timeout 90 $SAN --tool memcheck .carry/kittens bench gemm_bf16 --shapes 1000x1032x520,4160x1000x1032,3000x1000x3000 --tiles 128x192,128x256 --clusters 2 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -7 | tee "$R/sanitizer.txt"
[ -x $SAN ] && timeout 120 $SAN --tool racecheck .carry/kittens bench gemm_bf16 --shapes 640x512x520 --tiles 128x256 --clusters 2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY|hazard" | tail -3 | tee -a "$R/sanitizer.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
