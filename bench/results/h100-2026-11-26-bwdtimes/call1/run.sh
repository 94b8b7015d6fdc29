# Call 1: the backward's kernels one by one (torch.profiler), ours in both forms against SDPA's cuDNN
# and FlashAttention-2 backends, B16 H16 D128 N 2048 and 8192, causal and not.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
timeout 400 python3 bench/attn_bwd_kernel_times.py --seqs 2048,8192 --json "$R/times.json" > "$R/times.txt" 2>&1; echo "rc $?"
grep -v Warning "$R/times.txt" | head -150
tar -C "$R" -czf "$OUT/results.tgz" .
