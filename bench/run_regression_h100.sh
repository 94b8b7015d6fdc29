#!/usr/bin/env bash
# The regression round after the programmatic launches (strip kernels and the Hopper lowering wait for
# the grid before at entry): the attention forward and backward, the GEMMs, the training demo, in ONE
# device call of at most 600 s; everything under $OUT goes into one tarball. In order:
#   1. checks against float64 by the rule: bench/attn_paired_check.py (forward and backward),
#      bench/attn_bwd_atomic_check.py; gemm_bf16 (TMA and cp.async loads) and gemm_fp8 check shapes;
#   2. python -m kittens.bench attn --backward (B16 H16 D128 N 2048-8192 causal and not, GQA, D64)
#      with its plot; the forward against cuDNN at N 4096 and 8192;
#   3. gemm_bf16 at 4096^3, 8192^3 and 3000^3, gemm_fp8 at 4096^3 and 8192^3 against cuBLAS(Lt);
#   4. python -m kittens.train_demo (SDPA vs kittens attention, 150 steps);
#   5. compute-sanitizer memcheck on the small paired check and on GEMMs with the programmatic
#      launches (copy then GEMM, GEMM then split-K reduction).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. checks"
timeout 60 python3 bench/attn_paired_check.py 2>&1 | grep -E "ok|FAIL|all" | tail -12 | tee -a "$R/checks.txt"
timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -13 | tee -a "$R/checks.txt"
echo "== 2. backward and forward against SDPA"
timeout 170 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --iters 10 --warmup 2 \
  --json "$R/bwd.json" --plot "$R/bwd.png" 2>&1 | tee "$R/bwd.txt" | tail -14
timeout 50 python3 -m kittens.bench attn --backend cudnn --seqs 4096,8192 --iters 20 --warmup 5 \
  --json "$R/fwd.json" 2>&1 | tail -6 | tee "$R/fwd.txt"
echo "== 3. GEMMs"
timeout 60 $K bench gemm_bf16 --sizes 4096,8192 --shapes 3000x3000x3000 --json "$R/gemm.json" 2>&1 | tail -14 | tee "$R/gemm.txt"
timeout 40 $K bench gemm_bf16 --loads cp-async --shapes 3072x3072x3072 --json "$R/gemm_cp.json" 2>&1 | tail -12 | tee -a "$R/gemm.txt"
timeout 40 $K bench gemm_fp8 --sizes 4096,8192 --json "$R/fp8.json" 2>&1 | tail -10 | tee -a "$R/gemm.txt"
echo "== 4. training demo"
timeout 150 python3 -m kittens.train_demo --steps 150 --json "$R/train.json" --plot "$R/train.png" 2>&1 | tail -8 | tee "$R/train.txt"
if [ -x $SAN ]; then
  echo "== 5. memcheck"
  timeout 70 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee "$R/sanitizer.txt"
  timeout 90 $SAN --tool memcheck $K bench gemm_bf16 --shapes 1000x1032x520,16x4096x4096,3000x1000x777 --checks none --iters 2 --min-iters 1 --warmup 1 2>&1 | grep -E "SUMMARY|ok|FAIL" | tail -5 | tee -a "$R/sanitizer.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
