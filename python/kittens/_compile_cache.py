"""torch.compile's caches keyed on this kittens build (imported by :mod:`kittens.ops`).

Inductor's FX graph cache and AOTAutograd's cache (on by default, on disk under
``/tmp/torchinductor_<user>`` or ``TORCHINDUCTOR_CACHE_DIR``) key a compiled graph by its code, its
inputs' metadata, torch's version and the compiler's configuration. A custom op appears in that code by
name only (``torch.ops.kittens.rotary.default``): the Python of its fake implementation, which decided the
output shapes and strides baked into the cached code (buffer layouts, ``assert_tensor_metadata``), is not
part of the key. After a kittens upgrade that changes a fake (a new output layout, say), the cache would
hand back the old graph, and it fails at run time on the new kernel's output (or computes on a wrong
layout). So :func:`install` adds a tag naming this build to ``torch.compiler.config.cache_key_tag``,
torch's documented setting for this ("included in the cache key generation for all torch compile
caching", ``TORCH_COMPILE_CACHE_KEY_TAG``): the package version, the extension's build commit and a hash
of the package's Python sources (so an edited checkout counts as another build too). A tag the user set
is kept, ours appended. Every graph compiled in the process carries it, with or without kittens ops: a
kittens upgrade then recompiles those once as well.
"""

from __future__ import annotations

import hashlib
import os
from typing import Optional

_TAG: Optional[str] = None


def source_hash(root: Optional[str] = None) -> str:
    """A hash of every ``*.py`` file under the package directory ``root`` (default: this package), by
    relative path and contents, in path order."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    h = hashlib.blake2b(digest_size=12)
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        files += [os.path.join(d, n) for n in names if n.endswith(".py")]
    for path in sorted(files):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def build_tag() -> str:
    """``kittens-<version>-<commit>[+dirty]-<source hash>`` of the imported package (computed once)."""
    global _TAG
    if _TAG is None:
        from . import __version__, _kittens

        commit, dirty = _kittens.build_commit()
        _TAG = f"kittens-{__version__}-{commit[:12]}{'+dirty' if dirty else ''}-{source_hash()}"
    return _TAG


def install() -> Optional[str]:
    """Append :func:`build_tag` to ``torch.compiler.config.cache_key_tag`` (once; a tag of another kittens
    build in it is replaced); returns the setting's new value (None on a torch without the setting)."""
    import torch

    config = getattr(torch.compiler, "config", None)
    if config is None or not isinstance(getattr(config, "cache_key_tag", None), str):
        return None
    ours = build_tag()
    parts = [p for p in config.cache_key_tag.split("|") if p and not p.startswith("kittens-")]
    config.cache_key_tag = "|".join(parts + [ours])
    return config.cache_key_tag
