#!/usr/bin/env bash
# Prepares the Python package for a GPU machine without internet (CPython 3.12, x86-64 there): builds
# the kittens wheel — manylinux_2_28, abi3, so the one wheel serves every CPython >= 3.9 — and downloads
# the wheels the GPU tests need but such a machine may lack (pytest and its dependencies, ml_dtypes,
# numpy; transformers and its dependencies in hf/), all into .carry/python/. bench/run_h100.sh installs
# them there with `pip install --no-deps --target` and runs the tests and benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.carry/python
venv=target/python-bundle-venv
py=${PY_VERSION:-3.12}
rm -rf "$out"
mkdir -p "$out"
[ -x "$venv/bin/maturin" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.9,<2"; }
# manylinux_2_28 needs glibc symbols no newer than 2.28: link through zig (the ziglang that
# scripts/install-amdgpu-clang.sh puts in the user's cache) with maturin's --zig.
bash scripts/install-amdgpu-clang.sh >/dev/null
. scripts/user-cache.sh
zig=$(ls "$(kittens_toolchains)"/ziglang/ziglang/zig)
mkdir -p target/zigbin
ln -sf "$zig" target/zigbin/zig
(cd python && PATH="$PWD/../target/zigbin:$PATH" "../$venv/bin/maturin" build --release --zig \
    --compatibility manylinux_2_28 --out "../$out")
# The wheel's benchmark records name the commit it was built from (kittens-runtime's build.rs): refuse a
# bundle whose extension does not carry this checkout's HEAD (a stale cargo build), rather than ship
# results stamped with the wrong commit.
head=$(git rev-parse HEAD)
whl=$(ls "$out"/kittens-*.whl)
if ! unzip -p "$whl" '*.so' | grep -ac "$head" >/dev/null; then  # -c reads to the end: no SIGPIPE under pipefail
  echo "python-gpu-bundle: $whl does not embed HEAD $head; rebuild (touch crates/kittens-runtime/build.rs)" >&2
  exit 1
fi
"$venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "$py" --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$out" pytest ml_dtypes numpy
# transformers and its dependencies (kittens.integrations.transformers, `kittens.bench model`), apart: the
# GPU machine installs them only where it lacks transformers (bench/gpu_python_env.sh).
"$venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "$py" --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$out/hf" transformers
ls -l "$out"
du -sh "$out"
