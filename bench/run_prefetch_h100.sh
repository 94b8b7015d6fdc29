#!/usr/bin/env bash
# The attention backward's key blocks with the next step's log-sum-exp loaded behind dV/dK, with and
# without warpgroup turns on S, against the previous wheel (.carry/prev, the commit before) in the
# same device call, in ONE call of at most 600 s. Needs .carry/python and .carry/prev. Everything
# under $OUT goes into one tarball (the device tool returns at most 8 files). In order:
#   1. checks against float64 by the rule: bench/attn_paired_check.py (both turn settings) and
#      bench/attn_bwd_atomic_check.py (the atomic form shares the key-block program);
#   2. python -m kittens.bench attn --backward: previous wheel (none, scores), this one (none, scores);
#   3. ncu of one key-block launch (B2 H16 N4096 D128) with turns on S;
#   4. compute-sanitizer memcheck and racecheck on the small paired check (turns on S).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
SAN=/usr/local/cuda/bin/compute-sanitizer
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
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
for v in prev new; do
  for t in none scores; do
    echo "== 2. $v $t: backward against SDPA"
    if [ $v = prev ]; then P="$PREV"; else P="$NEW"; fi
    PYTHONPATH="$P" KITTENS_ATTN_BWD_TURNS=$t timeout 110 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 \
      --extra "" --iters 10 --warmup 2 --json "$R/bwd_${v}_$t.json" 2>&1 | tee "$R/bwd_${v}_$t.txt" | tail -9
  done
done
echo "== 3. ncu of one key-block launch"
cat > /tmp/one_bwd.py <<'PY'
import torch, kittens
b, h, n, d = 2, 16, 4096, 128
mk = lambda: torch.randn(b, h, n, d, device="cuda").to(torch.bfloat16)
q, k, v, do = mk(), mk(), mk(), mk()
out, lse = kittens.attention(q, k, v, return_lse=True)
for _ in range(2):
    kittens._attention_backward(q, k, v, out, do, lse, False)
torch.cuda.synchronize()
PY
KITTENS_ATTN_BWD_TURNS=scores timeout 100 $NCU --kernel-name attn_bwd_sm90_lowered --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis python3 /tmp/one_bwd.py 2>&1 | grep -v "^==PROF==" > "$R/ncu_kv.txt"
grep -E "Duration|Throughput|Stall|Cycles Per|Eligible" "$R/ncu_kv.txt" | head -20
if [ -x $SAN ]; then
  echo "== 4. memcheck and racecheck"
  KITTENS_ATTN_BWD_TURNS=scores timeout 60 $SAN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee "$R/sanitizer.txt"
  KITTENS_ATTN_BWD_TURNS=scores timeout 90 $SAN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
