nvidia-smi --query-gpu=name --format=csv,noheader
for S in 4,4 8,4 4,2 8,2 16,2 16,1 8,1 2,4 1,8 4,8; do
  echo "-- copy waves,vectors = $S"
  KITTENS_COPY_SHAPE=$S timeout 60 .carry/kittens bench gemm_bf16 --shapes 3000x3000x3000,3000x4096x3000 --tiles 128x192 --checks none 2>&1 | grep -E "^ +3000x"
done
