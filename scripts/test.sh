#!/usr/bin/env bash
# The project's test command (README, second command). Installs what the tests need into ./.cache
# (the AMDGPU clang from PyPI's ziglang, NVRTC from PyPI's nvidia-cuda-nvrtc, Debian's clang-19)
# and runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release 2>&1
