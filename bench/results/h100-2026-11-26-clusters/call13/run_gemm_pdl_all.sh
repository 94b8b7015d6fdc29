#!/usr/bin/env bash
# Every GEMM launch programmatic (`--programmatic on` at the probe commit) against none (`off`), at
# shapes without copies or split-K (so only the GEMM's own launch differs): clusters 1 and 2 at 2048^3,
# 3008^3 and 3000^3, and 4096^3, 8192^3; alternated twice, in ONE device call. Needs .carry/kittens
# built from the probe commit 111d604 (reverted in the next commits).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for r in 1 2; do
  for p in on off; do
    timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,3008x3008x3008,3000x3000x3000 --clusters 1,2 --programmatic $p \
      --checks none --json "$R/${p}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $p /" | tee -a "$R/pdl.txt"
    timeout 80 $K bench gemm_bf16 --shapes 4096x4096x4096,8192x8192x8192 --programmatic $p \
      --checks none --json "$R/${p}_big_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $p /" | tee -a "$R/pdl.txt"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
