#!/usr/bin/env bash
# Installs the AMDGPU compilers the gfx942/gfx950 checks use, with no ROCm (docs/architecture.md §6):
#   1. PyPI `ziglang` 0.17.0, which carries clang 22.1 (targets gfx942 and gfx950), into the user's
#      cache, <cache>/toolchains/ziglang, where <cache> is $KITTENS_CACHE, else $XDG_CACHE_HOME/kittens,
#      else ~/.cache/kittens (scripts/user-cache.sh; created 0700);
#   2. Debian's clang-19, lld-19 and llvm-19 (gfx942 only), when apt-get exists and clang-19 is missing.
# Idempotent: a second run finds both and does nothing. Prints one line per step saying what it did.
# The runtime (kittens_runtime::amd) searches $KITTENS_AMDGPU_CLANG, /opt/rocm/llvm/bin/clang, this
# folder, then clang-19.
set -euo pipefail
ZIG_VERSION="0.17.0"
# shellcheck source=scripts/user-cache.sh
. "$(dirname "$0")/user-cache.sh"
TOOLCHAINS="$(kittens_toolchains)"
DEST="$TOOLCHAINS/ziglang"
ZIG="$DEST/ziglang/zig"
umask 077

if [ -x "$ZIG" ] && [ "$("$ZIG" version 2>/dev/null)" = "$ZIG_VERSION" ]; then
    echo "ziglang: $ZIG_VERSION already in $DEST"
else
    # One installer at a time: parallel test binaries may call this script together.
    exec 9>"$TOOLCHAINS/.ziglang.lock"
    flock 9
    if ! { [ -x "$ZIG" ] && [ "$("$ZIG" version 2>/dev/null)" = "$ZIG_VERSION" ]; }; then
        PY="$(command -v python3 || command -v python)"
        rm -rf "$DEST"
        "$PY" -m pip install --quiet --disable-pip-version-check --no-deps \
            --target "$DEST" "ziglang==$ZIG_VERSION" >&2
        echo "ziglang: installed $ZIG_VERSION into $DEST ($("$ZIG" clang --version | head -n1))"
    else
        echo "ziglang: $ZIG_VERSION already in $DEST"
    fi
    exec 9>&-
fi

if command -v clang-19 >/dev/null 2>&1 && command -v ld.lld-19 >/dev/null 2>&1 && command -v llvm-objdump-19 >/dev/null 2>&1; then
    echo "clang-19: already installed ($(command -v clang-19))"
elif command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
            echo "clang-19: missing; run as root: apt-get install -y clang-19 lld-19 llvm-19"; exit 0
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y clang-19 lld-19 llvm-19 >&2; then
        $SUDO apt-get update >&2
        $SUDO apt-get install -y clang-19 lld-19 llvm-19 >&2
    fi
    echo "clang-19: installed with apt-get ($(command -v clang-19))"
else
    echo "clang-19: missing and no apt-get here; gfx942 checks will use ziglang's clang"
fi
