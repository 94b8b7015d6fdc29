#!/usr/bin/env bash
# One device call comparing benchmark variants (default list: the lowered gemm_bf16 timed blocked and
# interleaved), each checked (edge shapes too) and timed at every size against cuBLAS in its own run. Run from the repository root on the GPU machine with the release binary
# at .carry/kittens and KITTENS_COMMIT set; writes $OUT/gemm_<tag>.json and .png per variant.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SIZES="${SIZES:-2048,4096,8192,16384}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
while read -r tag args; do
  [ -z "$tag" ] && continue
  echo "== $tag: $args"
  if ! timeout 60 $K bench gemm_bf16 --sizes 2048 --iters 3 --warmup 1 --checks none $args; then
    echo "$tag: sanity failed or hung, skipped"; continue
  fi
  timeout 180 $K bench gemm_bf16 --sizes "$SIZES" $args --json "$OUT/gemm_$tag.json" \
    && python3 bench/plot_gemm.py "$OUT/gemm_$tag.json" "$OUT/gemm_$tag.png"
done <<< "${VARIANTS:-$'ir --timing blocked\nir_interleaved --timing interleaved'}"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
