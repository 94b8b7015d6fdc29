# Call 7: the submitted backward (form auto) at every bench shape, now with the backends' forward +
# backward timed beside ours.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
timeout 400 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --iters 10 --warmup 2 --json "$R/bwd.json" --plot "$R/bwd.png" > "$R/bwd.txt" 2>&1; echo "bench rc $?"
sed -n '/^shape/,$p' "$R/bwd.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
