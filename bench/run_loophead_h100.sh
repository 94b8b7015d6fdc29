#!/usr/bin/env bash
# The sm_90a lowering's loop heads (commit groups in flight carried over the back edge, found by a
# fixpoint instead of assumed unknown), in ONE device call of at most 600 s. Needs .carry/kittens and
# .carry/python (scripts/python-gpu-bundle.sh after the last commit). In order of importance:
#   1. bench/attn_paired_check.py and bench/attn_bwd_atomic_check.py: forward and both backward forms
#      against float64 by the rule (odd lengths, GQA, D64/D128, causal both alignments);
#   2. python -m kittens.bench attn --backward: the two-launch backward against SDPA's cuDNN and flash
#      backends, every gradient checked (B16 H16 D128, N 2048-8192, causal and not);
#   3. the forward against cuDNN at N4096 (its loop head changed too) and gemm_fp8 (its K loop);
#   4. ncu of cuBLAS at 3000^3 (which kernel it runs where our TMA rows are off 128-byte lines);
#   5. compute-sanitizer memcheck and racecheck on the small paired check.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. correctness against float64"
timeout 70 python3 bench/attn_paired_check.py 2>&1 | tail -12 | tee "$OUT/checks.txt"
timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -14 | tee -a "$OUT/checks.txt"
echo "== 2. backward against SDPA"
timeout 150 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 \
  --json "$OUT/bwd.json" 2>&1 | tee "$OUT/bwd.txt" | tail -20
echo "== 3. forward at N4096 and gemm_fp8"
timeout 40 python3 -m kittens.bench attn --backend cudnn --seqs 4096 --iters 20 --warmup 5 \
  --json "$OUT/fwd.json" 2>&1 | tail -5 | tee "$OUT/other.txt"
timeout 40 $K bench gemm_fp8 --sizes 4096,8192 --json "$OUT/fp8.json" 2>&1 | tail -8 | tee -a "$OUT/other.txt"
echo "== 4. cuBLAS at 3000^3 under ncu"
timeout 60 $NCU --launch-skip 5 --launch-count 1 --section LaunchStats --section SpeedOfLight \
  --metrics lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum \
  python3 bench/cublas_probe.py 3000 3000 3000 2>&1 | grep -v "^==PROF==" | tail -45 > "$OUT/cublas3000_ncu.txt"
head -c 3000 "$OUT/cublas3000_ncu.txt"
python3 bench/cublas_probe.py 3000 3000 3000 2>&1 | tee -a "$OUT/cublas3000_ncu.txt"
python3 bench/cublas_probe.py 3072 3072 3072 2>&1 | tee -a "$OUT/cublas3000_ncu.txt"
if [ -x $SAN ]; then
  echo "== 5. memcheck and racecheck on the small paired check"
  timeout 60 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -4 | tee "$OUT/sanitizer.txt"
  timeout 60 $SAN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -4 | tee -a "$OUT/sanitizer.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
