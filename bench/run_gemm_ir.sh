#!/usr/bin/env bash
# One device call for the lowered gemm_bf16: sanity at 2048 with a short timeout (a protocol bug hangs,
# it does not crash), then correctness at edge shapes and timing with `--timing blocked` for the kernel
# lowered from the tile program against cuBLAS; then once more to see the run-to-run spread. Run from the
# repository root on the GPU machine with the release binary at .carry/kittens and KITTENS_COMMIT set;
# writes $OUT/gemm_<tag>.json and .png, $OUT/log.txt, $OUT/gpu.txt.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SIZES="${SIZES:-2048,4096,8192,16384}"
# Partial tiles on every edge; one K step per tile over many tiles (phase carry-over in the persistent
# loop); K steps not a multiple of the 3 ring slots over many tiles; a single row; N of one 8-column group.
CHECKS="${CHECKS:-1000x1032x520,128x256x64,4160x8184x1032,8192x8192x64,129x264x72,1x8x8,256x8x8192}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
if ! timeout 60 $K bench gemm_bf16 --sizes 2048 --iters 3 --warmup 1 --checks 1000x1032x520,128x256x64; then
  echo "ir: sanity failed or hung"
  exit 1
fi
run() { # tag, args...
  local tag=$1; shift
  echo "== $tag: $*"
  timeout 150 $K bench gemm_bf16 --sizes "$SIZES" --timing blocked "$@" --json "$OUT/gemm_$tag.json" \
    && python3 bench/plot_gemm.py "$OUT/gemm_$tag.json" "$OUT/gemm_$tag.png"
}
run ir --checks "$CHECKS"
run ir_again --checks none
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
# The main loop's SASS, from the NVRTC cache, when the toolkit's disassembler is there.
if [ -n "${SASS:-}" ] && command -v cuobjdump >/dev/null; then
  find "${KITTENS_CACHE:-$HOME/.cache/kittens}" -name '*.cubin' | while read -r f; do
    echo "== $f"; cuobjdump -sass "$f"
  done > "$OUT/sass.txt" 2>&1
fi
