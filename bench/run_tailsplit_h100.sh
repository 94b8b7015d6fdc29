#!/usr/bin/env bash
# The attention forward's key split (Flash-Decoding; kittens_kernels::attn_fwd::split) on an H100, in
# ONE device call of about 150 s:
#   1. `kittens bench attn_fwd --checks decode`: decoding shapes (B1 H32 Nq1 Nkv32768; B4 H32/KV8 Nq1
#      Nkv8192; B1 H32/KV8 Nq16 Nkv4096 causal bottom-right; all D128) split as the planner says for
#      the device, against the unsplit kernel on the same inputs: both checked on every element of O
#      and the log-sum-exp by the test rule against f64, both timed (median of 20, the split's time
#      with its merge).
#   2. `kittens bench attn_fwd --checks lse`: the log-sum-exp / length / alignment / rounding cases,
#      each with the split the planner picks (older short cases split too now), and forced splits at
#      odd lengths (G = 2..8, more parts than key blocks, rows with no key, RTZ/RTNA merges).
#   3. compute-sanitizer memcheck and racecheck on `--checks split` (the forced-split cases only).
#   4. If .carry/python holds a wheel (scripts/python-gpu-bundle.sh): the Python GPU tests of the
#      attention's lengths and log-sum-exp (decoding against 32768 and 8191 keys takes the split) and
#      a CUDA graph capture of a split call.
# Needs .carry/kittens (release binary of this checkout: `cargo build --release -p kittens-cli` and
# copy target/release/kittens). Writes logs and JSON under $OUT.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K=.carry/kittens
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== decoding: split vs unsplit, both checked on every element, timed"
timeout 50 $K bench attn_fwd --checks decode --iters 20 --warmup 3 --json "$OUT/decode.json" 2>&1 \
  | tail -8 | tee "$OUT/decode.txt"
echo "== log-sum-exp, lengths, alignments, roundings, forced splits: every element by the rule"
timeout 45 $K bench attn_fwd --checks lse --json "$OUT/lse.json" 2>&1 | tail -22 | tee "$OUT/lse.txt"
if [ -x $SAN ]; then
  echo "== memcheck and racecheck on the forced-split cases"
  timeout 20 $SAN --tool memcheck $K bench attn_fwd --checks split 2>&1 | tail -3 | tee "$OUT/memcheck.txt"
  timeout 20 $SAN --tool racecheck $K bench attn_fwd --checks split 2>&1 | tail -3 | tee "$OUT/racecheck.txt"
fi
if ls .carry/python/kittens-*.whl >/dev/null 2>&1; then
  . bench/gpu_python_env.sh
  echo "== pytest: attention lengths, log-sum-exp and decoding on CUDA (the split where it pays)"
  timeout 35 python3 -m pytest -q -rs -k "lse_and_lengths or decoding_split" python/tests/test_gpu.py 2>&1 \
    | tail -8 | tee "$OUT/pytest.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
