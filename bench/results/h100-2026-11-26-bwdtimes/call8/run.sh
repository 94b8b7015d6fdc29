# Call 8: the final round at the submitted code: the GPU pytest suites (backward and the rest), the
# Python benches through the one timer (`time_many`: GEMM and forward via time_pair, layernorm and
# rotary via bench_mem), and the backward bench with its plot.
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
timeout 200 python3 -m pytest -q python/tests/test_gpu_backward.py python/tests/test_gpu.py > "$R/pytest.txt" 2>&1; echo "pytest rc $?: $(tail -1 "$R/pytest.txt")"
timeout 150 python3 -m kittens.bench attn --backward --seqs 2048,4096,8192 --iters 10 --warmup 2 --json "$R/bwd.json" --plot "$R/bwd.png" > "$R/bwd.txt" 2>&1; echo "bwd rc $?"; grep -v Warn "$R/bwd.txt" | grep -v "^ " | tail -13
timeout 60 python3 -m kittens.bench gemm --sizes 4096,8192 --iters 20 --warmup 5 --json "$R/gemm.json" > "$R/gemm.txt" 2>&1; echo "gemm rc $?"; tail -4 "$R/gemm.txt"
timeout 60 python3 -m kittens.bench attn --backend cudnn --seqs 4096 --iters 20 --warmup 5 --json "$R/fwd.json" > "$R/fwd.txt" 2>&1; echo "fwd rc $?"; tail -3 "$R/fwd.txt"
timeout 90 python3 -m kittens.bench layernorm --iters 20 --warmup 5 --json "$R/ln.json" > "$R/ln.txt" 2>&1; echo "layernorm rc $?"; tail -5 "$R/ln.txt"
timeout 90 python3 -m kittens.bench rotary --iters 20 --warmup 5 --json "$R/rope.json" > "$R/rope.txt" 2>&1; echo "rotary rc $?"; tail -5 "$R/rope.txt"
tar -C "$R" -czf "$OUT/results.tgz" .
