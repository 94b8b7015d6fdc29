#!/usr/bin/env bash
# Clusters of two at rows off 128-byte lines, in ONE device call: .carry/kittens_prev (A) against
# .carry/kittens (B) alternated twice at 3000^3 and 4096^3 (clusters 1 and 2); then B with the grid
# order's group of 4, 8 (default), 16 and 24 row tiles (KITTENS_GEMM_WINDOW) at 3000^3 (both
# layouts), 3000x4096x3000 and 4000x8000x3000.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
for round in 1 2; do
  for v in prev new; do
    K=.carry/kittens; [ $v = prev ] && K=.carry/kittens_prev
    timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000 --checks none --json "$R/ab_${v}_$round.json" 2>&1 | grep -E "^ +3000x" | sed "s/^/$round $v /" | tee -a "$R/ab.txt"
    timeout 60 $K bench gemm_bf16 --shapes 4096x4096x4096 --clusters 1,2 --checks none 2>&1 | grep -E "^ +4096x" | sed "s/^/$round $v /" | tee -a "$R/ab.txt"
  done
done
for w in 4 8 16 24; do
  for L in nk kn; do
    KITTENS_GEMM_WINDOW=$w timeout 60 .carry/kittens bench gemm_bf16 --shapes 3000x3000x3000 --b-layout $L --checks none --json "$R/w${w}_$L.json" 2>&1 | grep -E "^ +3000x" | sed "s/^/w$w $L /" | tee -a "$R/window.txt"
  done
  KITTENS_GEMM_WINDOW=$w timeout 90 .carry/kittens bench gemm_bf16 --shapes 3000x4096x3000,4000x8000x3000 --checks none --json "$R/w${w}_other.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/w$w /" | tee -a "$R/window.txt"
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
