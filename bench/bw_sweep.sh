#!/usr/bin/env bash
# The row kernels' bandwidth on one Hopper GPU (issues 33 and 35): the norm backwards at several row loops
# (KITTENS_NORM_BWD: blocks of the first launch, waves per row) and SwiGLU at other block shapes
# (KITTENS_SWIGLU), then the Python benches against torch eager
# and torch.compile (layernorm --backward, rmsnorm, swiglu) and where the fused loss's time goes per chunk
# size (lce --lce-chunks). Run from the repository root after `cargo build --release -p kittens-cli` and
# `pip install ./python`; about 8 minutes. OUT=dir picks the folder (log.txt plus JSON).
#   PARTS="sweep ncu swiglu ln rms lce tests" (default: all); NORM_VARIANTS overrides the KITTENS_NORM_BWD
#   settings of the sweep ("default": unset).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/bw-$(date -u +%Y%m%d-%H%M)}"
PARTS="${PARTS:-sweep ncu swiglu ln rms lce tests}"
K="${KITTENS:-target/release/kittens}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
has() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
step() { # step SECONDS CMD...: run with a timeout, log, keep going on failure
  local secs=$1; shift
  echo "\$ $*" | tee -a "$LOG"
  timeout "$secs" "$@" 2>&1 | grep -v Warning | tee -a "$LOG" | tail -n 30
  echo "  (exit ${PIPESTATUS[0]})" | tee -a "$LOG"
}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD | tee -a "$OUT/gpu.txt"

if has sweep; then
  # Each line: the variant, then the launches (blocks, threads, registers, spills) and the timed call
  # (median ms, and the same bytes copied). Bytes a backward must move: layernorm 6·rows·D·2,
  # rmsnorm (residual) 4·rows·D·2.
  for v in ${NORM_VARIANTS:-prefetch=0 default blocks=264 blocks=66}; do
    [ "$v" = default ] && v=""
    for args in "layernorm_bwd --rows 4133 --hidden 4096 --p 0.1" "layernorm_bwd --rows 8192 --hidden 4096 --p 0" \
                "layernorm_bwd --rows 16384 --hidden 3080 --p 0" "rmsnorm_bwd --rows 8192 --hidden 4096" \
                "rmsnorm_bwd --rows 16384 --hidden 3080"; do
      echo "== KITTENS_NORM_BWD=$v $args" | tee -a "$LOG"
      KITTENS_NORM_BWD="$v" timeout 120 "$K" run $args --backend cuda --time 30 2>&1 \
        | grep -E "^(launch|timed|passed)|rror" | tee -a "$LOG"
    done
  done
  for args in "layernorm_bwd --rows 2048 --hidden 8192 --p 0" \
              "layernorm_bwd --rows 4133 --hidden 5128 --p 0" "layernorm_bwd --rows 37 --hidden 1000 --p 0.1" \
              "layernorm_bwd --rows 8 --hidden 5128 --p 0.1" "rmsnorm_bwd --rows 4096 --hidden 8192" \
              "rmsnorm_bwd --rows 8192 --hidden 3080" "rmsnorm_bwd --rows 4096 --hidden 768"; do
    echo "== $args" | tee -a "$LOG"
    timeout 120 "$K" run $args --backend cuda --time 30 2>&1 | grep -E "^(launch|timed|passed|check)|rror" | tee -a "$LOG"
  done
fi
if has ncu; then
  # Where the time goes (hardware counters; clocks left alone): throughput, occupancy, stall reasons.
  for args in "layernorm_bwd --rows 4133 --hidden 4096 --p 0.1" "rmsnorm_bwd --rows 8192 --hidden 4096"; do
    for v in prefetch=0 prefetch=1; do
      echo "== ncu KITTENS_NORM_BWD=$v $args" | tee -a "$LOG"
      KITTENS_NORM_BWD="$v" timeout 180 ncu --clock-control none -k regex:_bwd_d --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        "$K" run $args --backend cuda 2>&1 | grep -vE "^==PROF==|^  *-+ *$" | tee -a "$LOG" | tail -n 60
    done
  done
fi
if has swiglu; then
  # SwiGLU forward and backward (packed, Llama-3-8B's F) at other block shapes (KITTENS_SWIGLU). Bytes:
  # forward 3·rows·F·2, backward 5·rows·F·2.
  for v in "" chunks=2 chunks=4 waves=8 waves=8,chunks=2 waves=2,chunks=4; do
    for what in swiglu swiglu_bwd; do
      echo "== KITTENS_SWIGLU=$v $what --rows 4096 --hidden 14336 --packed" | tee -a "$LOG"
      KITTENS_SWIGLU="$v" timeout 120 "$K" run $what --rows 4096 --hidden 14336 --packed --backend cuda --time 30 2>&1 \
        | grep -E "^(launch|timed|passed)|rror" | tee -a "$LOG"
    done
  done
fi
PY="python3 -m kittens.bench"
if has ln; then
  step 400 $PY layernorm --backward --iters 30 --json "$OUT/layernorm_bwd.json"
fi
if has rms; then
  step 300 $PY rmsnorm --iters 30 --json "$OUT/rmsnorm.json"
  step 300 $PY swiglu --iters 30 --json "$OUT/swiglu.json"
fi
if has lce; then
  step 500 $PY lce --lce-chunks default,512,1024,2048 --json "$OUT/lce_parts.json"
fi
if has tests; then
  step 400 python3 -m pytest -q -rs python/tests/test_gpu_layernorm_bwd.py python/tests/test_gpu_norms.py
fi
