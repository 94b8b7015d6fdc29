#!/usr/bin/env bash
# The attention backward on the H100 in one device call, each part switched on by its variable: TESTS
# (python/tests/test_gpu_backward.py), MEMCHECK (compute-sanitizer memcheck on bench/attn_bwd_small.py;
# RACECHECK too), BENCH (python -m kittens.bench attn --backward: SEQS, EXTRA, ITERS), PROFILE (per-kernel
# times, bench/attn_bwd_profile.py), TRAIN (python -m kittens.train_demo, STEPS). Run from the repository
# root with the kittens wheel in $CARRY/python (scripts/python-gpu-bundle.sh; CARRY defaults to .carry).
# Writes under $OUT. bench/results/h100-2026-11-23-attnbwd was taken with:
#   TESTS=1 MEMCHECK=1 BENCH=1 SEQS=2048,4096,8192 EXTRA=16x16x4x4096x128,16x16x16x4096x64 ITERS=8 \
#   PROFILE=1 TRAIN=1 STEPS=200 bash bench/run_attnbwd_h100.sh
set -uo pipefail
OUT="${OUT:-bench/out}"
C="${CARRY:-.carry}"
SITE=/tmp/site
mkdir -p "$SITE" "$OUT"
python3 -m pip install -q --no-deps --target "$SITE" "$C"/python/kittens-*.whl
export PYTHONPATH="$SITE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import kittens, torch; print("kittens", kittens.__version__, kittens.__file__, "torch", torch.__version__)'
if [ -n "${TESTS:-}" ]; then
  echo "== pytest"
  timeout "${PYTEST_TIMEOUT:-150}" python3 -m pytest -q -rs -s python/tests/test_gpu_backward.py 2>&1 | tee "$OUT/pytest.txt" | tail -25
fi
if [ -n "${MEMCHECK:-}" ]; then
  echo "== compute-sanitizer memcheck"
  timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/attn_bwd_small.py 2>&1 | tail -6 | tee "$OUT/memcheck.txt"
  if [ -n "${RACECHECK:-}" ]; then
    echo "== compute-sanitizer racecheck"
    timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool racecheck python3 bench/attn_bwd_small.py 2>&1 | tail -6 | tee "$OUT/racecheck.txt"
  fi
fi
if [ -n "${BENCH:-}" ]; then
  echo "== python -m kittens.bench attn --backward"
  timeout "${BENCH_TIMEOUT:-200}" python3 -m kittens.bench attn --backward --seqs "${SEQS:-2048,4096,8192}" \
    --extra "${EXTRA:-16x16x4x4096x128,16x16x16x4096x64}" --iters "${ITERS:-10}" --warmup 2 \
    --json "$OUT/bwd.json" --plot "$OUT/bwd.png" 2>&1 | tee "$OUT/bwd.txt" | tail -20
fi
if [ -n "${PROFILE:-}" ]; then
  echo "== per-kernel times"
  timeout 90 python3 bench/attn_bwd_profile.py 2>&1 | grep -v "^-" | cut -c1-160 | tee "$OUT/profile.txt" | tail -30
fi
if [ -n "${TRAIN:-}" ]; then
  echo "== python -m kittens.train_demo"
  timeout "${TRAIN_TIMEOUT:-300}" python3 -m kittens.train_demo --steps "${STEPS:-300}" --json "$OUT/train.json" \
    --plot "$OUT/train.png" 2>&1 | tail -25
fi
