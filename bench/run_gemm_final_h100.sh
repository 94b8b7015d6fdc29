#!/usr/bin/env bash
# One device call for the shape-aware gemm_bf16, after the fit (run_gemm_shapes_h100.sh): B as K x N on
# every block with the edge checks (a new path: a short timeout first), the shape-aware choice over the
# squares and the LLM sweep with the edge and padded checks (the headline figures), B as K x N timed on
# a few shapes, every block at the small-M shapes (deeper rings since the fit), and kittens.matmul's GPU
# tests from a carried wheel. Run from the repository root on the GPU machine; $C is the carried folder
# (the release binary, this script, plot_gemm.py, the wheel, the Python tests); writes under $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
C="${C:-.carry-gemmshapes}"
K="$C/kittens"
mkdir -p "$OUT"
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
small=""
for m in 16 64 256; do for nk in 4096x4096 6144x4096 4096x14336 28672x4096 8192x8192 57344x8192 8192x28672; do
  small="$small${small:+,}${m}x${nk}"; done; done
echo "== B as K x N: every block, one shape and the edge checks"
timeout 60 $K bench gemm_bf16 --b-layout kn --tiles all --shapes 1000x1032x520 --iters 3 --warmup 1 \
  --checks 77x99x13,3000x1000x777,129x264x72,1x1x1,4160x8184x1032 >"$OUT/kn_checks.txt" 2>&1
echo "rc=$?"; grep -E "check|ERROR|FAILED" "$OUT/kn_checks.txt" | head -30
echo "== shape-aware choice: squares, LLM sweep, alignment probes, edge checks"
timeout "${T1:-120}" $K bench gemm_bf16 --sweep squares,llm --shapes 3072x3072x3072,3000x3000x3008,3008x3008x3008 \
  --warmup 5 --budget-ms "${BUDGET:-200}" --json "$OUT/final.json" 2>&1 | tee "$OUT/final.txt" | grep -v '^  \['
echo "== B as K x N timed"
timeout 45 $K bench gemm_bf16 --b-layout kn --sizes 2048,4096,8192 \
  --shapes 16x6144x4096,256x8192x8192,4096x28672x4096,8192x8192x28672 --checks none --warmup 3 \
  --budget-ms 100 --json "$OUT/kn.json" 2>&1 | tee "$OUT/kn.txt" | grep -v '^  \['
echo "== every block at small M"
timeout 45 $K bench gemm_bf16 --tiles all --shapes "$small" --checks none --warmup 3 --budget-ms 80 \
  --json "$OUT/small_all.json" 2>&1 | grep -E "geometric|block " | tee "$OUT/small_all.txt"
gpu | tee -a "$OUT/gpu.txt"
for f in final kn small_all; do [ -f "$OUT/$f.json" ] && python3 "$C/plot_gemm.py" "$OUT/$f.json" "$OUT/$f.png"; done
echo "== kittens.matmul GPU tests"
if ls "$C"/kittens-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --target /tmp/site "$C"/kittens-*.whl
  PYTHONPATH=/tmp/site timeout 60 python3 -m pytest -q -rs "$C/tests/test_gpu.py" -k "not attention" 2>&1 | tail -15
fi
cd "$OUT" && tar czf logs.tgz kn_checks.txt small_all.txt 2>/dev/null; rm -f kn_checks.txt
