#!/usr/bin/env bash
# One device call on NVIDIA H200 x2 (under 300 s): installs the kittens wheel carried in $CARRY (built by
# scripts/python-gpu-bundle.sh), then
#   1. the large GPT (--preset large: 24 x d2048, 16 heads of D128) at seq 65536 on one GPU, expected to
#      run out of memory (recorded in the JSON, not assumed), context parallel on 2 GPUs at 65536, and one
#      GPU at 32768 (the per-GPU reference: the longest length tried that one GPU holds);
#   2. the demo GPT (6 x d512) context parallel vs one GPU at 65536 (the ring's own-keys-as-one-block change);
#   3. DDP vs one GPU at 1024 if time is left, then the plot.
# Every stage has a timeout and is skipped when the call's remaining time ($BUDGET_S from the start) would
# not cover it; $OUT/all.tgz is refreshed after every stage.
set -uo pipefail
CARRY=${CARRY:-.carry-ring}
OUT=${OUT:-/tmp/ring-out}
BUDGET_S=${BUDGET_S:-280}
R=$OUT/r
mkdir -p "$R/logs"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
snap() { tar czf "$OUT/all.tgz" -C "$R" . ; }
stage() { # stage NAME SECONDS CMD...
    local name=$1 secs=$2; shift 2
    local left=$(( BUDGET_S - ($(date +%s) - T0) ))
    if (( left < secs )); then echo "== $name skipped ($left s left, needs $secs)" | tee -a "$R/skipped.txt"; return; fi
    echo "== $name ($(date -u +%H:%M:%S))"
    timeout "$secs" "$@" > "$R/logs/$name.log" 2>&1
    echo "   exit $? after stage $name" | tee -a "$R/logs/$name.log"
    tail -n 8 "$R/logs/$name.log"
    snap
}
{ date -u; nvidia-smi; nvidia-smi topo -m; env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' ; } > "$R/machine.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$CARRY"/kittens-*.whl || exit 1
export PYTHONPATH=/tmp/site
export KITTENS_CACHE=/tmp/kittens-cache-$$
python3 -c 'import torch, kittens; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), kittens.__file__)' \
    | tee -a "$R/machine.txt"
TR="torchrun --standalone --nproc_per_node=2 -m"
# The large runs: expandable segments, so that a run out of memory is short of memory, not of one unfragmented block.
EX="env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
BIG="--preset large --batch 1 --init-on-device --skip-timing 1 --log-every 1 --warmup 2"
stage large_cp_64k "${BIG_CP_S:-80}" $EX $TR kittens.train_dist --mode cp $BIG --seq 65536 --steps ${BIG_STEPS:-4} \
    --json "$R/large_cp_64k.json"
stage large_single_64k "${BIG_OOM_S:-50}" $EX python3 -m kittens.train_dist --mode single $BIG --seq 65536 --steps 2 \
    --json "$R/large_single_64k.json"
stage large_single_32k "${BIG_1_S:-50}" $EX python3 -m kittens.train_dist --mode single $BIG --seq 32768 \
    --steps ${BIG_STEPS:-4} --per-gpu-reference --json "$R/large_single_32k.json"
LONG="--seq 65536 --batch 1 --steps ${LONG_STEPS:-20} --skip-timing 5 --log-every 5"
stage train_cp_64k "${LONG_S:-40}" $TR kittens.train_dist --mode cp $LONG --json "$R/train_cp_64k.json"
stage train_single_64k "${LONG_S:-40}" python3 -m kittens.train_dist --mode single $LONG --per-gpu-reference \
    --json "$R/train_single_64k.json"
stage train_ddp "${SHORT_S:-30}" $TR kittens.train_dist --mode ddp --seq 1024 --steps 60 --log-every 20 --batch 8 \
    --json "$R/train_ddp.json"
stage train_single_b8 "${SHORT_S:-30}" python3 -m kittens.train_dist --mode single --seq 1024 --steps 40 --log-every 20 \
    --batch 8 --per-gpu-reference --json "$R/train_single_b8.json"
BUDGET_S=$(( BUDGET_S + 15 )) stage plot 15 python3 -m kittens.train_dist --plot "$R/train.png" "$R"/*.json
snap
echo "done $(date -u +%H:%M:%S) after $(( $(date +%s) - T0 )) s"
