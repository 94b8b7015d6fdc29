# Call 9: the training demo at head dim 128 (4 heads of 128 in a 512-wide model), where the default
# backward is the atomic-dQ form; the wheel of d63e617 (the submitted kernels).
set -uo pipefail
R=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
. bench/gpu_python_env.sh
python3 -m pip install -q --no-deps --target /tmp/siteD .carry/pythonD/kittens-*.whl
export PYTHONPATH="/tmp/siteD:$PYTHONPATH"
KITTENS_VERBOSE=1 timeout 300 python3 -m kittens.train_demo --steps 150 --heads 4 --json "$R/train.json" --plot "$R/train.png" > "$R/train.txt" 2>&1; echo "train rc $?"
grep -E "kvdq|dq_convert|final|within" "$R/train.txt" | cut -c1-200
tar -C "$R" -czf "$OUT/results.tgz" .
