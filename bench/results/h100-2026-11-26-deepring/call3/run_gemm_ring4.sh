#!/usr/bin/env bash
# Four ring stages for 128x256 (C stored box by box beside them), in ONE device call. Needs
# .carry/kittens (this commit), .carry/kittens_prev (the build before: three stages) and .carry/python.
#   1. checks of every block in clusters of 1 and 2, both B layouts, and with cp.async loads;
#      compute-sanitizer memcheck, racecheck and synccheck of 128x256 GEMMs;
#   2. prev against new, alternated twice, at shapes that take 128x256 (squares, LLM layers);
#   3. the sweeps (46 shapes) twice with the new build; kittens.matmul: GPU tests and 3000^3, 4096^3
#      against torch.
set -uo pipefail
OUT="${OUT:-bench/out}"
R=$(mktemp -d)
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
echo "== 1. checks"
for L in nk kn; do
  timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles all --clusters 1,2 --b-layout $L > "$R/checks_$L.txt" 2>&1
  echo "$L: $(grep -cE ' ok$' "$R/checks_$L.txt") ok"; grep -E "FAIL|rror" "$R/checks_$L.txt" | head -5
done
timeout 150 $K bench gemm_bf16 --shapes 256x256x256 --tiles 128x256 --loads cp-async,tma-copy-both > "$R/checks_loads.txt" 2>&1
echo "loads: $(grep -cE ' ok$' "$R/checks_loads.txt") ok"; grep -E "FAIL|rror" "$R/checks_loads.txt" | head -5
if [ -x $SAN ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 100 $SAN --tool $tool $K bench gemm_bf16 --shapes 640x512x520,3000x1000x3000 --tiles 128x256 --clusters 1,2 --checks none --iters 1 --min-iters 1 --warmup 0 2>&1 | grep -E "SUMMARY" | sed "s/^/$tool /" | tee -a "$R/sanitizer.txt"
  done
fi
echo "== 2. prev against new"
for r in 1 2; do
  for v in prev new; do
    KK=$K; [ $v = prev ] && KK=.carry/kittens_prev
    timeout 150 $KK bench gemm_bf16 --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x14336,8192x28672x4096,16384x4096x4096 --tiles 128x256 --checks none --json "$R/ab_${v}_$r.json" 2>&1 | grep -E "^ +[0-9]+x" | sed "s/^/$r $v /" | tee -a "$R/ab.txt"
  done
done
echo "== 3. sweeps and kittens.matmul"
for r in 1 2; do
  timeout 300 $K bench gemm_bf16 --sweep llm,squares --json "$R/sweep_$r.json" --plot "$R/sweep_$r.png" > "$R/sweep_$r.txt" 2>&1
  grep -E "geometric" "$R/sweep_$r.txt" | tail -1; grep -E "^ +3000x3000" "$R/sweep_$r.txt" | tail -1
done
timeout 200 python3 -m pytest -q -rs python/tests/test_gpu.py 2>&1 | tail -2 | tee "$R/pytest.txt"
timeout 100 python3 -m kittens.bench gemm --sizes 3000,4096 --checks 3000x1000x777,2999x3001x3000,1000x1032x1000 --json "$R/matmul.json" 2>&1 | tail -6 | tee "$R/matmul.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
