#!/usr/bin/env bash
# The GEMM that copies B onto 128-byte lines itself while it runs (`--loads tma-staged`), in ONE
# device call. Needs .carry/kittens (a release build of this commit).
#   1. compute-sanitizer memcheck and racecheck of the staged kernel on a small off-line shape;
#   2. correctness (vs cuBLAS and f64 spots) and speed at 3000^3 and two odd shapes, staged against the
#      copy before the launch, B as N x K and as K x N (ratios to cuBLAS in the same run).
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== 1. sanitizers"
for T in memcheck racecheck; do
  timeout 120 $SAN --tool $T $K bench gemm_bf16 --shapes 1000x1032x520 --tiles 128x192 --loads tma-staged \
    --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|1000x1032x520" | head -6 | tee -a "$OUT/sanitizer.txt"
done
echo "== 2. staged vs copied"
for L in nk kn; do
  timeout 120 $K bench gemm_bf16 --shapes 3000x3000x3000,2999x3001x3000,3000x4096x3000 --tiles 128x192 --b-layout $L \
    --loads tma-copy,tma-staged,tma-copy-both --json "$OUT/staged_$L.json" 2>&1 | grep -vE "^\s+\[" | tail -30 | tee -a "$OUT/staged.txt"
done
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
