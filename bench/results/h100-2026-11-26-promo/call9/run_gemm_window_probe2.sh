# Windows 8 and 12 alternated at 3000^3 (B copied, the default loads), three rounds; then the sweep at 12.
nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2 3; do for W in 8 12; do
  echo "-- window $W round $r"
  KITTENS_GEMM_WINDOW=$W timeout 60 .carry/kittens bench gemm_bf16 --shapes 3000x3000x3000,3000x4096x3000 --tiles 128x192 --checks none 2>&1 | grep -E "^ +3000x"
done; done
KITTENS_GEMM_WINDOW=12 timeout 400 .carry/kittens bench gemm_bf16 --sweep llm,squares --checks none 2>&1 | tail -50 > /tmp/sw12.txt
grep geometric /tmp/sw12.txt; awk '$5+0<0.95 && $5+0>0' /tmp/sw12.txt
mkdir -p ${OUT:-/tmp/o}; cp /tmp/sw12.txt ${OUT:-/tmp/o}/sweep_w12.txt
