#!/usr/bin/env bash
# Run-to-run spread at one size: the lowered gemm_bf16 runs ROUNDS times, each run timed
# `--timing blocked` against cuBLAS; then the SASS of the kernel from the
# NVRTC cache. Run from the repository root on the GPU machine with the release binary at .carry/kittens
# and KITTENS_COMMIT set; writes $OUT/spread_ir_<round>.json, $OUT/log.txt, $OUT/sass.txt (at most
# 8 files come back: keep ROUNDS at most 6).
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SIZE="${SIZE:-8192}"
ROUNDS="${ROUNDS:-3}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r"
  timeout 90 $K bench gemm_bf16 --sizes "$SIZE" --iters 200 --timing blocked --checks none \
    --json "$OUT/spread_ir_$r.json" | grep -E "^ *$SIZE "
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
if command -v cuobjdump >/dev/null; then
  find "${KITTENS_CACHE:-$HOME/.cache/kittens}" -name '*.cubin' | while read -r f; do
    echo "== $f"; cuobjdump -sass "$f"
  done > "$OUT/sass.txt" 2>&1
fi
