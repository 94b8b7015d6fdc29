#!/usr/bin/env bash
# The main job (the README's first command): installs the compilers the demo uses into the user's cache
# (scripts/install-amdgpu-clang.sh: PyPI ziglang for gfx942/gfx950, Debian's clang-19 where apt-get is
# available; scripts/install-nvrtc.sh: PyPI nvidia-cuda-nvrtc for sm_90a), then runs `kittens demo`
# with the arguments given. The `kittens` binary itself never runs an install script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-amdgpu-clang.sh >&2
bash scripts/install-nvrtc.sh >/dev/null
exec cargo run --release -p kittens-cli -- demo "$@"
