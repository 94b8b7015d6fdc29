#!/usr/bin/env bash
# One device call for the shape-aware gemm_bf16: each block shape alone on a small square and the
# check-only shapes (ragged edges, N or K no multiple of 8: the padded path) under a short timeout (a
# protocol bug hangs, it does not crash), then the squares and the LLM sweep with the blocks that passed
# (TILES=all: every block at every shape, to fit the choice; TILES=auto: the choice). Run from the
# repository root on the GPU machine with the release binary at $K; writes $OUT/*.json, logs, plots.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K="${K:-.carry/kittens}"
TILES="${TILES:-all}"
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
ok=()
for t in 128x256 256x128 128x128 64x256 64x128; do
  if timeout 40 $K bench gemm_bf16 --tiles "$t" --shapes 1000x1032x520 --iters 3 --warmup 1 \
      --checks 3000x1000x777,77x99x13,1x1x1,129x264x72,4160x8184x1032 >"$OUT/sanity_$t.txt" 2>&1; then
    ok+=("$t")
  else
    echo "block $t: sanity failed or hung (rc $?)"; tail -5 "$OUT/sanity_$t.txt"
  fi
done
echo "blocks that passed: ${ok[*]}"
[ ${#ok[@]} -gt 0 ] || exit 1
list=$(IFS=,; echo "${ok[*]}")
[ "$TILES" = auto ] && list=auto
timeout "${T1:-80}" $K bench gemm_bf16 --tiles "$list" --sweep squares --shapes 3072x3072x3072,6144x6144x6144 \
  --checks none --warmup 3 --budget-ms "${BUDGET:-150}" --json "$OUT/squares.json" \
  2>&1 | tee "$OUT/squares.txt" | grep -v '^  \['
timeout "${T2:-170}" $K bench gemm_bf16 --tiles "$list" --sweep llm \
  --checks none --warmup 3 --budget-ms "${BUDGET:-150}" --json "$OUT/llm.json" \
  2>&1 | tee "$OUT/llm.txt" | grep -v '^  \['
gpu | tee -a "$OUT/gpu.txt"
for f in squares llm; do [ -f "$OUT/$f.json" ] && python3 "$(dirname "$0")/plot_gemm.py" "$OUT/$f.json" "$OUT/$f.png"; done
cd "$OUT" && tar czf sanity.tgz sanity_*.txt && rm -f sanity_*.txt
