# Sourced by bench/run_h100.sh on a GPU machine without internet: installs the carried
# kittens wheel (scripts/python-gpu-bundle.sh puts it in .carry/python, or $W) and the test wheels the
# machine may lack into /tmp/site, and puts that on PYTHONPATH. W names another folder for the kittens
# wheel (a branch's build) and SITE another install folder, so several builds can be tried in one call;
# the test wheels always come from .carry/python.
SITE="${SITE:-/tmp/site}"
mkdir -p "$SITE"
W="${W:-.carry/python}"
python3 -m pip install -q --no-deps --upgrade --target "$SITE" "$W"/kittens-*.whl
W=.carry/python
python3 -c 'import ml_dtypes' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" "$W"/ml_dtypes-*.whl
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-deps --target "$SITE" \
    "$W"/pytest-*.whl "$W"/pluggy-*.whl "$W"/iniconfig-*.whl "$W"/packaging-*.whl "$W"/pygments-*.whl
if ! python3 -c 'import transformers' 2>/dev/null && ls "$W"/hf/transformers-*.whl >/dev/null 2>&1; then
  # kittens.bench model; not numpy (the machine's torch was built against its own)
  ls "$W"/hf/*.whl | grep -v '/numpy-' | xargs python3 -m pip install -q --no-deps --target "$SITE"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
