"""``--norm-bwd-variants`` (``--norm-fwd-variants``): the norm backwards (forwards) timed under several
settings of ``KITTENS_NORM_BWD`` (``kittens_kernels::rows::ROW_LOOP_VAR``: blocks, waves per row, prefetch,
blocks per SM, partial sums in shared memory, one barrier a row, the next rows' inputs staged in shared
memory by ``cp.async`` (``stage=N``); forwards: ``KITTENS_NORM_FWD=per_lane=N``; ``--swiglu-variants``:
``KITTENS_SWIGLU=waves=N,chunks=C``) beside the
default and torch, in one process and one interleaved timing, so that a candidate and the default see the
same clocks and the same inputs. Each setting's result is judged against float64 by the same rule as the
default's."""

from __future__ import annotations

import os
from typing import Callable, Dict, List

VAR = "KITTENS_NORM_BWD"
FWD_VAR = "KITTENS_NORM_FWD"
SWIGLU_VAR = "KITTENS_SWIGLU"


def parse(spec: str) -> List[str]:
    """``"shared_acc=1,resident=2;prefetch=0"`` -> the settings (``;``-separated; each is comma-separated)."""
    return [v.strip() for v in (spec or "").split(";") if v.strip()]


def under(setting: str, fn: Callable, var: str = VAR):
    """``fn`` called with ``var=setting`` (the dispatch keys its handles by the variable)."""

    def call(*a):
        old = os.environ.get(var)
        os.environ[var] = setting
        try:
            return fn(*a)
        finally:
            if old is None:
                del os.environ[var]
            else:
                os.environ[var] = old

    return call


def fns(args, ours: Callable) -> Dict[str, Callable]:
    """``{"v:SETTING": ours under SETTING}`` for each setting of ``args.norm_bwd_variants``."""
    return {f"v:{v}": under(v, ours) for v in parse(getattr(args, "norm_bwd_variants", ""))}


def swiglu_fns(args, ours: Callable) -> Dict[str, Callable]:
    """``{"v:SETTING": ours under KITTENS_SWIGLU=SETTING}`` for each of ``args.swiglu_variants``."""
    return {f"v:{v}": under(v, ours, SWIGLU_VAR) for v in parse(getattr(args, "swiglu_variants", ""))}


def fwd_fns(args, ours: Callable) -> Dict[str, Callable]:
    """``{"v:SETTING": ours under KITTENS_NORM_FWD=SETTING}`` for each of ``args.norm_fwd_variants``."""
    return {f"v:{v}": under(v, ours, FWD_VAR) for v in parse(getattr(args, "norm_fwd_variants", ""))}


def judge_all(check: dict, variants: Dict[str, Callable], judge: Callable) -> None:
    """Each variant's ``judge(fn)`` (a dict with ``passed``) into ``check`` under its name; a failed one fails
    the row. A setting the library refuses (its error under ``{name}_error``) is left out of ``variants``
    (not timed)."""
    for name, fn in list(variants.items()):
        try:
            c = judge(fn)
        except (ValueError, RuntimeError) as e:
            check[f"{name}_error"] = str(e).splitlines()[0][:200]
            del variants[name]
            continue
        check[f"{name}_passed"] = c["passed"]
        check["passed"] = check["passed"] and c["passed"]


def print_variants(rows: List[dict]) -> None:
    """One line per (shape, variant): its fraction of the copy bandwidth and speed against the default and
    torch.compile."""
    lines = []
    for r in rows:
        for k in r:
            if k.startswith("v:") and k.endswith("_error"):
                lines.append(f"{r['shape']:<40} {k[2:-6]:<44} refused: {r[k]}")
            if k.startswith("v:") and k.endswith("_ms"):
                name = k[:-3]
                ms = r[k]
                lines.append(f"{r['shape']:<40} {name[2:]:<44} {r[name + '_of_copy']:6.3f} of copy  "
                             f"{r['ours_ms'] / ms:5.3f}x default  {r['compiled_ms'] / ms:5.3f}x compiled  "
                             f"{'ok' if r.get(name + '_passed') else 'FAILED'}")
    if lines:
        print(f"\nsettings beside the default (same run, same inputs; norm bwd rows: {VAR}, norm fwd rows: "
              f"{FWD_VAR}, swiglu rows: {SWIGLU_VAR}):")
        for ln in lines:
            print(ln)
