#!/usr/bin/env bash
# The attention forward's features and speed on an H100, one device call per part:
#   bash bench/run_attnfwd_h100.sh check   the log-sum-exp, differing lengths and both causal alignments
#                                          (`kittens bench attn_fwd --checks lse`, every element by the
#                                          rule), the older check shapes, memcheck and racecheck on the
#                                          new cases, the Python GPU tests of attention
#   bash bench/run_attnfwd_h100.sh final   the same checks, then the timed Rust shapes and the Python
#                                          benchmark against SDPA's cuDNN and flash backends
# Reads everything from $C (default .carry-attnfwd): `kittens` (release binary of this checkout),
# `python/` (scripts/python-gpu-bundle.sh) and `tests/` (python/tests). Writes logs and JSON under $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
C="${C:-.carry-attnfwd}"
K=$C/kittens
part="${1:?check or final}"
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== log-sum-exp, lengths, alignments"
timeout 100 $K bench attn_fwd --checks lse --json "$OUT/lse.json" 2>&1 | tail -9
echo "== older check shapes"
timeout 60 $K bench attn_fwd --checks only --iters 1 --warmup 0 2>&1 | tail -13
if [ -x $SAN ]; then
  echo "== memcheck, racecheck on the log-sum-exp cases"
  timeout 100 $SAN --tool memcheck $K bench attn_fwd --checks lse 2>&1 | tail -3
  timeout 100 $SAN --tool racecheck $K bench attn_fwd --checks lse 2>&1 | tail -3
fi
SITE=/tmp/site
mkdir -p "$SITE"
W=$C/python
python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
    "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
echo "== pytest: attention on CUDA"
timeout 150 python3 -m pytest -q -rs -k "attention" $C/tests/test_gpu.py 2>&1 | tail -12 | tee "$OUT/pytest.txt"
if [ "$part" = final ]; then
  echo "== Rust timed shapes"
  timeout 150 $K bench attn_fwd --checks none --iters 20 --warmup 3 ${VARIANTS:+--variants} --json "$OUT/attn.json" 2>&1 | tail -16
  for be in cudnn flash; do
    echo "== attention vs SDPA ($be)"
    timeout 100 python3 -m kittens.bench attn --backend $be --seqs 2048,4096,8192 --iters 20 --warmup 5 \
      --json "$OUT/attn_${be}_b16.json" 2>&1 | tail -8
  done
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
