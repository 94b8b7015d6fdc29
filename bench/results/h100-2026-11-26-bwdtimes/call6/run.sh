# Call 6: how much the atomic key blocks' lock-step costs, bounded: wheel H (a04ffe7, the kernels of
# cddbccf) against wheel P (3289caa, the probe commit: no consumers barrier before dQ, verification off; racy,
# its dQ wrong), alternated, each the done-bar rows interleaved against the backends; P also with the
# warpgroup turns off. Ratios to cuDNN compare across the processes.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh          # wheel H into /tmp/site
python3 -m pip install -q --no-deps --target /tmp/siteP .carry/pythonP/kittens-*.whl
BASE="$PYTHONPATH"
for run in H_1 P_1 H_2 P_2 Pnone_1; do
  case $run in P*) export PYTHONPATH="/tmp/siteP:$BASE";; *) export PYTHONPATH="$BASE";; esac
  case $run in Pnone*) export KITTENS_ATTN_BWD_TURNS=none;; *) unset KITTENS_ATTN_BWD_TURNS;; esac
  timeout 150 python3 -m kittens.bench attn --backward --bwd-form atomic --seqs 2048,4096,8192 --extra "" --iters 10 --warmup 2 --json "$R/bwd_$run.json" > "$R/bwd_$run.txt" 2>&1
  echo "$run: $(grep -o '"commit": "[0-9a-f]\{7\}' "$R/bwd_$run.json") $(grep -o '"geomean_vs_cudnn_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"geomean_vs_flash_d128_n2048plus": [0-9.]*' "$R/bwd_$run.json") $(grep -o '"all_passed": [a-z]*' "$R/bwd_$run.json" | head -1)"
done
tar -C "$R" -czf "$OUT/results.tgz" .
