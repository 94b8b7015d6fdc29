#!/usr/bin/env bash
# (At the commit of call 1, `tma-copy` copied both operands and `tma-copy-b` B alone; the modes are now
# `tma-copy` (B alone, the default) and `tma-copy-both`.)
# Why TMA rows off 128-byte lines cost our GEMM at 3000^3 and what cuBLAS does there, in ONE device
# call. Needs .carry/kittens (a release build of this commit).
#   1. the 128x192 block at 3000^3 (and 3072^3, aligned) with each operand copied or read in place,
#      under each TMA L2 promotion (KITTENS_TMA_L2_PROMOTION: 256, the default, 128, none);
#   2. ncu of our kernel reading both operands in place, and on aligned copies: L2 requests and
#      sectors, DRAM bytes, the memory and warp-state sections;
#   3. the same counters for cuBLAS at 3000^3 and 3072^3 (bench/cublas_probe.py).
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. loads x L2 promotion"
for P in 256 128 none; do
  echo "-- promotion $P"
  KITTENS_TMA_L2_PROMOTION=$P timeout 90 $K bench gemm_bf16 --shapes 3000x3000x3000,3072x3072x3072 --tiles 128x192 \
    --loads tma-copy,tma-copy-both,tma-copy-a,tma-in-place --checks none --json "$OUT/promo$P.json" 2>&1 | tail -12 | tee -a "$OUT/promo.txt"
done
MET=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_requests.sum,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_sectors_op_read.sum,lts__average_t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg
echo "== 2. ncu of our kernel, in place and on copies"
for L in tma-in-place tma-copy tma-copy-both tma-copy-a; do
  timeout 120 $NCU --kernel-name gemm_bf16_sm90_lowered --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --metrics $MET \
    $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 --loads $L --checks none --iters 5 --min-iters 5 --warmup 2 \
    2>&1 | grep -v "^==PROF==" > "$OUT/ncu_$L.txt"
  echo "-- $L"; grep -E "Duration|dram__bytes|lts__t_(req|sec)|xbar2l1tex|L2 Cache Throughput|hit_rate|Stall|Warp Cycles" "$OUT/ncu_$L.txt" | head -24
done
echo "== 3. cuBLAS under ncu"
for S in 3000 3072; do
  timeout 90 $NCU --launch-skip 5 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics $MET \
    python3 bench/cublas_probe.py $S $S $S 2>&1 | grep -v "^==PROF==" > "$OUT/ncu_cublas$S.txt"
  echo "-- cuBLAS $S"; grep -E "Duration|dram__bytes|lts__t_(req|sec)|xbar2l1tex|L2 Cache Throughput|hit_rate" "$OUT/ncu_cublas$S.txt" | head -16
done
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null
