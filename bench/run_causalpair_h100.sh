#!/usr/bin/env bash
# Causal attention with the paired persistent grid (KernelBuilder::pair_long_short) and the 128x192
# GEMM block, in ONE device call of at most 600 s. Needs .carry/kittens (release binary of this
# checkout) and .carry/python (scripts/python-gpu-bundle.sh). In order of importance:
#   1. bench/attn_paired_check.py: causal forward (both alignments) and backward with more blocks
#      than SMs, odd lengths, GQA, D64/D128, against float64 by the rule;
#   2. python -m kittens.bench attn against SDPA's cuDNN backend (B16 H16 N2048-8192, B2 H24 N16384,
#      causal and not), then the backward, then against the flash backend (N2048, N4096);
#   3. gemm_bf16 at 3000, 3008, 3072 cubed with blocks 128x192, 128x128, 128x256;
#   4. compute-sanitizer memcheck and racecheck on the small paired check.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
echo "== paired causal attention, forward and backward, against float64"
timeout 70 python3 bench/attn_paired_check.py 2>&1 | tail -16 | tee "$OUT/paired_check.txt"
echo "== attention vs SDPA (cudnn)"
timeout 80 python3 -m kittens.bench attn --backend cudnn --seqs 2048,4096,8192 --iters 20 --warmup 5 \
  --json "$OUT/attn_cudnn_b16.json" 2>&1 | tail -8
timeout 45 python3 -m kittens.bench attn --backend cudnn --batch 2 --heads 24 --heads-kv 24 --seqs 16384 \
  --iters 10 --warmup 3 --json "$OUT/attn_cudnn_n16k.json" 2>&1 | tail -4
echo "== attention backward vs SDPA"
timeout 150 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --iters 10 --warmup 2 \
  --json "$OUT/bwd.json" 2>&1 | tee "$OUT/bwd.txt" | tail -16
echo "== attention vs SDPA (flash)"
timeout 50 python3 -m kittens.bench attn --backend flash --seqs 2048,4096 --iters 20 --warmup 5 \
  --json "$OUT/attn_flash_b16.json" 2>&1 | tail -6
echo "== gemm_bf16: the 128x192 block at 3000-3072 cubed"
timeout 40 $K bench gemm_bf16 --shapes 3000x3000x3000,3008x3008x3008,3072x3072x3072 \
  --tiles 128x192,128x128,128x256 --checks none --json "$OUT/gemm_192.json" 2>&1 | tail -14 | tee "$OUT/gemm_192.txt"
if [ -x $SAN ]; then
  echo "== memcheck and racecheck on the small paired check"
  timeout 60 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -4 | tee "$OUT/memcheck.txt"
  timeout 60 $SAN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -4 | tee "$OUT/racecheck.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
