#!/usr/bin/env bash
# The Hopper GEMM in thread-block clusters of two row tiles (each B box fetched once per pair and
# multicast), in ONE device call. Needs .carry/kittens and .carry/python (scripts/python-gpu-bundle.sh
# after the commit).
#   1. correctness: the default check shapes (odd numbers of row tiles among them) with every block,
#      clusters 1 and 2, against cuBLAS and f64 spot values;
#   2. compute-sanitizer memcheck and racecheck of clustered GEMMs;
#   3. shapes with rows off 128-byte lines: `auto` (B in place, clusters of two) against `tma-copy`
#      (B copied, no clusters), B as N x K and K x N (ratios to cuBLAS in the same run);
#   4. the LLM and square sweeps (46 shapes) with the default choice, JSON and plot;
#   5. kittens.matmul against torch.matmul in one process, checks against float64.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. checks"
timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 1,2 --json "$R/checks.json" > "$R/checks.txt" 2>&1
grep -cE " ok$" "$R/checks.txt"; grep -E "FAIL|rror" "$R/checks.txt" | head -5
if [ -x $SAN ]; then
  echo "== 2. sanitizers"
  timeout 90 $SAN --tool memcheck $K bench gemm_bf16 --shapes 1000x1032x520,4160x1000x1032,3000x1000x3000 --tiles 128x192,64x128 --clusters 2 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -7 | tee "$R/sanitizer.txt"
  timeout 120 $SAN --tool racecheck $K bench gemm_bf16 --shapes 640x512x520 --tiles 128x256 --clusters 2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY|ok|FAIL|hazard" | tail -5 | tee -a "$R/sanitizer.txt"
fi
echo "== 3. rows off 128-byte lines"
for L in nk kn; do
  timeout 150 $K bench gemm_bf16 --shapes 3000x3000x3000,2000x2000x2000,3000x4096x3000,5000x5000x5000,4000x8000x3000 --b-layout $L \
    --loads auto,tma-copy --checks none --json "$R/offline_$L.json" 2>&1 | grep -E "^ +[0-9]+x|geometric" | tee -a "$R/offline.txt"
done
echo "== 4. sweeps"
timeout 330 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep.json" --plot "$R/sweep.png" > "$R/sweep.txt" 2>&1
tail -8 "$R/sweep.txt"; grep -E "^ +3000x3000|^ +16x" "$R/sweep.txt"
echo "== 5. kittens.matmul"
timeout 120 python3 -m kittens.bench gemm --sizes 3000,4096 --checks 3000x1000x777,2999x3001x3000 --json "$R/matmul.json" 2>&1 | tail -12 | tee "$R/matmul.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
