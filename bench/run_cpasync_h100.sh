#!/usr/bin/env bash
# One device call (under 300 s: the timeouts add up to 290) for the cp.async loads of gemm_bf16 (issue 16): A and B read by the
# producer warpgroup's 16-byte cp.async copies in place, against TMA on rows copied into 128-byte
# aligned lines first. Parts:
#   1. correctness of the cp.async kernel: every block (`--tiles all`) at edge shapes (partial blocks,
#      K no multiple of 64) and 3000³, vs cuBLAS over every element and f64 spot checks; the default
#      check shapes with `--loads auto` (those with K no multiple of 8 cannot be read in place by
#      cp.async and go through TMA on padded copies)
#   2. compute-sanitizer memcheck on two small cp.async shapes
#   3. timing, `--tiles auto`, TMA+copy against cp.async, at 3000³, 3008³, 3072³, 2000x3000x3000
#   4. the squares sweep, both ways (skipped with SQUARES=0)
# Build on the host:  cargo build --release -p kittens-cli; mkdir -p .carry; cp target/release/kittens .carry/
# Reads $C/kittens (default .carry); writes logs and JSON under $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
C="${C:-.carry}"
K="$C/kittens"
SAN=/usr/local/cuda/bin/compute-sanitizer
mkdir -p "$OUT"
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
quick=(--iters 2 --min-iters 1 --warmup 1 --budget-ms 5)
echo "== 1a. cp.async, every block: edge shapes and 3000^3"
timeout 60 $K bench gemm_bf16 --loads cp-async --tiles all --shapes 129x264x72 "${quick[@]}" \
  --checks 1000x1032x520,3000x3000x3000,128x256x64,200x136x104,4160x8184x1032 \
  --json "$OUT/cp_checks_all_tiles.json" 2>&1 | tee "$OUT/cp_checks_all_tiles.txt" \
  | grep -E "registers|check|ERROR|FAILED|\[1/" | head -60
rc=${PIPESTATUS[0]}
echo "exit status $rc"
if [ "$rc" = 124 ]; then
  echo "== the cp.async kernel did not finish in 60 s (a barrier count or phase wrong?): stopping here"
  gpu | tee -a "$OUT/gpu.txt"
  exit 1
fi
echo "== 1b. default check shapes and the issue's shapes, auto loads (TMA, aligned copies where they pay)"
timeout 30 $K bench gemm_bf16 --loads auto --shapes 3000x3000x3000 "${quick[@]}" \
  --checks 1000x1032x520,128x256x64,4160x8184x1032,3000x1000x777,1x1x1,77x99x13,129x264x72 \
  --json "$OUT/auto_checks.json" 2>&1 | tee "$OUT/auto_checks.txt" | grep -E "registers|check|ERROR|FAILED|\[1/"
if [ -x "$SAN" ]; then
  echo "== 2. compute-sanitizer memcheck, cp.async at 129x264x72 and 77x96x1000 (and 200x136x104)"
  timeout 60 $SAN --tool memcheck $K bench gemm_bf16 --loads cp-async --shapes 129x264x72 \
    --iters 1 --min-iters 1 --warmup 0 --budget-ms 1 --checks 77x96x1000,200x136x104 2>&1 \
    | tee "$OUT/memcheck.txt" | tail -6
else
  echo "== 2. no compute-sanitizer at $SAN"
fi
echo "== 3. timing: TMA on aligned copies vs cp.async in place"
timeout 60 $K bench gemm_bf16 --tiles auto --loads tma-copy,cp-async \
  --shapes 3000x3000x3000,3008x3008x3008,3072x3072x3072,2000x3000x3000 --checks none \
  --warmup 5 --budget-ms 100 --json "$OUT/cp_timing.json" 2>&1 | tee "$OUT/cp_timing.txt" | grep -v "^  check"
if [ "${SQUARES:-1}" != 0 ]; then
  echo "== 4. squares, both ways"
  timeout 80 $K bench gemm_bf16 --tiles auto --loads tma-copy,cp-async --sweep squares --checks none \
    --warmup 3 --budget-ms 60 --json "$OUT/cp_squares.json" 2>&1 | tee "$OUT/cp_squares.txt" | grep -v "^  check"
fi
gpu | tee -a "$OUT/gpu.txt"
