#!/usr/bin/env bash
# The distributed suite on one host with 2 or more NVIDIA Hopper GPUs (measured on 2 x H200): the kernels
# under torch.distributed, ring attention against one GPU, and the demo GPT data parallel (DDP) and context
# parallel (ring attention) against one GPU, written into ONE results folder laid out as
# bench/results/ring_attention/ (2 GPUs) or bench/results/ring_attention/<n>gpu/ (n GPUs). Run from the
# repository root with the Python package installed (`pip install ./python`, or the wheel of
# scripts/python-gpu-bundle.sh in $CARRY):
#
#   bash bench/run_multi_gpu.sh              # about 6 minutes; OUT=dir to choose the folder
#
# NPROC: how many GPUs (default: all the machine has). The problems are the same for any NPROC: the ring's
# and the context-parallel run's sequence is split NPROC ways (strong scaling), DDP keeps 8 rows per rank.
# PARTS picks what runs (default all): check train large. `large` is a 1.34 G-parameter GPT that one
# H200 cannot train at 65536 (its out-of-memory is recorded in the JSON, not assumed). The NCCL
# variables the machine sets (NVLink multicast off) are left alone.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/run-$(date -u +%Y-%m-%d)-2gpu}"
PARTS="${PARTS:-check train large}"
CARRY="${CARRY:-.carry/python}"
NPROC="${NPROC:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}"
if [ "$NPROC" -lt 2 ]; then echo "run_multi_gpu.sh: needs at least 2 GPUs, this machine has $NPROC" >&2; exit 2; fi
R="$OUT/ring_attention"
[ "$NPROC" = 2 ] || R="$R/${NPROC}gpu"
mkdir -p "$R/logs"
export PYTHONUNBUFFERED=1
has() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
stage() { # stage NAME SECONDS CMD...: run, log to $R/logs/NAME.log, keep going on failure
  local name=$1 secs=$2; shift 2
  echo "== $name ($(date -u +%H:%M:%S))"
  timeout "$secs" "$@" > "$R/logs/$name.log" 2>&1
  echo "   exit $? after stage $name" | tee -a "$R/logs/$name.log"
  tail -n 12 "$R/logs/$name.log"
}
if ! python3 -c 'import kittens' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$CARRY"/kittens-*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export KITTENS_CACHE="${KITTENS_CACHE:-/tmp/kittens-cache-$$}"  # fresh: the ranks race to fill it
{ date -u; git rev-parse HEAD; nvidia-smi; nvidia-smi topo -m; env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)'; } \
  > "$R/machine.txt" 2>&1
TR="torchrun --standalone --nproc_per_node=$NPROC -m"
if has check; then
  stage check 200 $TR kittens.distributed_check --json "$R/check.json"
fi
if has train; then
  LONG="--seq 65536 --batch 1 --steps 30 --skip-timing 5 --log-every 5"
  stage train_cp_64k 90 $TR kittens.train_dist --mode cp $LONG --json "$R/train_cp_64k.json"
  stage train_single_64k 90 python3 -m kittens.train_dist --mode single $LONG --per-gpu-reference \
    --json "$R/train_single_64k.json"
  SHORT="--seq 1024 --steps 120 --log-every 20"
  stage train_ddp 60 $TR kittens.train_dist --mode ddp $SHORT --batch 8 --json "$R/train_ddp.json"
  stage train_single_b16 60 python3 -m kittens.train_dist --mode single $SHORT --batch 16 --json "$R/train_single_b16.json"
  stage train_single_b8 40 python3 -m kittens.train_dist --mode single --seq 1024 --steps 50 --log-every 20 \
    --batch 8 --per-gpu-reference --json "$R/train_single_b8.json"
  stage plot 30 python3 -m kittens.train_dist --plot "$R/train.png" "$R"/train_*.json
fi
if has large; then
  # Expandable segments: a run out of memory is short of memory, not of one unfragmented block.
  EX="env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
  BIG="--preset large --batch 1 --init-on-device --skip-timing 1 --log-every 1 --warmup 2"
  stage large_cp_64k 90 $EX $TR kittens.train_dist --mode cp $BIG --seq 65536 --steps 4 --json "$R/large_cp_64k.json"
  stage large_single_64k 60 $EX python3 -m kittens.train_dist --mode single $BIG --seq 65536 --steps 2 \
    --json "$R/large_single_64k.json"
  stage large_single_32k 60 $EX python3 -m kittens.train_dist --mode single $BIG --seq 32768 --steps 4 \
    --per-gpu-reference --json "$R/large_single_32k.json"
  stage plot_large 30 python3 -m kittens.train_dist --plot "$R/train_large.png" "$R"/large_*.json
fi
echo "results in $R"
