#!/usr/bin/env bash
# The GEMM issue's done-bar at one commit, in ONE device call: checks of every block (clusters 1 and
# 2, both B layouts) and the sweeps (llm, squares; 46 shapes) twice. Needs .carry/kittens (this commit).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for L in nk kn; do
  timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 1,2 --b-layout $L > "$R/checks_$L.txt" 2>&1
  echo "checks $L: $(grep -cE ' ok$' "$R/checks_$L.txt") ok"; grep -E "FAIL|rror" "$R/checks_$L.txt" | head -5
done
for r in 1 2; do
  timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep_$r.json" --plot "$R/sweep_$r.png" > "$R/sweep_$r.txt" 2>&1
  grep -E "geometric" "$R/sweep_$r.txt" | tail -1; grep -E "^ +3000x3000" "$R/sweep_$r.txt" | tail -1
done
tar -C "$R" -czf "$OUT/results.tgz" .
