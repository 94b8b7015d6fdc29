#!/usr/bin/env bash
# The grid order's group of 8 row tiles (default) against 16 (KITTENS_GEMM_WINDOW=16) over the LLM
# and square sweeps (46 shapes), in ONE device call, then 3000^3 alternated three times.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
timeout 280 $K bench gemm_bf16 --sweep llm,squares --checks none --json "$R/sweep_w8.json" --plot "$R/sweep_w8.png" > "$R/sweep_w8.txt" 2>&1
KITTENS_GEMM_WINDOW=16 timeout 280 $K bench gemm_bf16 --sweep llm,squares --checks none --json "$R/sweep_w16.json" --plot "$R/sweep_w16.png" > "$R/sweep_w16.txt" 2>&1
for f in w8 w16; do echo "-- $f"; grep -E "geometric|3000x3000" "$R/sweep_$f.txt" | head -3; done
for r in 1 2 3; do
  for w in 8 16; do
    KITTENS_GEMM_WINDOW=$w timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000 --checks none 2>&1 | grep -E "^ +3000x" | sed "s/^/$r w$w /" | tee -a "$R/c3000.txt"
  done
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
