#!/usr/bin/env bash
# The clusters' producer tail (no cluster barrier at the end), in ONE device call. Needs .carry/kittens
# (this commit), .carry/kittens_prev (the build before: a cluster barrier at the end) and .carry/python.
#   1. checks of every block in clusters of 1 and 2 (odd numbers of row tiles among the shapes) and
#      compute-sanitizer memcheck, racecheck and synccheck of clustered GEMMs;
#   2. prev against new, alternated twice: 2048^3, 3008^3, 4096^3 with clusters 1 and 2; 3000^3 (nk, kn);
#   3. the sweeps (46 shapes) with the new build; kittens.matmul: GPU tests and 3000^3 against torch.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. checks"
timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 1,2 > "$R/checks.txt" 2>&1
grep -cE " ok$" "$R/checks.txt"; grep -E "FAIL|rror" "$R/checks.txt" | head -5
if [ -x $SAN ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 100 $SAN --tool $tool $K bench gemm_bf16 --shapes 640x512x520,3000x1000x3000 --tiles 128x192,128x256 --clusters 2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY" | sed "s/^/$tool /" | tee -a "$R/sanitizer.txt"
  done
fi
echo "== 2. prev against new"
for r in 1 2; do
  for v in prev new; do
    KK=$K; [ $v = prev ] && KK=.carry/kittens_prev
    timeout 100 $KK bench gemm_bf16 --shapes 2048x2048x2048,3008x3008x3008,4096x4096x4096 --clusters 1,2 --checks none --json "$R/ab_${v}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v /" | tee -a "$R/ab.txt"
    for L in nk kn; do
      timeout 60 $KK bench gemm_bf16 --shapes 3000x3000x3000 --b-layout $L --checks none --json "$R/c3000_${v}_${L}_$r.json" 2>&1 | grep -E "^ +3000x" | sed "s/^/$r $v $L /" | tee -a "$R/ab.txt"
    done
  done
done
echo "== 3. sweeps and kittens.matmul"
timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep.json" --plot "$R/sweep.png" > "$R/sweep.txt" 2>&1
grep -E "geometric" "$R/sweep.txt" | tail -1; grep -E "^ +3000x3000" "$R/sweep.txt" | tail -1
timeout 200 python3 -m pytest -q -rs python/tests/test_gpu.py 2>&1 | tail -2 | tee "$R/pytest.txt"
timeout 100 python3 -m kittens.bench gemm --sizes 3000,4096 --checks 3000x1000x777,2999x3001x3000,1000x1032x1000 --json "$R/matmul.json" 2>&1 | tail -6 | tee "$R/matmul.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
