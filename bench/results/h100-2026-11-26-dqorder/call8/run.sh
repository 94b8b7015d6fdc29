# Call 8: wheel D (the submitted kernels) against wheel E (D's loads issued before the log-sum-exp is
# scaled at a key-block step's head), each with the key blocks' turns `scores` and `none`, alternated;
# the atomic form only, against cuDNN and FlashAttention-2 in the same process.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel E into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteD .carry/pythonD/kittens-*.whl
BASE="$PYTHONPATH"
for run in D-scores_1 E-none_1 D-none_1 E-scores_1 D-scores_2 E-none_2; do
  w=${run%%-*}; t=${run#*-}; t=${t%_*}
  if [ $w = D ]; then export PYTHONPATH="/tmp/siteD:$BASE"; else export PYTHONPATH="$BASE"; fi
  export KITTENS_ATTN_BWD_TURNS=$t
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json" | head -1) $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json" | head -1) $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
tar -C "$R" -czf "$OUT/results.tgz" .
