#!/usr/bin/env bash
# ONE device call: the split-K reduction launched as the GEMM's programmatic dependent (strip kernels
# wait for the grid before at entry), `--programmatic on|off` alternated twice, at the small-M shapes
# (the model's split and forced splits of 2 and 4), every row checked (default check shapes included);
# then the LLM and square sweeps with it on. Needs .carry/kittens of this commit.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SMALL=16x8192x8192,16x6144x4096,16x4096x14336,16x4096x4096,64x4096x14336
for r in 1 2; do
  for P in on off; do
    echo "-- programmatic $P round $r" | tee -a "$OUT/reduce.txt"
    timeout 120 $K bench gemm_bf16 --shapes $SMALL --programmatic $P $( [ $r = 1 ] && echo "--checks default" || echo "--checks none") \
      2>&1 | grep -E "^ +(16|64)x|failed|ERROR" | tee -a "$OUT/reduce.txt"
    for S in 2 4; do
      timeout 60 $K bench gemm_bf16 --shapes 16x8192x8192,16x6144x4096 --split-k $S --programmatic $P --checks none \
        2>&1 | grep -E "^ +16x" | tee -a "$OUT/reduce.txt"
    done
  done
done
timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$OUT/sweep.json" --plot "$OUT/sweep.png" 2>&1 | tail -56 > "$OUT/sweep.txt"
grep geometric "$OUT/sweep.txt"; awk '$5+0<0.9 && $5+0>0' "$OUT/sweep.txt"
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
