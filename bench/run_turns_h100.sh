#!/usr/bin/env bash
# The attention backward's key blocks with warpgroup turns (BwdConfig::turns: none, scores, both,
# chosen per process by KITTENS_ATTN_BWD_TURNS), in ONE device call of at most 600 s. Needs
# .carry/python (scripts/python-gpu-bundle.sh after the last commit). In order:
#   1. bench/attn_paired_check.py per variant: forward and backward against float64 by the rule;
#   2. python -m kittens.bench attn --backward per variant (each against cuDNN and flash in its own
#      process: the ratios are what compare across processes);
#   3. ncu of one key-block launch (B2 H16 N4096 D128) of the default: where its time goes.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
SAN=/usr/local/cuda/bin/compute-sanitizer
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
for t in scores both; do
  echo "== 1. $t: correctness against float64"
  KITTENS_ATTN_BWD_TURNS=$t timeout 60 python3 bench/attn_paired_check.py 2>&1 | grep -E "bwd|all" | tail -10 | tee -a "$OUT/checks.txt"
done
for t in none scores both; do
  echo "== 2. $t: backward against SDPA"
  KITTENS_ATTN_BWD_TURNS=$t timeout 120 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --extra "" \
    --iters 10 --warmup 2 --json "$OUT/bwd_$t.json" 2>&1 | tee "$OUT/bwd_$t.txt" | tail -9
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
timeout 120 $NCU --kernel-name attn_bwd_sm90_lowered --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  python3 /tmp/one_bwd.py 2>&1 | grep -v "^==PROF==" > "$OUT/ncu_kv.txt"
grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|attn_bwd" "$OUT/ncu_kv.txt" | head -40
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
