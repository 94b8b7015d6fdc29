#!/usr/bin/env bash
# The GEMM with 128-byte L2 promotion for maps off 128-byte lines and B alone copied there, in ONE
# device call. Needs .carry/kittens and .carry/python (scripts/python-gpu-bundle.sh after the commit).
#   1. 3000^3 with every copy choice, B as N x K and as K x N (ratios to cuBLAS in the same run);
#   2. kittens.matmul against float64 at 3000^3 and two odd shapes (bench/results/.../matmul3000.py);
#   3. the LLM and square sweeps (46 shapes) with the default choice, JSON and plot.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. 3000^3, every copy choice"
for L in nk kn; do
  timeout 90 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 --b-layout $L \
    --loads tma-copy,tma-copy-both,tma-copy-a,tma-in-place --json "$OUT/c3000_$L.json" 2>&1 | tail -14 | tee -a "$OUT/c3000.txt"
done
echo "== 2. kittens.matmul against float64"
timeout 60 python3 bench/results/h200-2026-11-26-bwdreduce/matmul3000.py 2>&1 | tail -5 | tee "$OUT/matmul.txt"
echo "== 3. sweeps"
timeout 400 $K bench gemm_bf16 --sweep llm,squares --json "$OUT/sweep.json" --plot "$OUT/sweep.png" 2>&1 | tail -56 > "$OUT/sweep.txt"
tail -8 "$OUT/sweep.txt"
grep -E "^ +3000x3000|^ +16x" "$OUT/sweep.txt"
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
