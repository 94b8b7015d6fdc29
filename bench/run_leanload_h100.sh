#!/usr/bin/env bash
# The attention backward after the lean statistic loads (one pointer per thread, constant offsets),
# with and without warpgroup turns on the key blocks' S, against the wheel of 02d42fb (.carry/prev:
# turns only) in the same call; checks of every kernel whose global loads changed. ONE device call of
# at most 600 s; everything under $OUT goes into one tarball. In order:
#   1. checks against float64 by the rule: bench/attn_paired_check.py (turns none and scores),
#      bench/attn_bwd_atomic_check.py, `kittens bench attn_fwd --checks lse` (the key split's merge
#      reads with load_global), split-K GEMM rows (their reduction too);
#   2. python -m kittens.bench attn --backward: previous wheel with turns, this one without and with;
#   3. compute-sanitizer memcheck and racecheck on the small paired check (turns on S).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
NEW="$PYTHONPATH"
mkdir -p /tmp/site_prev
python3 -m pip install -q --no-deps --target /tmp/site_prev .carry/prev/kittens-*.whl
PREV="/tmp/site_prev:$NEW"  # the previous wheel's kittens shadows this one's
for t in none scores; do
  echo "== 1. $t: checks against float64"
  KITTENS_ATTN_BWD_TURNS=$t timeout 60 python3 bench/attn_paired_check.py 2>&1 | grep -E "bwd|all" | tail -7 | tee -a "$R/checks.txt"
done
KITTENS_ATTN_BWD_TURNS=scores timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -13 | tee -a "$R/checks.txt"
timeout 60 $K bench attn_fwd --checks lse 2>&1 | tail -6 | tee -a "$R/checks.txt"
timeout 60 $K bench gemm_bf16 --shapes 16x4096x14336,64x4096x14336,3000x1000x777 --checks default 2>&1 | tail -12 | tee -a "$R/checks.txt"
for v in prev new; do
  for t in none scores; do
    [ $v = prev ] && [ $t = none ] && continue
    echo "== 2. $v $t: backward against SDPA"
    if [ $v = prev ]; then P="$PREV"; else P="$NEW"; fi
    PYTHONPATH="$P" KITTENS_ATTN_BWD_TURNS=$t timeout 110 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 \
      --extra "" --iters 10 --warmup 2 --json "$R/bwd_${v}_$t.json" 2>&1 | tee "$R/bwd_${v}_$t.txt" | tail -9
  done
done
if [ -x $SAN ]; then
  echo "== 3. memcheck and racecheck"
  KITTENS_ATTN_BWD_TURNS=scores timeout 70 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee "$R/sanitizer.txt"
  KITTENS_ATTN_BWD_TURNS=scores timeout 200 $SAN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
