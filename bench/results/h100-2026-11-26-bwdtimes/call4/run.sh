# Call 4: the regression round (bench/run_regression_h100.sh: checks, the backward and forward
# against SDPA, GEMMs, the training demo, memcheck) with the benches' interleaved timing rotating the
# turn, the GPU's clocks and power logged every 200 ms.
set -uo pipefail
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > /tmp/clocks.csv 2>&1 &
SMI=$!
mkdir -p /tmp/o
OUT=/tmp/o bash bench/run_regression_h100.sh
kill $SMI
cp /tmp/o/results.tgz "$OUT/results.tgz"; cp /tmp/clocks.csv "$OUT/clocks.csv"
