# Call 5: the regression round (bench/run_regression_h100.sh) at the submitted state: the backward's
# default is now "auto" (the atomic form at head dim 128).
set -uo pipefail
OUT="$OUT" bash bench/run_regression_h100.sh
