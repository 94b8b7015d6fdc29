#!/usr/bin/env bash
# The submitted GEMM (B off 128-byte lines read in place by clusters of two, groups of 8 clusters),
# in ONE device call. Needs .carry/kittens and .carry/python (scripts/python-gpu-bundle.sh after the
# commit).
#   1. the LLM and square sweeps (46 shapes) with the default choice and the check shapes, JSON, plot;
#   2. rows off 128-byte lines: the default (`auto`) against `tma-copy` (B copied, no clusters), B as
#      N x K and K x N;
#   3. compute-sanitizer memcheck of the default launches at odd shapes (clusters and copies);
#   4. kittens.matmul: the GPU tests, and against torch.matmul in one process (checks vs float64).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. sweeps"
timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep.json" --plot "$R/sweep.png" > "$R/sweep.txt" 2>&1
tail -8 "$R/sweep.txt"; grep -E "^ +3000x3000|^ +16x" "$R/sweep.txt"
echo "== 2. rows off 128-byte lines"
for L in nk kn; do
  timeout 120 $K bench gemm_bf16 --shapes 3000x3000x3000,2000x2000x2000,3000x4096x3000,4000x8000x3000,5000x5000x5000 --b-layout $L \
    --loads auto,tma-copy --checks none --json "$R/offline_$L.json" 2>&1 | grep -E "^ +[0-9]+x|geometric" | sed "s/^/$L /" | tee -a "$R/offline.txt"
done
if [ -x $SAN ]; then
  echo "== 3. memcheck"
  timeout 100 $SAN --tool memcheck $K bench gemm_bf16 --shapes 3000x1000x3000,2999x3001x3000,1000x1032x520 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -5 | tee "$R/sanitizer.txt"
fi
echo "== 4. kittens.matmul"
timeout 240 python3 -m pytest -q -rs python/tests/test_gpu.py 2>&1 | tail -4 | tee "$R/pytest.txt"
timeout 120 python3 -m kittens.bench gemm --sizes 3000,4096,8192 --checks 3000x1000x777,2999x3001x3000,1000x1032x520 --json "$R/matmul.json" 2>&1 | tail -9 | tee "$R/matmul.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
