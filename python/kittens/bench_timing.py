"""How ``python -m kittens.bench`` and its sub-benchmarks (``kittens.bench_*``) time and judge: CUDA
events around every launch after a GPU sleep, warm-up and clock spin-up first, the median
(:func:`time_many`); the inputs rotated over copies spanning :data:`L2_MULTIPLE` times the L2; errors
against a float64 reference by the FlashAttention rule (:func:`compare`, :data:`FLOOR`); the commit the
extension was built from (:func:`_commit`). The module documentation of ``kittens.bench`` says why.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List

FLOOR = 1e-5
L2_MULTIPLE = 4


def _commit() -> str:
    """The commit the extension was built from (recorded at build time), with `+dirty` when the tree
    had changes then; `$KITTENS_COMMIT` overrides it."""
    if os.environ.get("KITTENS_COMMIT"):
        return os.environ["KITTENS_COMMIT"]
    from . import _kittens

    commit, dirty = _kittens.build_commit()
    return commit + ("+dirty" if dirty else "")


def _median(xs: List[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


SPIN_UP_SECONDS = 0.3
# GPU cycles of `torch.cuda._sleep` queued before each timed launch (about 100 µs at the H100's clock):
# while the GPU sleeps, the host enqueues the start event, the launch and the end event, so the events
# measure the kernel and not the host's call overhead (which is larger than a 2048³ GEMM's 28 µs; seen
# on the H100: without it our 2048³ row ran at 0.57x in Python and 0.93x from Rust).
HEAD_START_CYCLES = 200_000


def _spin_up(torch, fns, copies: int) -> None:
    """Launch `fns` in turn until SPIN_UP_SECONDS of wall time have passed: a count of warm-up launches
    is over in microseconds for a small GEMM, before an idle GPU has raised its clocks (seen on the H100:
    the first shape timed after start, 2048³, ran at 60-75 % of its later speed for both libraries)."""
    import time

    t0, i = time.perf_counter(), 0
    while time.perf_counter() - t0 < SPIN_UP_SECONDS:
        for _ in range(8):
            for fn in fns:
                fn(i % copies)
            i += 1
        torch.cuda.synchronize()


def time_many(torch, fns: Dict[str, Callable[[int], object]], copies: int, warmup: int, iters: int,
              timing: str = "interleaved") -> Dict[str, float]:
    """Median milliseconds per call of each ``fns[name](i)`` (i = input copy), from CUDA events around
    every call on the current stream, each after a GPU sleep (``HEAD_START_CYCLES``: the events time the
    GPU's work, not the host's call). ``interleaved``: one call of each in turn per iteration, the turn
    starting one further each iteration, so that all see the same clocks (an H100 at its power cap sets
    them by what ran in the last milliseconds: in blocked runs of the attention backward the library
    timed first gained about 5% on the one timed last, docs/performance.md); ``blocked``: all calls of one,
    then the next."""
    stream = torch.cuda.current_stream()

    def one(fn, i, acc):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HEAD_START_CYCLES)
        s.record(stream)
        fn(i % copies)
        e.record(stream)
        acc.append((s, e))

    times: Dict[str, list] = {k: [] for k in fns}
    if timing == "interleaved":
        _spin_up(torch, tuple(fns.values()), copies)
        for i in range(warmup):
            for fn in fns.values():
                fn(i % copies)
        order = list(fns.items())
        for i in range(iters):
            # Each in every position of the turn by iteration: none always follows the same one.
            for name, fn in order[i % len(order):] + order[:i % len(order)]:
                one(fn, i, times[name])
    else:
        for name, fn in fns.items():
            _spin_up(torch, (fn,), copies)
            for i in range(warmup):
                fn(i % copies)
            for i in range(iters):
                one(fn, i, times[name])
    torch.cuda.synchronize()
    return {k: _median([s.elapsed_time(e) for s, e in v]) for k, v in times.items()}


def time_pair(torch, ours: Callable[[int], None], theirs: Callable[[int], None], copies: int,
              warmup: int, iters: int, timing: str):
    """:func:`time_many` of two: ``(ours, theirs)`` milliseconds."""
    t = time_many(torch, {"ours": ours, "theirs": theirs}, copies, warmup, iters, timing)
    return t["ours"], t["theirs"]


def _rel(x, ref) -> float:
    d = (x.double() - ref).norm().item()
    r = ref.norm().item()
    return d / r if r > 0 else d


def compare(torch, ours, theirs, ref) -> dict:
    """Ours vs theirs, and each vs the float64 reference, by the FlashAttention rule."""
    finite = bool(torch.isfinite(ours).all().item())
    identical = bool(torch.equal(ours, theirs))
    e_ours, e_theirs = _rel(ours, ref), _rel(theirs, ref)
    return {
        "bit_identical": identical,
        "rel_err_vs_torch": _rel(ours, theirs.double()),
        "rel_err_ours": e_ours,
        "rel_err_torch": e_theirs,
        "all_finite": finite,
        "passed": finite and (identical or e_ours <= 2 * e_theirs + FLOOR),
    }


def _l2_bytes(torch) -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20))


def _with_backend(torch, name, fn):
    """`fn` with SDPA held to one backend (`cudnn` or `flash`, PyTorch's `sdpa_kernel`): a backend
    that cannot run the shape raises instead of falling back to another."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]

    def run(i):
        with sdpa_kernel(backend):
            return fn(i)

    return run


def time_one(torch, fn, copies, warmup, iters) -> float:
    """:func:`time_many` of one."""
    return time_many(torch, {"one": fn}, copies, warmup, iters)["one"]
