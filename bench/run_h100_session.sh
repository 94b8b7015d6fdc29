#!/usr/bin/env bash
# One device call that checks the merged tree on an H100: the Rust CLI (lowered gemm_bf16 vs cuBLAS with
# the per-row check rule, memory refusal, NVRTC cache), then the Python package (bench/run_python_h100.sh).
# Needs .carry/kittens (release binary built from the checkout) and .carry/python (scripts/python-gpu-bundle.sh).
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "== kittens bench gemm_bf16: sizes, blocked timing, check shapes incl. the formerly failing ones"
timeout 200 $K bench gemm_bf16 --sizes 2048,4096,8192 --timing blocked \
  --checks 6144x11008x4096,3000x1000x777,1000x1032x520,129x264x72,1x8x8 --json "$OUT/rust_gemm_checks.json" \
  2>&1 | tee "$OUT/rust_gemm_checks.txt" | tail -20; echo "rc=${PIPESTATUS[0]}"
echo "== kittens bench gemm_bf16 --sizes 250000 (must be refused before allocating)"
( time timeout 60 $K bench gemm_bf16 --sizes 250000 --checks none ) 2>&1 | tail -6; echo
echo "== NVRTC cache: first compile fresh, second cached"
for i in 1 2; do KITTENS_CACHE=$PWD/kc timeout 120 $K compile gemm_bf16 --target sm_90a --json | grep -E '"cached"|spill'; done
ls kc/cuda | head
echo "== Python package"
SIZES=2048,4096,8192 SKIP_TRAIN=${SKIP_TRAIN:-1} OUT="$OUT" bash bench/run_python_h100.sh 2>&1 | tail -60
