#!/usr/bin/env bash
# Checks the merged tree on an H100 in two device calls (each under the ten-minute limit):
#   bash bench/run_h100_session.sh rust    the CLI: attention (check shapes, memcheck, racecheck, timed,
#                                          both loop forms), FP8 GEMM vs cuBLASLt, BF16 GEMM edge shapes
#                                          on every block and both B layouts, layernorm/rotary sweeps
#   bash bench/run_h100_session.sh python  the Python package: GPU tests, attention vs SDPA's cuDNN and
#                                          flash backends in one process, layernorm and rotary vs torch
#   bash bench/run_h100_session.sh merged  one call after merging many branches: the attention's LSE and
#                                          length checks with memcheck, GEMM edge and split-K shapes
#                                          (bf16, fp8), the Python GPU tests (forward and backward), then
#                                          attention forward and backward vs cuDNN and layernorm/rotary
# Needs .carry/kittens (release binary of this checkout) and, for `python`, .carry/python
# (scripts/python-gpu-bundle.sh). Writes logs and JSON under $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
part="${1:?rust, python or merged}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu-$part.txt"
if [ "$part" = rust ]; then
  echo "== attn_fwd: check shapes, sanitizers, timed shapes (both loop forms)"
  RACECHECK=1 VARIANTS=1 ITERS=20 TIMEOUT=200 OUT="$OUT/attn" K=$K bash bench/run_attn_h100.sh 2>&1 | tail -45
  echo "== gemm_fp8 vs cuBLASLt"
  OUT="$OUT/fp8" K=$K BENCH_TIMEOUT=120 bash bench/run_fp8_h100.sh 2>&1 | tail -30
  echo "== gemm_fp8 at LLM shapes (first non-square timing)"
  timeout 90 $K bench gemm_fp8 --shapes 16x4096x14336,1000x1032x528,4096x14336x4096,8192x8192x8192 \
    --checks none --budget-ms 150 --json "$OUT/fp8/llm.json" 2>&1 | tail -12
  echo "== gemm_bf16: edge shapes on every block, both B layouts"
  for bl in nk kn; do
    timeout 90 $K bench gemm_bf16 --sizes 4096 --shapes 3000x1000x777 --tiles all --b-layout $bl \
      --budget-ms 100 --json "$OUT/bf16_$bl.json" 2>&1 | tail -14
  done
elif [ "$part" = merged ]; then
  SAN=/usr/local/cuda/bin/compute-sanitizer
  echo "== attn_fwd: log-sum-exp, differing lengths, both alignments, every element by the rule"
  timeout 100 $K bench attn_fwd --checks lse --json "$OUT/attn_lse.json" 2>&1 | tail -12
  [ -x $SAN ] && timeout 100 $SAN --tool memcheck $K bench attn_fwd --checks lse 2>&1 | tail -2
  echo "== gemm_bf16 and gemm_fp8: edge, misaligned and split-K shapes, checked and timed"
  timeout 90 $K bench gemm_bf16 --shapes 3000x3000x3000,16x4096x14336,77x99x13,1000x1032x528 \
    --budget-ms 100 --json "$OUT/bf16_edges.json" 2>&1 | tail -8
  timeout 90 $K bench gemm_fp8 --shapes 16x4096x14336,1000x1032x528,8192x8192x8192 \
    --budget-ms 150 --json "$OUT/fp8_edges.json" 2>&1 | tail -8
  SITE=/tmp/site
  mkdir -p "$SITE"
  W=.carry/python
  python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
  python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
  python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
      "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  echo "== pytest (CPU interpreter, torch CPU, CUDA forward and backward)"
  timeout 150 python3 -m pytest -q -rs python/tests 2>&1 | tail -15 | tee "$OUT/pytest.txt"
  echo "== attention forward vs SDPA (cuDNN), B16 H16 D128"
  timeout 70 python3 -m kittens.bench attn --backend cudnn --seqs 2048,4096,8192 --iters 10 --warmup 3 \
    --json "$OUT/attn_cudnn_b16.json" 2>&1 | tail -10
  echo "== attention backward vs SDPA (cuDNN and flash)"
  timeout 100 python3 -m kittens.bench attn --backward --seqs 2048,4096 --extra "" --iters 5 --warmup 2 \
    --json "$OUT/attn_bwd_cudnn.json" 2>&1 | tail -10
  echo "== layernorm and rotary vs torch eager and torch.compile"
  timeout 60 python3 -m kittens.bench layernorm --iters 20 --json "$OUT/layernorm.json" 2>&1 | grep -v Warning | tail -6
  timeout 60 python3 -m kittens.bench rotary --iters 20 --json "$OUT/rotary.json" 2>&1 | grep -v Warning | tail -6
elif [ "$part" = python ]; then
  SITE=/tmp/site
  mkdir -p "$SITE"
  W=.carry/python
  python3 -m pip install -q --no-deps --target "$SITE" "$W"/kittens-*.whl
  python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/numpy-*.whl
  python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
  python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
      "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  echo "== pytest (CPU interpreter, torch CPU, CUDA)"
  timeout 200 python3 -m pytest -q -rs python/tests 2>&1 | tail -15 | tee "$OUT/pytest.txt"
  for be in cudnn flash; do
    echo "== attention vs SDPA ($be): B16 H16 D128, B2 H24 N16384, D64, GQA H64/KV8"
    timeout 100 python3 -m kittens.bench attn --backend $be --seqs 2048,4096,8192 --iters 20 --warmup 5 \
      --json "$OUT/attn_${be}_b16.json" 2>&1 | tail -12
    timeout 60 python3 -m kittens.bench attn --backend $be --batch 2 --heads 24 --heads-kv 24 --seqs 16384 \
      --iters 10 --warmup 3 --json "$OUT/attn_${be}_n16k.json" 2>&1 | tail -5
  done
  timeout 50 python3 -m kittens.bench attn --backend cudnn --dim 64 --seqs 4096 --iters 20 --warmup 5 \
    --json "$OUT/attn_cudnn_d64.json" 2>&1 | tail -5
  timeout 50 python3 -m kittens.bench attn --backend cudnn --batch 4 --heads 64 --heads-kv 8 --seqs 4096 \
    --iters 20 --warmup 5 --json "$OUT/attn_cudnn_gqa.json" 2>&1 | tail -5
  echo "== layernorm and rotary vs torch eager and torch.compile, copy bandwidth in the same run"
  timeout 80 python3 -m kittens.bench layernorm --iters 30 --json "$OUT/layernorm.json" 2>&1 | grep -v Warning | tail -8
  timeout 80 python3 -m kittens.bench rotary --iters 30 --json "$OUT/rotary.json" 2>&1 | grep -v Warning | tail -8
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu-$part.txt"
