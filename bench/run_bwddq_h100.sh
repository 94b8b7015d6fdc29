#!/usr/bin/env bash
# The attention backward's FlashAttention-3 form (dQ added with f32 atomics by the key blocks; three
# launches) against the two-launch default, in ONE device call of under 300 s. Needs .carry/python
# (scripts/python-gpu-bundle.sh, run after the last commit: the wheel embeds HEAD). Writes at most 8
# files under $OUT. In order:
#   a. bench/attn_bwd_atomic_check.py: the atomic form against float64 by the rule (odd lengths, causal
#      and not, GQA, D64/D128, both memory orders, more key blocks than SMs), beside the two-launch form;
#   b. compute-sanitizer memcheck on its small cases;
#   c. python -m kittens.bench attn --backward --bwd-form both: both forms timed in the same process
#      against SDPA's cuDNN and flash backends, every gradient checked against float64 (B16 H16 D128,
#      N 2048-8192, causal and not; --extra "" drops the default GQA/D64 timing rows to stay in time).
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
echo "== a. atomic-dQ backward against float64"
timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -17 | tee "$OUT/atomic_check.txt"
if [ -x $SAN ]; then
  echo "== b. memcheck on the small atomic cases"
  timeout 50 $SAN --tool memcheck python3 bench/attn_bwd_atomic_check.py small 2>&1 | tail -5 | tee "$OUT/memcheck.txt"
fi
echo "== c. backward forms against SDPA"
timeout 160 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 \
  --json "$OUT/bwd_forms.json" 2>&1 | tee "$OUT/bwd_forms.txt" | tail -32
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
