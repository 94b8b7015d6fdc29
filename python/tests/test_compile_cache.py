"""torch.compile's on-disk caches and kittens upgrades (kittens/_compile_cache.py).

A graph compiled by inductor with one kittens build and cached on disk must not be reused by another
build whose fake implementations differ: the cached code bakes in the old fakes' output layouts and
fails on the new kernels' outputs ("Error in op: torch.ops.kittens.rotary.default ... incorrect fake").
The end-to-end test makes an "old" build (a copy of the package whose rotary writes BHSD always), fills
a fresh cache directory with it, then runs the real package on that directory in new processes.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kittens  # noqa: E402
import kittens.ops  # noqa: E402,F401
from kittens import _compile_cache  # noqa: E402

# One process: compile rotary (q a transposed BSHD view, the case where the old and new layouts differ)
# times 2 with inductor, check it against eager, print the cache counters as JSON.
RUN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, kittens, kittens.ops
from torch._dynamo.utils import counters
g = torch.Generator().manual_seed(5)
q = torch.randn(1, 9, 2, 64, generator=g).to(torch.bfloat16).transpose(1, 2)
cos, sin = kittens.rotary_tables(9, 64, like=q)
f = torch.compile(lambda q, c, s: kittens.rotary(q, c, s) * 2, fullgraph=True, backend="inductor")
out = f(q, cos, sin)
ref = kittens.rotary(q, cos, sin) * 2
assert out.stride() == ref.stride(), (out.stride(), ref.stride())
torch.testing.assert_close(out.float(), ref.float(), rtol=0, atol=0)
print(json.dumps({"file": kittens.__file__, "tag": torch.compiler.config.cache_key_tag,
                  "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"])}))
"""


def _run(pkg_parent, cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_"))}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    r = subprocess.run([sys.executable, "-c", RUN, str(pkg_parent)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_tag_names_this_build_and_keeps_the_users():
    tag = _compile_cache.build_tag()
    assert tag.startswith(f"kittens-{kittens.__version__}-") and tag in torch.compiler.config.cache_key_tag
    old = torch.compiler.config.cache_key_tag
    try:
        torch.compiler.config.cache_key_tag = "mine|kittens-0.0.1-abc-def"
        assert _compile_cache.install() == f"mine|{tag}"  # the user's tag kept, another build's replaced
        assert _compile_cache.install() == f"mine|{tag}"  # idempotent
    finally:
        torch.compiler.config.cache_key_tag = old


def test_source_hash_follows_the_sources(tmp_path):
    pkg = tmp_path / "kittens"
    shutil.copytree(os.path.dirname(kittens.__file__), pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    before = _compile_cache.source_hash(str(pkg))
    assert before == _compile_cache.source_hash(os.path.dirname(kittens.__file__))
    (pkg / "integrations" / "transformers.py").write_text((pkg / "integrations" / "transformers.py").read_text() + "\n")
    assert _compile_cache.source_hash(str(pkg)) != before


def test_upgrade_does_not_reuse_a_cached_graph(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(os.path.dirname(kittens.__file__), old / "kittens",
                    ignore=shutil.ignore_patterns("__pycache__"))
    ops_py = old / "kittens" / "ops.py"
    src = ops_py.read_text()
    line = "    return dispatch.rotary_out_layout(q)\n"
    assert src.count(line) == 1, "the rotary layout rule moved: update this test's old build"
    ops_py.write_text(src.replace(line, '    return "bhsd"\n'))
    cache = tmp_path / "cache"
    first = _run(old, cache)
    assert first["file"].startswith(str(old)) and first["inductor"].get("fxgraph_cache_miss") == 1
    # The real package on the old build's cache: a miss (another tag), a correct result.
    new = _run(os.path.dirname(os.path.dirname(kittens.__file__)), cache)
    assert new["tag"] != first["tag"]
    assert new["inductor"].get("fxgraph_cache_miss") == 1 and not new["inductor"].get("fxgraph_cache_hit")
    # The same build again: the cache still serves it (the tag is stable within a build).
    again = _run(os.path.dirname(os.path.dirname(kittens.__file__)), cache)
    assert again["tag"] == new["tag"]
    assert again["inductor"].get("fxgraph_cache_hit") == 1 or again["aot"].get("autograd_cache_hit") == 1
