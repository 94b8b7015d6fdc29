#!/usr/bin/env bash
# The Python package's tests, part of scripts/test.sh: builds the wheel from python/ (pip fetches maturin
# into an isolated build environment), installs it into a fresh virtualenv with its dependencies (numpy,
# ml_dtypes) and pytest from PyPI, installs torch from PyPI for the torch tests (torch.library ops,
# autograd, torch.compile on the CPU interpreter), checks that the extension module links no GPU
# library, and runs pytest on the CPU interpreter. Only the GPU tests (test_gpu*.py) skip there, with a
# message (no CUDA); a torch test never skips: KITTENS_REQUIRE_TORCH=1 makes a missing torch an error.
#
# torch: PyPI has no CPU-only Linux x86-64 wheel (that one lives on download.pytorch.org, which CI does
# not reach), and `pip install --no-deps torch` does not import (torch/__init__ preloads cuBLAS and the
# other nvidia-* wheels). So the whole wheel set comes from PyPI. Measured 2026-11-28 on the 2-core dev
# machine under a load average of 100-900 (other builds): ~3.0 GB downloaded (torch 2.15.0 539 MB,
# nvidia-* and triton the rest), 5.3 GB installed, 4-6 minutes wall clock from a cold pip cache (233 s
# in this script with matplotlib; 6 min in a scratch venv; 1.3 min of it the torch wheel alone). pytest
# then took 349 s for 117 tests; the torch tests are test_torch_ops.py + test_torch_cpu.py ~100 s
# (inductor's C++ compile of the block ~45 s with a cold cache) and test_ring_torch_cpu.py (gloo
# processes, skipped in CI before) ~250 s. The whole script ran in 12.3 minutes (wheel build
# incremental). pip's cache (~/.cache/pip, or PIP_CACHE_DIR) makes later runs on one machine mostly a
# copy. torch.compile's CPU backend (inductor) compiles C++: g++ must be on PATH (it is wherever the
# wheel builds). KITTENS_TORCH (a pip requirement, default "torch") pins the version; KITTENS_TORCH=none
# skips the install, for a machine without the disk, and then the torch tests fail rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/phases.sh
trap 'phase_summary "scripts/test-python.sh"' EXIT
venv=target/python-test-venv
wheels=target/python-wheels
phase "python: fresh virtualenv in $venv"
rm -rf "$venv" "$wheels"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
phase "python: building the wheel (maturin)"
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" ./python
ls "$wheels"
phase "python: installing it with numpy, ml_dtypes, pytest"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheels"/kittens-*.whl pytest
torch_req=${KITTENS_TORCH:-torch}
if [ "$torch_req" != none ]; then
    phase "python: installing $torch_req, matplotlib, transformers from PyPI"
    echo "   (torch with its CUDA wheels: PyPI has no CPU-only one) and"
    echo "   matplotlib (kittens.train_dist's plot, tested in test_ring_torch_cpu.py; 12 s, ~80 MB) and"
    echo "   transformers (test_torch_hf.py, test_nn_hf.py: Hugging Face models on kittens; 38 s, ~155 MB)"
    t0=$SECONDS
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$torch_req" matplotlib transformers
    echo "   torch installed in $((SECONDS - t0)) s: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
fi
# The torch tests must run (CI has no GPU, so only test_gpu*.py may skip).
export KITTENS_REQUIRE_TORCH=1
so=$("$venv/bin/python" -c 'import kittens._kittens as m; print(m.__file__)')
phase "python: $so needs"
readelf -d "$so" | grep NEEDED
if readelf -d "$so" | grep NEEDED | grep -Eiq 'cuda|nvrtc|cublas|hip|amdhip|python'; then
    echo "the extension module links a GPU library or libpython" >&2
    exit 1
fi
# No path of this checkout in the extension: a wheel built here would otherwise trust whatever lies at
# that path on the machine it is installed on.
if grep -qaF "$root" "$so"; then
    echo "the extension module holds the build path $root" >&2
    exit 1
fi
phase "python: pytest"
# Run from outside python/ so that `import kittens` is the installed wheel, not the source folder.
cd "$(mktemp -d)"
"$root/$venv/bin/python" -c 'import kittens, sys; assert "python-test-venv" in kittens.__file__, kittens.__file__'
t0=$SECONDS
"$root/$venv/bin/pytest" -q -rs --durations=10 "$root/python/tests"
echo "== python: pytest took $((SECONDS - t0)) s"
