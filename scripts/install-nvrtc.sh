#!/usr/bin/env bash
# Installs NVRTC (NVIDIA's run-time CUDA compiler) from PyPI into <repo>/.cache/nvrtc, so that the sm_90a
# compile checks run on a machine with no GPU and no CUDA toolkit (docs/architecture.md §6: PyPI
# nvidia-cuda-nvrtc 13.0.88 compiles wgmma code for sm_90a on a CPU-only machine).
# Idempotent: a second run finds the library and does nothing. Prints the library folder on success.
# The runtime looks for NVRTC in $KITTENS_NVRTC (absolute), then this cache (found from the source tree or
# the executable's cargo tree, never the current folder), then the system (/usr/local/cuda, ldconfig).
set -euo pipefail
VERSION="13.0.88"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${KITTENS_NVRTC_CACHE:-$ROOT/.cache/nvrtc}"
# The runtime loads libraries from absolute paths only: resolve a relative override here, once.
case "$DEST" in /*) ;; *) DEST="$(pwd)/$DEST" ;; esac
LIB="$DEST/nvidia/cu13/lib"

if [ -f "$LIB/libnvrtc.so.13" ] && [ -f "$DEST/.version" ] && [ "$(cat "$DEST/.version")" = "$VERSION" ]; then
    echo "$LIB"
    exit 0
fi
mkdir -p "$DEST"
# One installer at a time: parallel test binaries may call this script together.
exec 9>"$DEST/.lock"
flock 9
if [ ! -f "$LIB/libnvrtc.so.13" ]; then
    PY="$(command -v python3 || command -v python)"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
        --target "$DEST" "nvidia-cuda-nvrtc==$VERSION" >&2
fi
if [ ! -f "$LIB/libnvrtc.so.13" ]; then
    echo "install-nvrtc: pip finished but $LIB/libnvrtc.so.13 is missing" >&2
    exit 1
fi
echo "$VERSION" > "$DEST/.version"
echo "$LIB"
