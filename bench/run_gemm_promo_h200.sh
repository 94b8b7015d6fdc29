#!/usr/bin/env bash
# The H200's side of the promotion and copy rule (run_gemm_promo.sh is the H100's), in ONE device call.
#   1. 3000^3 with every copy choice (B as N x K);
#   2. the three small-M shapes that stream B (16 x 8192 x 8192, 16 x 6144 x 4096, 16 x 4096 x 14336)
#      under each L2 promotion (their rows lie on 128-byte lines: the rule gives them 256);
#   3. the LLM and square sweeps with the default choice, JSON and plot.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== 1. 3000^3, every copy choice"
timeout 90 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 \
  --loads tma-copy,tma-copy-both,tma-copy-a,tma-in-place --checks none --json "$OUT/c3000.json" 2>&1 | grep -E "^ +3000x" | tee "$OUT/c3000.txt"
echo "== 2. small M under each promotion"
for P in 256 128 none; do
  echo "-- promotion $P"
  KITTENS_TMA_L2_PROMOTION=$P timeout 90 $K bench gemm_bf16 --shapes 16x8192x8192,16x6144x4096,16x4096x14336 \
    --checks none --json "$OUT/small$P.json" 2>&1 | grep -E "^ +16x" | tee -a "$OUT/small.txt"
done
echo "== 3. sweeps"
timeout 400 $K bench gemm_bf16 --sweep llm,squares --json "$OUT/sweep.json" --plot "$OUT/sweep.png" 2>&1 | tail -56 > "$OUT/sweep.txt"
grep -E "geometric" "$OUT/sweep.txt"
awk '$5+0<0.9 && $5+0>0' "$OUT/sweep.txt"
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
