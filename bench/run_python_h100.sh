#!/usr/bin/env bash
# The Python package on the H100, in one device call. Run from the repository root on the GPU machine with
# .carry/python/ made by scripts/python-gpu-bundle.sh (the kittens wheel and the test dependencies) and,
# for the side-by-side ratios, the release binary at .carry/kittens; KITTENS_COMMIT set. Writes under $OUT:
# pytest.txt, py_gemm.json/.png (python -m kittens.bench gemm), rust_gemm.json (kittens bench gemm, same
# sizes, same timing), py_attn.json (kittens.attention against SDPA in-process), train.json/.png
# (SKIP_TRAIN=1 leaves the training run out, to keep one call under ten minutes).
set -uo pipefail
OUT="${OUT:-bench/out}"
SITE="${SITE:-/tmp/site}"
SIZES="${SIZES:-2048,4096,8192,16384}"
mkdir -p "$OUT" "$SITE"
W=.carry/python
python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
# Test dependencies only where the machine lacks them (never shadow its own numpy).
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/numpy-*.whl
python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
    "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import kittens, torch; print("kittens", kittens.__version__, kittens.__file__, "torch", torch.__version__)'
echo "== pytest (CPU interpreter, torch CPU, CUDA)"
timeout "${PYTEST_TIMEOUT:-360}" python3 -m pytest -q -rs -s python/tests 2>&1 | tee "$OUT/pytest.txt"
echo "== python -m kittens.bench gemm"
timeout 150 python3 -m kittens.bench gemm --sizes "$SIZES" --json "$OUT/py_gemm.json" --plot "$OUT/py_gemm.png"
if [ -x .carry/kittens ]; then
  echo "== kittens bench gemm (Rust, cuBLAS from Rust), same sizes and timing"
  timeout 150 .carry/kittens bench gemm_bf16 --sizes "$SIZES" --checks none --json "$OUT/rust_gemm.json" | tail -8
fi
echo "== python -m kittens.bench attn (kittens.attention against SDPA)"
timeout 150 python3 -m kittens.bench attn --seqs 1024,4096 --iters 30 --json "$OUT/py_attn.json"
if [ -z "${SKIP_TRAIN:-}" ]; then
echo "== python -m kittens.train_demo (SDPA arm; the kittens arm reports what it needs)"
timeout "${TRAIN_TIMEOUT:-400}" python3 -m kittens.train_demo --steps "${STEPS:-300}" --json "$OUT/train.json" --plot "$OUT/train.png"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
