#!/usr/bin/env bash
# The project's test command (the README's second command). On a fresh machine it installs what the
# tests need into the user's cache (scripts/user-cache.sh: ~/.cache/kittens/toolchains unless
# KITTENS_CACHE or XDG_CACHE_HOME say otherwise) and the system — PyPI's ziglang (clang 22, gfx942 + gfx950), Debian's clang-19
# (gfx942), PyPI's nvidia-cuda-nvrtc (sm_90a) — then runs every test of the workspace in release mode, and
# the Python package's tests (scripts/test-python.sh: wheel, fresh virtualenv, pytest on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phases.sh
trap 'phase_summary "scripts/test.sh"' EXIT
# Formatting and lints first: `cargo fmt --check` and clippy with every warning an error.
for c in rustfmt clippy; do  # rustup's minimal profile has neither
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
    rustup component add "$c"
  fi
done
phase "cargo fmt --all --check"
cargo fmt --all --check
# In the release profile, so the proc-macros and build scripts it compiles are the ones the release
# test build below uses (the debug profile built its own); no code of the workspace depends on
# cfg(debug_assertions), so both profiles lint the same code.
phase "cargo clippy --workspace --all-targets --release -- -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings 2>&1
phase "installing toolchains (idempotent)"
bash scripts/install-amdgpu-clang.sh
bash scripts/install-nvrtc.sh
# One compile cache for this run (crates/kittens-runtime/src/cache): a kernel that several test binaries,
# the examples and the Python tests compile for one target with one compiler is compiled once per run,
# and every distinct one is compiled by this run, none taken from an earlier run's cache.
compile_cache=$(mktemp -d "${TMPDIR:-/tmp}/kittens-compile-cache.XXXXXX")
test_log=$(mktemp "${TMPDIR:-/tmp}/kittens-cargo-test.XXXXXX")
trap 'phase_summary "scripts/test.sh"; slowest_tests "$test_log"; rm -rf "$compile_cache" "$test_log"' EXIT
export KITTENS_COMPILE_CACHE="$compile_cache"
phase "cargo test --workspace --release --no-run (building the tests)"
cargo test --workspace --release --no-run 2>&1
phase "cargo test --workspace --release (running them)"
cargo test --workspace --release 2>&1 | tee "$test_log"
phase "examples (docs/writing-kernels.md)"
cargo run --release -p kittens-runtime --example rmsnorm 2>&1
cargo run --release -p kittens-runtime --example swiglu 2>&1
cargo run --release -p kittens-runtime --example row_sum 2>&1
cargo run --release -p kittens-runtime --example matmul 2>&1
phase "python package (scripts/test-python.sh)"
bash scripts/test-python.sh
