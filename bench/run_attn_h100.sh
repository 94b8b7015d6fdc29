#!/usr/bin/env bash
# One device call for attn_fwd lowered for sm_90a: the check-only shapes first with a short timeout (a
# protocol bug hangs, it does not crash), then compute-sanitizer memcheck on them when the toolkit has
# it, then every shape checked and timed. Run from the repository root on the GPU machine with the
# release binary at $K (default .carry/kittens); writes $OUT/attn.json, $OUT/log.txt, $OUT/gpu.txt.
set -uo pipefail
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
K="${K:-.carry/kittens}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
if ! timeout 90 $K bench attn_fwd --checks only --iters 1 --warmup 0; then
  echo "attn: checks failed or hung"
  exit 1
fi
if [ -z "${SKIP_SANITIZER:-}" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $K bench attn_fwd --checks only --iters 1 --warmup 0 2>&1 | tail -5
  if [ -n "${RACECHECK:-}" ]; then
    timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool racecheck $K bench attn_fwd --checks only --iters 1 --warmup 0 2>&1 | tail -8
  fi
fi
timeout "${TIMEOUT:-240}" $K bench attn_fwd --iters "${ITERS:-20}" --warmup 3 ${VARIANTS:+--variants} --json "$OUT/attn.json"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"
