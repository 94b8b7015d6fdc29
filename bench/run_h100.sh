#!/usr/bin/env bash
# The whole benchmark suite on one NVIDIA Hopper GPU (H100 or H200, sm_90a): every kernel against its
# vendor library, checked and timed in the same run, written into ONE results folder laid out as
# bench/results/ (one folder per kernel: JSON, plot). Run from the repository root:
#
#   cargo build --release -p kittens-cli     # the Rust benches (or put a release binary at .carry/kittens)
#   pip install ./python                     # the Python benches (or carry scripts/python-gpu-bundle.sh's wheels)
#   bash bench/run_h100.sh                   # about 15 minutes; OUT=dir to choose the folder
#
# PARTS picks what runs (default: all, in this order): gemm_bf16 gemm_fp8 attn_fwd attn_bwd layernorm
# rotary norms lce tests; `model` (python -m kittens.bench model: a Llama trained and generating, HF vs
# kittens, about 10 minutes), `model1b` (the ~1B Llama at sequence 4096, 200 steps) and `rowbw` (the row
# kernels' bandwidth under each row loop and block shape, with Nsight Compute; about 8 minutes) run when
# named. Each part has a timeout and the script goes on when one fails; the folder's log.txt keeps what
# each printed. Copy the parts worth keeping into bench/results/<kernel>/ and update its README.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/run-$(date -u +%Y-%m-%d)}"
PARTS="${PARTS:-gemm_bf16 gemm_fp8 attn_fwd attn_bwd layernorm rotary norms lce tests}"
K="${KITTENS:-}"
if [ -z "$K" ]; then
  if [ -x .carry/kittens ]; then K=.carry/kittens; else K=target/release/kittens; fi
fi
mkdir -p "$OUT"
LOG="$OUT/log.txt"
has() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
step() { # step SECONDS CMD...: run with a timeout, log, keep going on failure
  local secs=$1; shift
  echo "\$ $*" | tee -a "$LOG"
  timeout "$secs" "$@" 2>&1 | grep -v Warning | tee -a "$LOG" | tail -n 20
  echo "  (exit ${PIPESTATUS[0]})" | tee -a "$LOG"
}
# Python: the installed package, else the wheels scripts/python-gpu-bundle.sh carried (machines without internet).
if ! python3 -c 'import kittens' 2>/dev/null && ls .carry/python/kittens-*.whl >/dev/null 2>&1; then
  . bench/gpu_python_env.sh
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD >> "$OUT/gpu.txt" 2>/dev/null
PY="python3 -m kittens.bench"

if has gemm_bf16; then
  mkdir -p "$OUT/gemm_bf16"
  step 300 "$K" bench gemm_bf16 --sweep llm,squares --json "$OUT/gemm_bf16/sweep.json" --plot "$OUT/gemm_bf16/sweep.png"
fi
if has gemm_fp8; then
  mkdir -p "$OUT/gemm_fp8"
  step 120 "$K" bench gemm_fp8 --sizes 2048,4096,8192,16384 \
    --shapes 16x4096x4096,16x4096x14336,16x8192x28672,64x4096x14336,64x28672x4096,256x4096x14336,256x8192x8192,16x28672x4096,4096x14336x4096 \
    --warmup 3 --budget-ms 100 --json "$OUT/gemm_fp8/fp8.json"
  step 30 python3 bench/plot_fp8.py "$OUT/gemm_fp8/fp8.json" "$OUT/gemm_fp8/fp8.svg"
fi
if has attn_fwd; then
  D="$OUT/attn_fwd"; mkdir -p "$D"
  step 120 $PY attn --backend cudnn --seqs 2048,4096,8192 --iters 20 --warmup 5 --json "$D/attn_cudnn_b16.json"
  step 60 $PY attn --backend cudnn --batch 2 --heads 24 --heads-kv 24 --seqs 16384 --iters 10 --warmup 3 \
    --json "$D/attn_cudnn_n16k.json"
  step 120 $PY attn --backend flash --seqs 2048,4096,8192 --iters 20 --warmup 5 --json "$D/attn_flash_b16.json"
  step 60 $PY attn --backend cudnn --seqs 4096 --dim 64 --iters 20 --warmup 5 --json "$D/attn_cudnn_d64.json"
  step 60 $PY attn --backend cudnn --batch 4 --heads 64 --heads-kv 8 --seqs 4096 --iters 20 --warmup 5 \
    --json "$D/attn_cudnn_gqa.json"
  step 30 python3 bench/plot_attn.py "$D/attn.svg" "$D"/attn_cudnn_*.json "$D/attn_flash_b16.json"
  step 60 "$K" bench attn_fwd --checks decode --iters 20 --warmup 3 --json "$D/decode.json"
  step 30 python3 bench/plot_decode.py "$D/decode.svg" "$D/decode.json"
fi
if has attn_bwd; then
  mkdir -p "$OUT/attn_bwd"
  step 200 $PY attn --backward --seqs 2048,4096,8192 --iters 10 --warmup 2 \
    --json "$OUT/attn_bwd/bwd.json" --plot "$OUT/attn_bwd/bwd.png"
fi
if has layernorm; then
  D="$OUT/layernorm"; mkdir -p "$D"
  step 100 $PY layernorm --ln-shapes 16x4096x2048,4x4096x8192 --iters 30 --json "$D/layernorm.json" --plot "$D/layernorm.png"
  for p in 0 0.1; do
    step 60 "$K" bench layernorm --p "$p" --iters 20 --shapes 65536x2048,16384x8192 --json "$D/sweep_layernorm_p$p.json"
  done
