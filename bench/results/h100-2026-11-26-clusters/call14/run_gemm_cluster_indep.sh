#!/usr/bin/env bash
# What of the clusters' cost is the launch: clusters of two as submitted, without the multicast
# (KITTENS_PROBE_NO_MULTICAST), and without the multicast and with local releases
# (+ KITTENS_PROBE_INDEPENDENT: the blocks share only the cluster launch and barriers), against no
# clusters, at 2048^3, 3008^3 and 4096^3, alternated twice, in ONE device call. Needs .carry/kittens
# built from the probe commit 5c6f4cc (reverted in the next commits).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for r in 1 2; do
  for v in plain nomc indep; do
    E="X=1"; [ $v = nomc ] && E="KITTENS_PROBE_NO_MULTICAST=1"
    [ $v = indep ] && E="KITTENS_PROBE_NO_MULTICAST=1 KITTENS_PROBE_INDEPENDENT=1"
    env $E timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,3008x3008x3008,4096x4096x4096 --clusters 1,2 \
      --checks none --json "$R/${v}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v /" | tee -a "$R/indep.txt"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
