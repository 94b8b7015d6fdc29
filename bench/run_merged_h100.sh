#!/usr/bin/env bash
# The merged tree on an H100 in ONE device call (< 300 s): the release binary (.carry/kittens) and the
# wheel (.carry/python, scripts/python-gpu-bundle.sh) of the same commit. Checks, not speed: the GEMM's
# default check shapes and 3000³ (auto loads), the attention forward's check shapes, the paired causal
# forward and backward against float64, and the Python GPU tests of attention, matmul and rotary.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== gemm_bf16: default check shapes, 3000^3 and 3072^3 (auto)"
timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000,3072x3072x3072 --budget-ms 60 --json "$OUT/gemm.json" 2>&1 \
  | grep -v "^  check" | tail -12 | tee "$OUT/gemm.txt"
echo "== attn_fwd: check shapes"
timeout 60 $K bench attn_fwd --checks only --iters 1 --warmup 0 2>&1 | tail -14 | tee "$OUT/attn_checks.txt"
. bench/gpu_python_env.sh
echo "== paired causal attention against float64"
timeout 60 python3 bench/attn_paired_check.py 2>&1 | tail -11 | tee "$OUT/paired_check.txt"
echo "== pytest (GPU): attention, matmul, rotary"
timeout 110 python3 -m pytest -q -rs -x -k "attention or matmul or rotary" python/tests/test_gpu.py 2>&1 | tail -8 | tee "$OUT/pytest.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
