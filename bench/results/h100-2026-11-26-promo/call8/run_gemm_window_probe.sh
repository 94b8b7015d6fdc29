nvidia-smi --query-gpu=name --format=csv,noheader
for W in 8 4 12 16 24 2; do
  echo "-- window $W"
  KITTENS_GEMM_WINDOW=$W timeout 90 .carry/kittens bench gemm_bf16 --shapes 3000x3000x3000 --tiles 128x192 \
    --loads tma-copy,tma-copy-a,tma-in-place,tma-copy-both --checks none 2>&1 | grep -E "^ +3000x"
done
