#!/usr/bin/env bash
# Whether the clusters' fixed cost depends on the kernel before them: clusters 1 and 2 at 2048^3,
# 3008^3 and 3000^3 under interleaved timing (ours after cuBLAS, the default) and blocked timing (ours
# back to back), twice each, in ONE device call. Needs .carry/kittens.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for r in 1 2; do
  for t in interleaved blocked; do
    timeout 100 $K bench gemm_bf16 --shapes 2048x2048x2048,3008x3008x3008,3000x3000x3000 --clusters 1,2 --timing $t \
      --checks none --json "$R/${t}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $t /" | tee -a "$R/timing.txt"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
