#!/usr/bin/env bash
# Installs NVRTC (NVIDIA's run-time CUDA compiler) from PyPI into the user's cache,
# <cache>/toolchains/nvrtc (scripts/user-cache.sh: $KITTENS_CACHE, else $XDG_CACHE_HOME/kittens, else
# ~/.cache/kittens; created 0700), so that the sm_90a compile checks run on a machine with no GPU and
# no CUDA toolkit (docs/architecture.md §6: PyPI nvidia-cuda-nvrtc 13.0.88 compiles wgmma code for
# sm_90a on a CPU-only machine).
# Idempotent: a second run finds the library and does nothing. Prints the library folder on success.
# The runtime looks for NVRTC in $KITTENS_NVRTC (absolute), then this folder (the same rule, never the
# current folder nor the source tree), then the system (/usr/local/cuda, ldconfig).
set -euo pipefail
VERSION="13.0.88"
# shellcheck source=scripts/user-cache.sh
. "$(dirname "$0")/user-cache.sh"
DEST="$(kittens_toolchains)/nvrtc"
LIB="$DEST/nvidia/cu13/lib"
umask 077

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
