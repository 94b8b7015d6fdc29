#!/usr/bin/env bash
# layernorm and rotary on the H100 in one device call, from a carried directory $C (default
# .carry-memk) holding python/ (scripts/python-gpu-bundle.sh's .carry/python), tests/ (this commit's
# python/tests) and, optionally, the release `kittens` binary. Writes under $OUT: gpu.txt,
# sweep_layernorm.json, sweep_rotary.json (kittens bench: our kernels at several configurations),
# layernorm.json/.png, rotary.json/.png (python -m kittens.bench: ours vs torch eager and torch.compile),
# pytest.txt.
set -uo pipefail
C="${C:-.carry-memk}"
OUT="${OUT:-bench/out}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$OUT" "$SITE"
W="$C/python"
python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/numpy-*.whl
python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
    "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import kittens, torch; print("kittens", kittens.__version__, kittens.__file__, "torch", torch.__version__)'
echo "== python -m kittens.bench layernorm"
timeout "${BENCH_TIMEOUT:-75}" python3 -m kittens.bench layernorm --iters "${ITERS:-30}" --ln-shapes "${LN_SHAPES:-16x4096x2048,4x4096x8192}" \
    --json "$OUT/layernorm.json" --plot "$OUT/layernorm.png" 2>&1 | grep -v Warning
echo "== python -m kittens.bench rotary"
timeout "${BENCH_TIMEOUT:-75}" python3 -m kittens.bench rotary --iters "${ITERS:-30}" --rope-shapes "${ROPE_SHAPES:-16x16x4096x128,16x16x8192x128}" \
    --json "$OUT/rotary.json" --plot "$OUT/rotary.png" 2>&1 | grep -v Warning
if [ -x "$C/kittens" ]; then
  # The Rust binary finds NVRTC where the Python package does (a pip-installed nvidia-cuda-nvrtc).
  nv=$(python3 -c 'import os, kittens; kittens._find_nvrtc(); print(os.environ.get("KITTENS_NVRTC", ""))')
  [ -n "$nv" ] && export KITTENS_NVRTC="$nv"
  echo "== kittens bench layernorm (configurations)"
  timeout "${SWEEP_TIMEOUT:-45}" "$C/kittens" bench layernorm --iters 20 --shapes "${LN_SWEEP:-65536x2048,16384x8192}" \
      --json "$OUT/sweep_layernorm.json"
  echo "== kittens bench rotary (configurations)"
  timeout "${SWEEP_TIMEOUT:-45}" "$C/kittens" bench rotary --iters 20 --shapes "${ROPE_SWEEP:-16x16x4096x128}" \
      --json "$OUT/sweep_rotary.json"
fi
echo "== pytest: layernorm and rotary on CUDA against the CPU interpreter"
timeout "${PYTEST_TIMEOUT:-50}" python3 -m pytest -q -rs -s -k "layernorm or rotary or philox" \
    "$C"/tests/test_gpu.py 2>&1 | tee "$OUT/pytest.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
