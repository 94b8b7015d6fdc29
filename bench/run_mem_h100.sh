#!/usr/bin/env bash
# layernorm and rotary on the H100 in one device call, from a carried directory $C (default
# .carry-memk) holding python/ (scripts/python-gpu-bundle.sh's .carry/python), tests/ (this commit's
# python/tests) and, optionally, the release `kittens` binary. PARTS picks what runs (default all):
#   sweep   kittens bench layernorm (p = 0 and p = 0.1) and rotary: our kernels at several configurations
#   rotary  python -m kittens.bench rotary: ours vs torch eager and torch.compile
#   ln      python -m kittens.bench layernorm (p = 0 rows and one p = 0.1 row)
#   pytest  layernorm and rotary on CUDA against the CPU interpreter
# The files (gpu.txt, sweep_*.json, layernorm.json/.png, rotary.json/.png, pytest.txt) are written
# under $R and packed into $OUT/all.tgz after every part (a device call returns at most 8 files).
set -uo pipefail
C="${C:-.carry-memk}"
OUT="${OUT:-bench/out}"
SITE="${SITE:-/tmp/site}"
PARTS="${PARTS:-sweep rotary ln pytest}"
R="${R:-/tmp/memk-results}"
mkdir -p "$R" "$SITE"
export PYTHONUNBUFFERED=1
W="$C/python"
python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/numpy-*.whl
python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
    "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
python3 -c 'import kittens, torch; print("kittens", kittens.__version__, kittens.__file__, "torch", torch.__version__)'
has() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
pack() { tar -C "$R" -czf "$OUT/all.tgz" .; }
if has sweep && [ -x "$C/kittens" ]; then
  # The Rust binary finds NVRTC where the Python package does (a pip-installed nvidia-cuda-nvrtc).
  nv=$(python3 -c 'import os, kittens; kittens._find_nvrtc(); print(os.environ.get("KITTENS_NVRTC", ""))')
  [ -n "$nv" ] && export KITTENS_NVRTC="$nv"
  for p in 0 0.1; do
    echo "== kittens bench layernorm p=$p (configurations)"
    timeout "${SWEEP_TIMEOUT:-45}" "$C/kittens" bench layernorm --p "$p" --iters 20 \
        --shapes "${LN_SWEEP:-65536x2048}" --json "$R/sweep_layernorm_p$p.json"
  done
  echo "== kittens bench rotary (configurations)"
  timeout "${SWEEP_TIMEOUT:-45}" "$C/kittens" bench rotary --iters 20 --shapes "${ROPE_SWEEP:-16x16x4096x128}" \
      --json "$R/sweep_rotary.json"
  pack
fi
if has rotary; then
  echo "== python -m kittens.bench rotary"
  timeout "${BENCH_TIMEOUT:-100}" python3 -m kittens.bench rotary --iters "${ITERS:-30}" \
      --rope-shapes "${ROPE_SHAPES:-16x16x4096x128,16x16x8192x128}" \
      --json "$R/rotary.json" --plot "$R/rotary.png" 2>&1 | grep -v Warning
  pack
fi
if has ln; then
  echo "== python -m kittens.bench layernorm"
  timeout "${BENCH_TIMEOUT:-100}" python3 -m kittens.bench layernorm --iters "${ITERS:-30}" \
      --ln-shapes "${LN_SHAPES:-16x4096x2048,4x4096x8192}" --json "$R/layernorm.json" --plot "$R/layernorm.png" \
      2>&1 | grep -v Warning
  pack
fi
if has pytest; then
  echo "== pytest: layernorm and rotary on CUDA against the CPU interpreter"
  timeout "${PYTEST_TIMEOUT:-50}" python3 -m pytest -q -rs -s -k "layernorm or rotary or philox" \
      "$C"/tests/test_gpu.py 2>&1 | tee "$R/pytest.txt" | tail -15
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
pack
