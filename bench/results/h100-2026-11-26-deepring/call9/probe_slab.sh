set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
for r in 1 2; do
  for v in base probe; do
    if [ $v = probe ]; then export KITTENS_PROBE_SLAB=1; else unset KITTENS_PROBE_SLAB; fi
    timeout 200 python3 -m kittens.bench attn --backward --bwd-form both --seqs 2048,4096,8192 --iters 10 --warmup 2 --json "$R/bwd_${v}_$r.json" > "$R/bwd_${v}_$r.txt" 2>&1
    echo "$r $v: $(tail -1 "$R/bwd_${v}_$r.txt")"
  done
done
tar -C "$R" -czf "$OUT/results.tgz" .
