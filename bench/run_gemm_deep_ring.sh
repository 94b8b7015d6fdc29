#!/usr/bin/env bash
# Deeper rings beside a smaller C staging slab (the store goes box by box), in ONE device call. Needs
# .carry/kittens (this commit). KITTENS_GEMM_STAGES sets the ring's stages for every block measured.
#   1. checks of 128x192 at 5 stages and 128x256 at 4 (clusters 1 and 2, partial tiles at every
#      edge), compute-sanitizer memcheck and racecheck of them;
#   2. the default ring against the deeper one, alternated twice: 128x192 at 4 and 5 stages (3000^3
#      nk and kn, 3008^3, 2000^3, 4000x8000x3000); 128x256 at 3 and 4 (2048^3, 4096^3, 8192^3).
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
echo "== 1. checks"
for ts in 128x192:5 128x256:4; do
  t=${ts%:*}; s=${ts#*:}
  KITTENS_GEMM_STAGES=$s timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles $t --clusters 1,2 > "$R/checks_${t}_s$s.txt" 2>&1
  echo "$t s$s: $(grep -cE ' ok$' "$R/checks_${t}_s$s.txt") ok"; grep -E "FAIL|rror" "$R/checks_${t}_s$s.txt" | head -5
  if [ -x $SAN ]; then
    for tool in memcheck racecheck; do
      KITTENS_GEMM_STAGES=$s timeout 100 $SAN --tool $tool $K bench gemm_bf16 --shapes 640x512x520,3000x1000x3000 --tiles $t --clusters 1,2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY" | sed "s/^/$t s$s $tool /" | tee -a "$R/sanitizer.txt"
    done
  fi
done
echo "== 2. default ring against deeper"
for r in 1 2; do
  for s in 4 5; do
    for L in nk kn; do
      KITTENS_GEMM_STAGES=$s timeout 60 $K bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 --b-layout $L --checks none --json "$R/c3000_s${s}_${L}_$r.json" 2>&1 | grep -E "^ +3000x" | sed "s/^/$r s$s $L /" | tee -a "$R/ab.txt"
    done
    KITTENS_GEMM_STAGES=$s timeout 100 $K bench gemm_bf16 --shapes 3008x3008x3008,2000x2000x2000,4000x8000x3000 --tiles 128x192 --checks none --json "$R/t192_s${s}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r s$s /" | tee -a "$R/ab.txt"
  done
  for s in 3 4; do
    KITTENS_GEMM_STAGES=$s timeout 100 $K bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192 --tiles 128x256 --checks none --json "$R/t256_s${s}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r s$s /" | tee -a "$R/ab.txt"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
