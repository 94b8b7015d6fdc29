#!/usr/bin/env bash
# The attention backward, this wheel against a previous one (.carry/prev, optional) in ONE device call
# of at most 600 s: the ratios to cuDNN and FlashAttention-2 of separate processes compare because
# each process times SDPA itself. Everything under $OUT goes into one tarball. Needs .carry/python
# (scripts/python-gpu-bundle.sh after the last commit). Variables:
#   RUNS   the timed runs, `wheel:turns` with wheel `new` or `prev` and turns none|scores|both
#          (KITTENS_ATTN_BWD_TURNS), default "new:none new:scores";
#   CHECKS 1: first bench/attn_paired_check.py (forward and backward) and
#          bench/attn_bwd_atomic_check.py against float64 by the rule, turns `scores`;
#   EXTRA  1: also `kittens bench attn_fwd --checks lse` and split-K / padded GEMM checks (kernels
#          whose global loads share the lowering);
#   NCU    1: ncu of one key-block launch (B2 H16 N4096 D128);
#   SAN    1: compute-sanitizer memcheck and racecheck on the small paired check (and on the small
#          atomic-dQ cases with FORM=both);
#   FORM   the backward form(s) timed: two (default), atomic or both (--bwd-form);
#   SEQS   the sequence lengths timed (default 2048,4096,8192);
#   GEMM   1: gemm_bf16 at 4096^3 with its check shapes (its TMA-store epilogue's barriers).
# The calls of 2026-11-25 (bench/results/h200-2026-11-25-bwdlean/README.md) name their variables.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
SAN_BIN=/usr/local/cuda/bin/compute-sanitizer
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
NEW="$PYTHONPATH"
PREV="$NEW"
if ls .carry/prev/kittens-*.whl >/dev/null 2>&1; then
  mkdir -p /tmp/site_prev
  python3 -m pip install -q --no-deps --target /tmp/site_prev .carry/prev/kittens-*.whl
  PREV="/tmp/site_prev:$NEW"  # the previous wheel's kittens shadows this one's
fi
if [ "${CHECKS:-1}" = 1 ]; then
  echo "== checks against float64"
  KITTENS_ATTN_BWD_TURNS=scores timeout 60 python3 bench/attn_paired_check.py 2>&1 | grep -E "ok|FAIL|all" | tail -12 | tee -a "$R/checks.txt"
  KITTENS_ATTN_BWD_TURNS=scores timeout 60 python3 bench/attn_bwd_atomic_check.py 2>&1 | tail -13 | tee -a "$R/checks.txt"
fi
if [ "${EXTRA:-0}" = 1 ]; then
  timeout 60 .carry/kittens bench attn_fwd --checks lse 2>&1 | tail -6 | tee -a "$R/checks.txt"
  timeout 60 .carry/kittens bench gemm_bf16 --shapes 16x4096x14336,64x4096x14336,3000x1000x777 --checks default 2>&1 | tail -12 | tee -a "$R/checks.txt"
fi
for run in ${RUNS:-new:none new:scores}; do
  v=${run%%:*}; t=${run#*:}
  echo "== $v $t: backward against SDPA"
  if [ "$v" = prev ]; then P="$PREV"; else P="$NEW"; fi
  PYTHONPATH="$P" KITTENS_ATTN_BWD_TURNS=$t timeout 150 python3 -m kittens.bench attn --backward --seqs "${SEQS:-2048,4096,8192}" \
    --extra "" --bwd-form "${FORM:-two}" --iters 10 --warmup 2 --json "$R/bwd_${v}_$t.json" 2>&1 | tee "$R/bwd_${v}_$t.txt" | tail -9
done
if [ "${NCU:-0}" = 1 ]; then
  echo "== ncu of one key-block launch"
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
  KITTENS_ATTN_BWD_TURNS=scores timeout 100 $NCU_BIN --kernel-name attn_bwd_sm90_lowered --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis python3 /tmp/one_bwd.py 2>&1 | grep -v "^==PROF==" > "$R/ncu_kv.txt"
  grep -E "Duration|Throughput|Eligible" "$R/ncu_kv.txt" | head -12
fi
if [ "${SAN:-0}" = 1 ] && [ -x $SAN_BIN ]; then
  echo "== memcheck and racecheck"
  KITTENS_ATTN_BWD_TURNS=scores timeout 70 $SAN_BIN --tool memcheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee "$R/sanitizer.txt"
  KITTENS_ATTN_BWD_TURNS=scores timeout 200 $SAN_BIN --tool racecheck python3 bench/attn_paired_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
  if [ "${FORM:-two}" != two ]; then
    timeout 90 $SAN_BIN --tool memcheck python3 bench/attn_bwd_atomic_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
    timeout 200 $SAN_BIN --tool racecheck python3 bench/attn_bwd_atomic_check.py small 2>&1 | tail -3 | tee -a "$R/sanitizer.txt"
  fi
fi
if [ "${GEMM:-0}" = 1 ]; then
  timeout 60 .carry/kittens bench gemm_bf16 --sizes 4096 --json "$R/gemm.json" 2>&1 | tail -12 | tee "$R/gemm.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
