#!/usr/bin/env bash
# The sector rule (B on 32-byte sectors, A and B in half the L2: in place without clusters), in ONE
# device call. Needs .carry/kittens (this commit), .carry/kittens_prev (the build before) and
# .carry/python.
#   1. checks (default check shapes, both B layouts) at shapes the rule now runs unclustered;
#   2. prev against new with the default plan, twice: squares 2000-2032 (on sectors), 2008 (off),
#      3024 and 4000 (on sectors, larger than half the L2), 2000x3000x2000 and 1536x2000x2000;
#   3. the sweep (46 shapes); kittens.matmul at 2000^3 and 3000^3 against torch.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. checks"
for L in nk kn; do
  timeout 150 $K bench gemm_bf16 --shapes 2000x2000x2000 --b-layout $L --checks 2000x2000x2000,1000x2000x1000,2000x1000x2032,1999x2001x2000 > "$R/checks_$L.txt" 2>&1
  echo "$L: $(grep -cE ' ok$' "$R/checks_$L.txt") ok"; grep -E "FAIL|rror" "$R/checks_$L.txt" | head -5
done
echo "== 2. prev against new"
S=2000x2000x2000,2016x2016x2016,2032x2032x2032,2008x2008x2008,3024x3024x3024,4000x4000x4000,2000x3000x2000,1536x2000x2000
for r in 1 2; do
  for v in prev new; do
    KK=$K; [ $v = prev ] && KK=.carry/kittens_prev
    for L in nk kn; do
      timeout 150 $KK bench gemm_bf16 --shapes $S --b-layout $L --checks none --json "$R/ab_${v}_${L}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v $L /" | tee -a "$R/ab.txt"
    done
  done
done
echo "== 3. sweep and kittens.matmul"
timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep.json" --plot "$R/sweep.png" > "$R/sweep.txt" 2>&1
grep -E "geometric" "$R/sweep.txt" | tail -1; grep -E "^ +3000x3000" "$R/sweep.txt" | tail -1
timeout 100 python3 -m kittens.bench gemm --sizes 2000,3000 --checks 2000x2000x2000,1999x2001x2000 --json "$R/matmul.json" 2>&1 | tail -6 | tee "$R/matmul.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
