#!/usr/bin/env bash
# Clusters of two with and without the multicast of B (KITTENS_PROBE_NO_MULTICAST: each block loads
# all of B, the cross-block releases kept), against no clusters, alternated twice, in ONE device call.
# The knob existed only in the probe commit 2ee6903 (reverted in the next commits): build .carry/kittens
# from it to re-run this.
set -uo pipefail
R=$(mktemp -d); K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
for r in 1 2; do
  for v in plain probe; do
    E=""; [ $v = probe ] && E="KITTENS_PROBE_NO_MULTICAST=1"
    env $E timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,3008x3008x3008,3000x3000x3000 --tiles 128x256,128x192 --clusters 1,2 --checks none --json $R/${v}_$r.json 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v /" | tee -a $R/probe.txt
  done
done
tar -C $R -czf $OUT/results.tgz .
