#!/usr/bin/env bash
# Where the staged GEMM's time goes at 3000^3 (ONE device call; .carry/kittens of this commit):
# the staged kernel as built, without its copy (KITTENS_STAGE_PROBE=nocopy: the chunks are counted
# but not copied, so its row fails its check) and without the TMA thread's waits (nowait), beside
# the copy before the launch; then ncu durations of the staged kernel and the copy path's kernel.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for P in full nocopy nowait; do
  echo "-- probe $P"
  KITTENS_STAGE_PROBE=$P timeout 120 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 \
    --loads tma-copy,tma-staged --checks none 2>&1 | grep -E "^ +3000x" | tee -a "$OUT/probe.txt"
done
for L in tma-staged tma-copy; do
  timeout 120 $NCU --kernel-name gemm_bf16_sm90_lowered --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_requests.sum \
    $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 --loads $L --checks none --iters 5 --min-iters 5 --warmup 2 \
    2>&1 | grep -v "^==PROF==" > "$OUT/ncu_$L.txt"
  echo "-- ncu $L"; grep -E "Duration|dram__bytes|lts__t_req|Warp Cycles Per Issued|Compute \(SM\)" "$OUT/ncu_$L.txt" | head -8
done
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
