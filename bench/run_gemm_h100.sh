#!/usr/bin/env bash
# One device call: sanity pass, the benchmark, edge-shape checks and the plot of the lowered gemm_bf16.
# Run from the repository root on the GPU machine with the release binary at .carry/kittens and
# KITTENS_COMMIT set; writes to $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader; }
gpu | tee "$OUT/gpu.txt"
echo "== sanity: 2048, 5 launches, no edge checks"
timeout 90 $K bench gemm_bf16 --sizes 2048 --iters 5 --warmup 2 --checks none || { echo "sanity failed: $?"; exit 1; }
echo "== benchmark"
timeout 300 $K bench gemm_bf16 --sizes "${SIZES:-2048,4096,8192,16384}" --checks none --json "$OUT/gemm.json"
gpu | tee -a "$OUT/gpu.txt"
echo "== edge-shape checks"
timeout 90 $K bench gemm_bf16 --sizes 512 --iters 3 --warmup 1 --json "$OUT/checks.json"
python3 bench/plot_gemm.py "$OUT/gemm.json" "$OUT/gemm.png" && echo "plot written"
