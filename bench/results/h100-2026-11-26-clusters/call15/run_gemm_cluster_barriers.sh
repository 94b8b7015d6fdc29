#!/usr/bin/env bash
# Launch in clusters against the cluster barriers: blocks that share nothing (KITTENS_PROBE_NO_MULTICAST
# + KITTENS_PROBE_INDEPENDENT) with and without the start and end cluster barriers
# (+ KITTENS_PROBE_NO_CLUSTER_BARRIERS), against no clusters and the submitted clusters, at 2048^3,
# 3008^3 and 4096^3, alternated twice, in ONE device call. Needs .carry/kittens built from the probe
# commit fdc4894 (reverted in the next commits).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for r in 1 2; do
  for v in plain indep nobar; do
    E="X=1"; [ $v = indep ] && E="KITTENS_PROBE_NO_MULTICAST=1 KITTENS_PROBE_INDEPENDENT=1"
    [ $v = nobar ] && E="KITTENS_PROBE_NO_MULTICAST=1 KITTENS_PROBE_INDEPENDENT=1 KITTENS_PROBE_NO_CLUSTER_BARRIERS=1"
    env $E timeout 120 $K bench gemm_bf16 --shapes 2048x2048x2048,3008x3008x3008,4096x4096x4096 --clusters 1,2 \
      --checks none --json "$R/${v}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v /" | tee -a "$R/barriers.txt"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
