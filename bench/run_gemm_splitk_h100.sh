#!/usr/bin/env bash
# One device call for split-K, the aligned copies of misaligned operands and the FP8 GEMM's promoted
# accumulators: compile reports; split-K forced on odd shapes (correctness); the shape-aware BF16 GEMM
# over the squares and the LLM sweep (split-K chosen per shape); every block at 3000³ (aligned copies);
# the FP8 GEMM's edge checks, squares and LLM shapes against cuBLASLt; FP8 split-K forced on odd shapes;
# optionally FP8 variants at 8192 and 16384 (FP8_VARIANTS, flag sets separated by ';'). Run from the repository root on the GPU machine; $C is the
# carried folder (the release binary, plot_gemm.py); writes under $OUT. Optional parts: TILES3000=1 (every
# block at 3000³), ATTN=1 (attention check shapes), SANITIZE=1 (memcheck of the split and promoted kernels).
set -uo pipefail
OUT="${OUT:-bench/out}"
C="${C:-.carry-gemm}"
K="$C/kittens"
mkdir -p "$OUT"
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
for k in gemm_bf16 gemm_fp8; do $K compile $k --target sm_90a --json > "$OUT/compile_$k.json"; done
grep -h '"kernel"\|"registers"\|spill_stores' "$OUT"/compile_*.json
echo "== bf16 split-K forced (3 slices) on odd shapes"
timeout 20 $K bench gemm_bf16 --split-k 3 --shapes 16x4096x14336 --iters 5 --warmup 1 \
  --checks 77x96x1000,129x264x3000,1000x1032x520,1x8x1,3000x1000x777 --json "$OUT/bf16_split_checks.json" 2>&1 \
  | grep -E "check|ERROR|FAILED|\[1/" | head -12
echo "== bf16 shape-aware choice: squares, LLM sweep, alignment probes, edge checks"
timeout "${T1:-115}" $K bench gemm_bf16 --sweep squares,llm --shapes 3000x3000x3000,3072x3072x3072,3008x3008x3008 \
  --warmup 5 --budget-ms "${BUDGET:-150}" --json "$OUT/bf16.json" 2>&1 | tee "$OUT/bf16.txt" | grep -v '^  \['
if [ -n "${TILES3000:-}" ]; then
  echo "== bf16 every block at 3000^3 (A and B copied into aligned rows)"
  timeout 20 $K bench gemm_bf16 --tiles all --shapes 3000x3000x3000 --checks none --warmup 3 --budget-ms 60 \
    --json "$OUT/bf16_3000.json" 2>&1 | grep -E "3000x|geometric"
fi
if [ -n "${ATTN:-}" ]; then
  echo "== attn_fwd check shapes (the C-slab store is shared with the GEMMs)"
  timeout 60 $K bench attn_fwd --checks only --iters 1 --warmup 0 2>&1 | tail -12
fi
if [ -n "${SANITIZE:-}" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  echo "== compute-sanitizer memcheck: split-K and promoted fp8 on small shapes"
  timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $K bench gemm_fp8 --split-k 3 --sizes 256 \
    --shapes 16x520x1040 --iters 1 --warmup 0 --checks 77x40x1040 2>&1 | tail -4
  timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $K bench gemm_bf16 --split-k 3 --sizes 256 \
    --iters 1 --warmup 0 --checks 77x96x1000,77x99x13 2>&1 | tail -4
fi
echo "== fp8: edge checks, squares, LLM shapes"
timeout 70 $K bench gemm_fp8 --sizes 2048,4096,8192,16384 \
  --shapes 16x4096x4096,16x4096x14336,16x8192x28672,64x4096x14336,64x28672x4096,256x4096x14336,256x8192x8192,16x28672x4096,4096x14336x4096 \
  --warmup 3 --budget-ms 100 --json "$OUT/fp8.json" 2>&1 | tee "$OUT/fp8.txt" | grep -v '^  \[' | head -60
echo "== fp8 split-K forced (3 slices) on odd shapes"
timeout 20 $K bench gemm_fp8 --split-k 3 --shapes 16x4096x14336 --iters 5 --warmup 1 \
  --checks 77x40x1040,1001x264x4096,1000x1032x528 --json "$OUT/fp8_split_checks.json" 2>&1 | grep -E "check|ERROR|FAILED|\[1/"
if [ -n "${FP8_VARIANTS:-}" ]; then
  i=0
  IFS=';' read -ra VS <<< "$FP8_VARIANTS"
  for v in "${VS[@]}"; do
    i=$((i+1)); echo "== fp8 variant $i: $v"
    timeout 30 $K bench gemm_fp8 --sizes 8192,16384 --checks none --warmup 3 --budget-ms 60 $v \
      --json "$OUT/fp8_variant$i.json" 2>&1 | grep -E "\[|geometric"
  done
fi
gpu | tee -a "$OUT/gpu.txt"
for f in bf16 fp8; do [ -f "$OUT/$f.json" ] && python3 "$C/plot_gemm.py" "$OUT/$f.json" "$OUT/$f.png" 2>&1 | tail -2; done
cd "$OUT" && tar czf all.tgz ./*.json ./*.txt 2>/dev/null
