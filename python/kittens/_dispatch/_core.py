"""The prepared-call table every op of :mod:`kittens._dispatch` shares: prepare a key once, look it up,
launch. Tests replace ``_prepare`` and ``_raw_stream`` here (the op modules call them through this module)."""

from __future__ import annotations

import sys
from typing import Dict

import torch

from .. import _kittens

_BF16 = torch.bfloat16
_HANDLES: Dict[tuple, tuple] = {}
# Distinct keys kept (a decode loop whose cache grows by one key per token adds one per step); past it
# the table starts over, so its memory is bounded.
_MAX_KEYS = 4096
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _say(line: str) -> None:
    if _kittens.verbose():
        print(line, file=sys.stderr)


def _spec(name: str, shape, strides, dtype: str = "bfloat16"):
    return (name, [int(s) for s in shape], [int(s) for s in strides], dtype)


def _prepare(key, entry: str, problem: dict, tensors, device: int, free=(), extra=None):
    from .. import _find_nvrtc

    _find_nvrtc()
    handle, loads = _kittens.prepare(entry, problem, list(tensors), list(free), device)
    for line in loads:
        _say(line)
    # The scratch tensors as offsets into one allocation (256-byte aligned, as the allocator's own).
    offsets, total = [], 0
    for n in handle.scratch:
        offsets.append(total)
        total += -(-int(n) // 256) * 256
    return _store(key, (handle, (total, tuple(offsets)), extra))


def _store(key, rec):
    """Keeps ``rec`` for ``key``; past ``_MAX_KEYS`` keys the table starts over (bounded memory)."""
    if len(_HANDLES) >= _MAX_KEYS:
        _HANDLES.clear()
    _HANDLES[key] = rec
    return rec


def _launch(rec, ptrs, device: int, free=(), device_obj=None) -> None:
    total, offsets = rec[1]
    if offsets:
        # Stream-ordered like any torch allocation: freed when this returns, reused by later work on
        # the stream only after the launches (the caching allocator's rule for its current stream).
        base = torch.empty(total, dtype=torch.uint8, device=device_obj).data_ptr()
        ptrs = ptrs + tuple(base + o for o in offsets)
    rec[0].launch(ptrs, _raw_stream(device), list(free))


def _same_device(**ts) -> int:
    (first, t0), *rest = ts.items()
    for name, t in rest:
        if t.device != t0.device:
            raise ValueError(f"kittens: {first} is on {t0.device} and {name} on {t.device}: the tensors are on "
                             "different devices (all must be on one CUDA device)")
    return t0.get_device()


def _bf16s(**ts) -> None:
    for name, t in ts.items():
        if t.dtype != _BF16:
            raise TypeError(f"{name} has dtype {t.dtype}; kittens' kernels take bfloat16")




def _check_out(name: str, out, shape, strides, dtype, like) -> None:
    """``out=`` must be exactly what the call would allocate: shape, dtype, device and memory order."""
    if out.dtype != dtype or tuple(out.shape) != tuple(shape) or out.device != like.device or (
        out.numel() > 1 and not all(n <= 1 or s == w for n, s, w in zip(out.shape, out.stride(), strides))
    ):
        raise ValueError(
            f"{name} must be a {dtype} tensor of shape {tuple(shape)} and strides {tuple(strides)} on "
            f"{like.device} (dense in one layout, as the call would make it); got {out.dtype} "
            f"{tuple(out.shape)} strides {out.stride()} on {out.device}"
        )



def _dense(**ts) -> None:
    for name, t in ts.items():
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()})")
