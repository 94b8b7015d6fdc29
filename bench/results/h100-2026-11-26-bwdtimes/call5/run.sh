# Call 5: head dim 64 (the training demo's): both backward forms against the backends, interleaved;
# the training demo with each form; where the demo's kittens arm spends host time (cProfile).
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$R/gpu.txt"
. bench/gpu_python_env.sh
timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --dim 64 --seqs 1024,2048,4096,8192 --extra "" --iters 12 --warmup 2 --json "$R/bwd_d64.json" > "$R/bwd_d64.txt" 2>&1; echo "d64 rc $?"
grep -A12 "x two" "$R/bwd_d64.txt" | head -14
for form in two atomic; do
  KITTENS_ATTN_BWD=$form timeout 120 python3 -m kittens.train_demo --steps 100 --json "$R/train_$form.json" > "$R/train_$form.txt" 2>&1; echo "train $form rc $?"; tail -3 "$R/train_$form.txt"
done
timeout 120 python3 -m cProfile -s tottime -m kittens.train_demo --steps 60 --arms kittens > "$R/cprofile_kittens.txt" 2>&1; echo "cprofile rc $?"
timeout 120 python3 -m cProfile -s tottime -m kittens.train_demo --steps 60 --arms sdpa > "$R/cprofile_sdpa.txt" 2>&1
grep -m1 -B2 -A28 "ncalls" "$R/cprofile_kittens.txt" | cut -c1-150
grep -m1 -A12 "ncalls" "$R/cprofile_sdpa.txt" | cut -c1-150
tar -C "$R" -czf "$OUT/results.tgz" .
