#!/usr/bin/env bash
# Renamed bench/run_regression_h100.sh (2026-11-26), which adds memcheck of the GEMMs' programmatic
# launches; older results name this path.
exec bash "$(dirname "$0")/run_regression_h100.sh" "$@"