fi
if has rotary; then
  D="$OUT/rotary"; mkdir -p "$D"
  step 100 $PY rotary --rope-shapes 16x16x4096x128,16x16x8192x128 --iters 30 --json "$D/rotary.json" --plot "$D/rotary.png"
  step 60 "$K" bench rotary --iters 20 --shapes 16x16x4096x128,16x32x4096x64 --json "$D/sweep_rotary.json"
fi
if has norms; then
  D="$OUT/norms"; mkdir -p "$D"
  step 300 $PY rmsnorm --iters 30 --json "$D/rmsnorm.json" --plot "$D/rmsnorm.png"
  step 300 $PY swiglu --iters 30 --json "$D/swiglu.json" --plot "$D/swiglu.png"
  step 400 $PY layernorm --backward --iters 30 --json "$D/layernorm_bwd.json"
fi
if has rowbw; then
  # The row kernels against a copy of the same bytes (`kittens run --time`; bench/results/norms): each
  # norm backward under each row loop (KITTENS_NORM_BWD, ROWBW_VARIANTS; "default" leaves it empty) and
  # SwiGLU under each block shape (KITTENS_SWIGLU, SWIGLU_VARIANTS), then Nsight Compute (clocks left
  # alone) on ROWBW_NCU at each of NCU_VARIANTS; NCU=0 skips it. Bytes moved: layernorm backward
  # 6·rows·D·2, rmsnorm backward (residual) 4·rows·D·2, SwiGLU forward 3·rows·F·2, backward 5·rows·F·2.
  D="$OUT/rowbw"; mkdir -p "$D"
  timed() { # timed VAR=VALUE KERNEL ARGS...: one checked, timed run; its launch and timing lines
    echo "== $*" | tee -a "$D/log.txt"
    env "$1" timeout 120 "$K" run "${@:2}" --backend cuda --time 30 2>&1 \
      | grep -E "^(launch|timed|passed|check)|rror" | tee -a "$D/log.txt"
  }
  for v in ${ROWBW_VARIANTS:-default prefetch=0 prefetch=1 prefetch=2}; do
    [ "$v" = default ] && v=""
    for args in "layernorm_bwd --rows 4133 --hidden 4096 --p 0.1" "layernorm_bwd --rows 8192 --hidden 4096 --p 0" \
                "layernorm_bwd --rows 16384 --hidden 3080 --p 0" "rmsnorm_bwd --rows 8192 --hidden 4096" \
                "rmsnorm_bwd --rows 16384 --hidden 3080"; do
      timed "KITTENS_NORM_BWD=$v" $args
    done
  done
  for args in "layernorm_bwd --rows 2048 --hidden 8192 --p 0" "layernorm_bwd --rows 37 --hidden 1000 --p 0.1" \
              "layernorm_bwd --rows 8 --hidden 5128 --p 0.1" "rmsnorm_bwd --rows 4096 --hidden 768"; do
    timed "KITTENS_NORM_BWD=" $args
  done
  for v in ${SWIGLU_VARIANTS:-default chunks=2 chunks=4 waves=8 waves=8,chunks=2 waves=2,chunks=4}; do
    [ "$v" = default ] && v=""
    for what in swiglu swiglu_bwd; do
      timed "KITTENS_SWIGLU=$v" $what --rows 4096 --hidden 14336 --packed
    done
  done
  if [ "${NCU:-1}" = 1 ]; then
    ROWBW_NCU=${ROWBW_NCU:-layernorm_bwd --rows 8192 --hidden 4096 --p 0}
    for v in ${NCU_VARIANTS:-default}; do
      [ "$v" = default ] && v=""
      echo "== ncu KITTENS_NORM_BWD=$v $ROWBW_NCU" | tee -a "$D/log.txt"
      KITTENS_NORM_BWD="$v" timeout 180 ncu --clock-control none -k regex:_bwd_d --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section MemoryWorkloadAnalysis "$K" run $ROWBW_NCU --backend cuda 2>&1 \
        | grep -vE "^==PROF==|^  *-+ *$" | tee -a "$D/log.txt" | tail -n 60
    done
  fi
fi
if has lce; then
  D="$OUT/lce"; mkdir -p "$D"
  step 600 $PY lce --json "$D/lce.json"
  step 500 $PY lce --lce-chunks default,512,1024,2048 --json "$D/chunks.json"
  step 600 python3 -m pytest -q -rs -s python/tests/test_gpu_lce.py
fi
if has model1b; then
  D="$OUT/model"; mkdir -p "$D"
  step 3600 $PY model --preset 1b-4k --json "$D/llama_1b_4k.json" --curves "$D/llama_1b_4k_curves.json" \
    --plot "$D/llama_1b_4k.png"
fi
if has model; then
  D="$OUT/model"; mkdir -p "$D"
  step 1200 $PY model --size 125m --json "$D/llama_125m.json" --plot "$D/llama_125m.png"
fi
if has tests; then
  # The GPU tests of the Python package: every kernel on CUDA against the CPU interpreter and float64.
  step 400 python3 -m pytest -q -rs python/tests/test_gpu.py python/tests/test_gpu_backward.py \
    python/tests/test_gpu_norms.py python/tests/test_gpu_layernorm_bwd.py
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
echo "results in $OUT"
