#!/usr/bin/env bash
# Operand rows off 128-byte lines by how far off (row bytes mod 128: 16, 32, 48, 64, 96, 112), in ONE
# device call: each square read in place unclustered (c1), in place in clusters of two (c2, the
# default where the rows are off lines) and from a copy of B (tma-copy), twice; aligned squares beside.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
S=2000x2000x2000,2008x2008x2008,2016x2016x2016,2032x2032x2032,2048x2048x2048,3000x3000x3000,3016x3016x3016,3024x3024x3024,3040x3040x3040,3056x3056x3056,3072x3072x3072,4000x4000x4000,5000x5000x5000
for r in 1 2; do
  timeout 200 $K bench gemm_bf16 --shapes $S --clusters 1,2 --checks none --json "$R/inplace_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r auto /" | tee -a "$R/rows.txt"
  timeout 200 $K bench gemm_bf16 --shapes $S --clusters 1 --loads tma-copy --checks none --json "$R/copy_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r copy /" | tee -a "$R/rows.txt"
done
tar -C "$R" -czf "$OUT/results.tgz" .
