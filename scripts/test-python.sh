#!/usr/bin/env bash
# The Python package's tests, part of scripts/test.sh: builds the wheel from python/ (pip fetches maturin
# into an isolated build environment), installs it into a fresh virtualenv with its dependencies (numpy,
# ml_dtypes) and pytest from PyPI, checks that the extension module links no GPU library, and runs
# pytest on the CPU interpreter. python/tests/test_gpu.py skips there with a message (no CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=target/python-test-venv
wheels=target/python-wheels
echo "== python: fresh virtualenv in $venv"
rm -rf "$venv" "$wheels"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
echo "== python: building the wheel (maturin)"
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" ./python
ls "$wheels"
echo "== python: installing it with numpy, ml_dtypes, pytest"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheels"/kittens-*.whl pytest
so=$("$venv/bin/python" -c 'import kittens._kittens as m; print(m.__file__)')
echo "== python: $so needs"
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
echo "== python: pytest"
# Run from outside python/ so that `import kittens` is the installed wheel, not the source folder.
cd "$(mktemp -d)"
"$root/$venv/bin/python" -c 'import kittens, sys; assert "python-test-venv" in kittens.__file__, kittens.__file__'
"$root/$venv/bin/pytest" -q -rs "$root/python/tests"
