#!/usr/bin/env bash
# The attention backward after the query blocks' zero-started chains (P by one FMA per score, the
# log-sum-exp as a row vector) and Sᵀ turns by default, against the wheel of 3857931 (.carry/prev:
# lean statistic loads, turns by KITTENS_ATTN_BWD_TURNS=scores) in the same call. ONE device call of
# at most 600 s; everything under $OUT goes into one tarball. In order:
#   1. checks against float64 by the rule: bench/attn_paired_check.py, bench/attn_bwd_atomic_check.py;
#   2. python -m kittens.bench attn --backward: this wheel, then the previous one (D128, N 2048-8192);
#   3. compute-sanitizer memcheck and racecheck on the small paired check.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
NEW="$PYTHONPATH"
mkdir -p /tmp/site_prev
python3 -m pip install -q --no-deps --target /tmp/site_prev .carry/prev/kittens-*.whl
PREV="/tmp/site_prev:$NEW"  # the previous wheel's kittens shadows this one's
echo "== 1. checks against float64"
timeout 60 python3 bench/attn_paired_check.py 2>&1 | grep -E "bwd|all" | tail -7 | tee -a "$R/checks.txt"
timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -13 | tee -a "$R/checks.txt"
for v in new prev; do
  echo "== 2. $v: backward against SDPA"
  if [ $v = prev ]; then P="$PREV"; else P="$NEW"; fi
  PYTHONPATH="$P" KITTENS_ATTN_BWD_TURNS=scores timeout 110 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 \
    --extra "" --iters 10 --warmup 2 --json "$R/bwd_$v.json" 2>&1 | tee "$R/bwd_$v.txt" | tail -9
done
if [ -x $SAN ]; then
  echo "== 3. memcheck and racecheck"
  timeout 70 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee "$R/sanitizer.txt"
  timeout 200 $SAN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
