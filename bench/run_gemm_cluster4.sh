#!/usr/bin/env bash
# Clusters of two against four row tiles (B multicast in halves or quarters) in ONE device call:
#   1. checks of every block in clusters of 4 (default check shapes) and sanitizers;
#   2. rows off 128-byte lines (3000^3 both layouts, 2000^3, 3000x4096x3000, 4000x8000x3000) with
#      clusters 2 and 4 (B in place), twice;
#   3. aligned squares with clusters 1, 2, 4.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
echo "== 1. checks"
timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 4 > "$R/checks.txt" 2>&1
grep -cE " ok$" "$R/checks.txt"; grep -E "FAIL|rror" "$R/checks.txt" | head -5
[ -x $SAN ] && timeout 90 $SAN --tool memcheck $K bench gemm_bf16 --shapes 1000x1032x520,4160x1000x1032,3000x1000x3000 --tiles 128x192,128x256 --clusters 4 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -7 | tee "$R/sanitizer.txt"
[ -x $SAN ] && timeout 120 $SAN --tool racecheck $K bench gemm_bf16 --shapes 640x512x520 --tiles 128x256 --clusters 4 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY|hazard" | tail -3 | tee -a "$R/sanitizer.txt"
echo "== 2. rows off 128-byte lines"
for round in 1 2; do
  for L in nk kn; do
    timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000 --b-layout $L --clusters 2,4 --checks none --json "$R/c3000_${L}_$round.json" 2>&1 | grep -E "^ +3000x" | sed "s/^/$round $L /" | tee -a "$R/offline.txt"
  done
done
timeout 120 $K bench gemm_bf16 --shapes 2000x2000x2000,3000x4096x3000,4000x8000x3000,3000x3000x3000 --tiles 128x192,128x256 --clusters 2,4 --checks none --json "$R/offline.json" 2>&1 | grep -E "^ +[0-9]+x" | tee -a "$R/offline.txt"
echo "== 3. aligned"
timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192 --clusters 1,2,4 --checks none --json "$R/aligned.json" 2>&1 | grep -E "^ +[0-9]+x" | tee "$R/aligned.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
