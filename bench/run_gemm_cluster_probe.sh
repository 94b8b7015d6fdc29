#!/usr/bin/env bash
# Where clusters of two lose at 3000^3 (rows off 128-byte lines), in ONE device call. Needs
# .carry/kittens.
#   1. timing: block 128x192 at 3000^3 and 3008^3 (aligned), clusters 1 and 2, B in place or copied;
#   2. ncu of the kernel in the four variants at 3000^3 (clusters 1/2 x B in place/copied) and at
#      3008^3 (clusters 1/2): duration, L2 requests and throughput, DRAM bytes, warp states.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$R/gpu.txt"
echo "== 1. timing"
timeout 120 $K bench gemm_bf16 --shapes 3000x3000x3000,3008x3008x3008 --tiles 128x192 --clusters 1,2 \
  --loads tma-in-place,tma-copy --checks none --json "$R/timing.json" 2>&1 | grep -E "^ +[0-9]+x|geometric" | tee "$R/timing.txt"
MET=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_requests.sum,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,smsp__cycles_active.avg
echo "== 2. ncu"
run() { # name shape loads cluster
  timeout 100 $NCU --kernel-name gemm_bf16_sm90_lowered --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics $MET \
    $K bench gemm_bf16 --shapes $2 --tiles 128x192 --loads $3 --clusters $4 --checks none --iters 5 --min-iters 5 --warmup 2 \
    2>&1 | grep -v "^==PROF==" > "$R/ncu_$1.txt"
  echo "-- $1"; grep -E "Duration|dram__bytes|lts__t_req|lts__throughput|Stall|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" "$R/ncu_$1.txt" | head -16
}
run c1_inplace 3000x3000x3000 tma-in-place 1
run c2_inplace 3000x3000x3000 tma-in-place 2
run c1_copy 3000x3000x3000 tma-copy 1
run c2_copy 3000x3000x3000 tma-copy 2
run c1_3008 3008x3008x3008 tma-in-place 1
run c2_3008 3008x3008x3008 tma-in-place 2
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$R/gpu.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
