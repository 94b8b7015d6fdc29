#!/usr/bin/env bash
# One device call for the lowered gemm_fp8 on an H100: correctness at the edge shapes, compute-sanitizer
# memcheck on small shapes, then the square sweep against cuBLASLt (default and fast accumulation).
# Run from the repository root with the release binary at $K (default .carry/kittens); writes to $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K="${K:-.carry/kittens}"
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
$K compile gemm_fp8 --target sm_90a --json > "$OUT/compile.json"; cat "$OUT/compile.json"
echo "== correctness: 2048 (5 launches) and the edge shapes"
timeout 90 $K bench gemm_fp8 --sizes 2048 --iters 5 --warmup 2 ${CHECKS:+--checks $CHECKS} \
  --json "$OUT/checks.json" 2>&1 | tail -20
if [ -z "${SKIP_SANITIZER:-}" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  echo "== compute-sanitizer memcheck (small shapes)"
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $K bench gemm_fp8 --sizes 256 \
    --iters 1 --warmup 0 --checks 77x40x16,1001x264x272 2>&1 | tail -8
fi
echo "== benchmark"
timeout "${BENCH_TIMEOUT:-150}" $K bench gemm_fp8 --sizes "${SIZES:-2048,4096,8192,16384}" --checks none \
  ${TIMING:+--timing $TIMING} --json "$OUT/gemm.json" 2>&1 | tail -20
gpu | tee -a "$OUT/gpu.txt"
if [ -n "${VARIANTS:-}" ]; then
  echo "== variants at ${VSIZE:-8192}: $VARIANTS"
  i=0
  IFS=';' read -ra VS <<< "$VARIANTS"
  for v in "${VS[@]}"; do
    i=$((i+1)); echo "-- variant $i: $v"
    timeout 60 $K bench gemm_fp8 --sizes "${VSIZE:-8192}" --checks none $v --json "$OUT/variant$i.json" 2>&1 | grep -E "^ +[0-9]+x|block|error|fast"
  done
fi
