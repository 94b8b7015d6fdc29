#!/usr/bin/env bash
# ONE device call: (1) the GEMM after B's copy launched as a programmatic dependent that starts when
# the copy's blocks have all exited (no early trigger; `--programmatic on|off`, alternated twice) at
# 3000^3, B as N x K and K x N; (2) kittens.matmul (its padded copies now the copy kernel, not the
# driver's pitched copy) against torch.matmul in one process. Needs .carry/kittens and .carry/python.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
for r in 1 2; do
  for P in on off; do
    for L in nk kn; do
      echo "-- programmatic $P, B $L, round $r" | tee -a "$OUT/pdl.txt"
      timeout 90 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 --b-layout $L --programmatic $P \
        --checks none 2>&1 | grep -E "^ +3000x" | tee -a "$OUT/pdl.txt"
    done
  done
done
timeout 200 python3 -m kittens.bench gemm --sizes 3000,4096 --checks 3000x1000x777,2999x3001x3000,1000x1032x520 \
  --json "$OUT/py_gemm.json" 2>&1 | tail -14 | tee "$OUT/py_gemm.txt"
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
