#!/usr/bin/env bash
# One GPU round for the norm kernels' bandwidth (issues 33/35/37), from a folder holding bench/ (this
# script and gpu_python_env.sh), target/release/kittens, wheels/ (scripts/python-gpu-bundle.sh's output)
# and commit.txt: the norm backwards at each prefetch level (KITTENS_NORM_BWD=prefetch=N) against a copy of
# the same bytes (`kittens run --time`), one Nsight Compute reading of the layernorm backward, then the
# Python benches against torch eager and torch.compile. Everything goes to $OUT/norms (log.txt, JSON).
#   VARIANTS (default "prefetch=0 prefetch=1 prefetch=2"; "default" leaves KITTENS_NORM_BWD unset), PYB
#   (the benches), NCU=0 skips ncu, EXTRA=0 the checks at other shapes, FWD (e.g. "per_lane=8
#   per_lane=16": the forwards at each KITTENS_NORM_FWD split), TESTS=1 the GPU pytest files of the norms
#   first.
set -uo pipefail
cd "$(dirname "$0")/.."
export W=$PWD/wheels
source bench/gpu_python_env.sh >/dev/null 2>&1; set +x
export KITTENS_CACHE=$HOME/.cache/kittens; mkdir -p "$KITTENS_CACHE"; chmod 700 "$KITTENS_CACHE"
O=${OUT:-/tmp/out}/norms; mkdir -p "$O"; LOG=$O/log.txt
K=target/release/kittens
S=$(date +%s)
t() { echo "=== [$(( $(date +%s) - S ))s] $*" | tee -a "$LOG"; }
{ cat commit.txt; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader; } | tee -a "$LOG"
if [ "${TESTS:-0}" = 1 ]; then
  KITTENS_REQUIRE_TORCH=1 timeout 100 python3 -m pytest -q -x python/tests/test_gpu_norms.py \
    python/tests/test_gpu_layernorm_bwd.py python/tests/test_gpu_norm_strides.py 2>&1 | tail -n 6 | tee -a "$LOG"
  t tests
fi
for v in ${FWD:-}; do
  for args in "rmsnorm --rows 16384 --hidden 3080" "rmsnorm --rows 4096 --hidden 768" "rmsnorm --rows 16384 --hidden 4096" \
              "layernorm --rows 16384 --hidden 768 --p 0" "layernorm --rows 16384 --hidden 3080 --p 0"; do
    echo "== KITTENS_NORM_FWD=$v $args" | tee -a "$LOG"
    KITTENS_NORM_FWD="$v" timeout 60 $K run $args --backend cuda --time 30 2>&1 | grep -E "^(launch|timed|passed)|rror" | tee -a "$LOG"
  done
done
for v in ${VARIANTS:-prefetch=0 prefetch=1 prefetch=2}; do
  [ "$v" = default ] && v=""
  for args in "layernorm_bwd --rows 4133 --hidden 4096 --p 0.1" "layernorm_bwd --rows 8192 --hidden 4096 --p 0" \
              "layernorm_bwd --rows 8192 --hidden 3080 --p 0" "rmsnorm_bwd --rows 8192 --hidden 4096" \
              "rmsnorm_bwd --rows 8192 --hidden 3080"; do
    echo "== KITTENS_NORM_BWD=$v $args" | tee -a "$LOG"
    KITTENS_NORM_BWD="$v" timeout 60 $K run $args --backend cuda --time 30 2>&1 | grep -E "^(launch|timed|passed)|rror" | tee -a "$LOG"
  done
done
[ "${EXTRA:-1}" = 1 ] && for args in "layernorm_bwd --rows 2048 --hidden 8192 --p 0" \
            "layernorm_bwd --rows 37 --hidden 1000 --p 0.1" "rmsnorm_bwd --rows 4096 --hidden 768"; do
  echo "== $args" | tee -a "$LOG"
  timeout 60 $K run $args --backend cuda --time 30 2>&1 | grep -E "^(launch|timed|passed)|rror" | tee -a "$LOG"
done
t sweep
if [ "${NCU:-1}" = 1 ]; then
  NCU_ARGS=${NCU_ARGS:-layernorm_bwd --rows 8192 --hidden 4096 --p 0}
  echo "== ncu $NCU_ARGS (default settings)" | tee -a "$LOG"
  timeout 120 ncu --clock-control none -k regex:_bwd_d --launch-count 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    $K run $NCU_ARGS --backend cuda 2>&1 | grep -vE "^==PROF==|^(launch|timed|check|time|passed) " | tee -a "$LOG"
  t ncu
fi
for b in ${PYB:-layernorm_bwd rmsnorm layernorm}; do
  case $b in layernorm_bwd) a="layernorm --backward";; *) a=$b;; esac
  timeout 200 python3 -m kittens.bench $a --iters 30 --json "$O/$b.json" 2>&1 | grep -v Warning | tail -n 20 | tee -a "$LOG"
  t "$a"
done
