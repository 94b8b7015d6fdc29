#!/usr/bin/env bash
# One device call on a machine with 2 GPUs (NVIDIA H200 x2): installs the kittens wheel carried in
# $CARRY (built elsewhere by scripts/python-gpu-bundle.sh; nothing is built here), then runs
#   1. python -m kittens.distributed_check under torchrun (kernels on each rank, the shared cache race,
#      ring attention forward + backward vs one GPU, ring timing),
#   2. the demo GPT: context parallel on 2 GPUs vs one GPU at seq 65536, DDP on 2 GPUs vs one GPU at
#      seq 1024 (same global batch for the loss curve, per-GPU batch for tokens/s),
#   3. the loss plot and scaling efficiencies,
# writing everything under $OUT/r and a tarball $OUT/all.tgz after every stage (so a run cut short still
# brings back what it did). The NCCL variables the machine sets (NVLink multicast off) are left alone.
set -uo pipefail
CARRY=${CARRY:-.carry-ring}
OUT=${OUT:-/tmp/ring-out}
R=$OUT/r
mkdir -p "$R"
export PYTHONUNBUFFERED=1
snap() { tar czf "$OUT/all.tgz" -C "$R" . ; }
stage() { # stage NAME SECONDS CMD...: run, log to $R/NAME.log, keep going on failure
    local name=$1 secs=$2; shift 2
    echo "== $name ($(date -u +%H:%M:%S))"
    timeout "$secs" "$@" > "$R/$name.log" 2>&1
    echo "   exit $? after stage $name" | tee -a "$R/$name.log"
    tail -n 25 "$R/$name.log"
    snap
}
{ date -u; nvidia-smi; nvidia-smi topo -m; env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' ; } > "$R/machine.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$CARRY"/kittens-*.whl || exit 1
export PYTHONPATH=/tmp/site
export KITTENS_CACHE=/tmp/kittens-cache-$$  # fresh: the ranks race to fill it
python3 -c 'import torch, kittens; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), kittens.__file__)' \
    | tee -a "$R/machine.txt"
TR="torchrun --standalone --nproc_per_node=2 -m"
stage check "${CHECK_S:-200}" $TR kittens.distributed_check --json "$R/check.json" ${CHECK_ARGS:-}
LONG="--seq 65536 --batch 1 --steps ${LONG_STEPS:-30} --skip-timing 5 --log-every 5"
stage train_cp_64k "${LONG_S:-75}" $TR kittens.train_dist --mode cp $LONG --json "$R/train_cp_64k.json"
stage train_single_64k "${LONG_S:-75}" python3 -m kittens.train_dist --mode single $LONG --per-gpu-reference \
    --json "$R/train_single_64k.json"
SHORT="--seq 1024 --steps ${SHORT_STEPS:-120} --log-every 20"
stage train_ddp "${SHORT_S:-50}" $TR kittens.train_dist --mode ddp $SHORT --batch 8 --json "$R/train_ddp.json"
stage train_single_b16 "${SHORT_S:-50}" python3 -m kittens.train_dist --mode single $SHORT --batch 16 \
    --json "$R/train_single_b16.json"
stage train_single_b8 "${SHORT_S:-40}" python3 -m kittens.train_dist --mode single --seq 1024 --steps 50 --log-every 20 \
    --batch 8 --per-gpu-reference --json "$R/train_single_b8.json"
stage plot 30 python3 -m kittens.train_dist --plot "$R/train.png" "$R"/train_*.json
ls -la "$KITTENS_CACHE/cuda" > "$R/cache_listing.txt" 2>&1
snap
echo "done $(date -u +%H:%M:%S)"
