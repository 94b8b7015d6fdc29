#!/usr/bin/env bash
# The Hopper GEMM in thread-block clusters of two row tiles (each B box fetched once per pair and
# multicast), in ONE device call. Needs .carry/kittens (release build of this commit).
#   1. correctness: the default check shapes (an odd number of row tiles among them) with every
#      block, clusters 1 and 2, against cuBLAS and f64 spot values;
#   2. compute-sanitizer memcheck and racecheck of clustered GEMMs;
#   3. 3000^3: blocks 128x192 and 128x256, clusters 1 and 2, B copied or read in place, B as N x K
#      and K x N (ratios to cuBLAS in the same run);
#   4. squares 2048-16384 and LLM shapes, the chosen block, clusters 1 and 2.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
echo "== 1. checks"
timeout 150 $K bench gemm_bf16 --tiles all --clusters 1,2 --checks only --json "$R/checks.json" 2>&1 | tail -40 > "$R/checks.txt"
grep -cE " ok " "$R/checks.txt"; grep -E "FAIL|error|mismatch" "$R/checks.txt" | head -5
if [ -x $SAN ]; then
  echo "== 2. sanitizers"
  timeout 90 $SAN --tool memcheck $K bench gemm_bf16 --shapes 1000x1032x520,4160x1000x1032 --tiles 128x256,64x128 --clusters 2 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -5 | tee "$R/sanitizer.txt"
  timeout 120 $SAN --tool racecheck $K bench gemm_bf16 --shapes 640x512x512 --tiles 128x256 --clusters 2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY|ok|FAIL|hazard" | tail -5 | tee -a "$R/sanitizer.txt"
fi
echo "== 3. 3000^3"
for L in nk kn; do
  timeout 100 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192,128x256 --clusters 1,2 --b-layout $L \
    --loads tma-copy,tma-in-place --checks none --json "$R/c3000_$L.json" 2>&1 | tail -12 | tee -a "$R/c3000.txt"
done
echo "== 4. squares and LLM shapes"
timeout 200 $K bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192,16384x16384x16384,4096x6144x4096,8192x4096x14336,4096x28672x4096,16384x8192x8192 \
  --clusters 1,2 --checks none --json "$R/squares.json" 2>&1 | tail -24 | tee "$R/squares.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
