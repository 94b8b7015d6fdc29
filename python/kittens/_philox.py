"""The layernorm kernel's dropout mask drawn with integer torch ops: the same bits as the kernels' Philox
4x32-10 stream (``kittens_ir::philox``), for the composite backward of ``kittens.ops.layernorm_backward`` and
the tests that check it against the forward kernel's mask."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

# The kernels' dropout stream (kittens_ir::philox): element e of the stream keyed by (seed, offset) is word
# e mod 4 of Philox 4x32-10 at counter [e/4 lo, e/4 hi, offset lo, offset hi], key [seed lo, seed hi]; its
# uniform is the word's top 24 bits times 2^-24, kept where it is >= p (compared in float32).
_M0, _M1, _W0, _W1, _MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def _mulhilo(m: int, a: Tensor) -> Tuple[Tensor, Tensor]:
    """The high and low 32-bit halves of ``m * a`` (32-bit unsigned values held in int64) without
    overflowing int64: m split into 16-bit halves, each partial product below 2^48."""
    lo_p = a * (m & 0xFFFF)
    hi_p = a * (m >> 16)
    lo = (lo_p + ((hi_p & 0xFFFF) << 16)) & _MASK
    hi = (hi_p + (lo_p >> 16)) >> 16
    return hi, lo


def dropout_keep(rows: int, dim: int, p: float, seed: int, offset: int, device=None) -> Tensor:
    """The layernorm kernel's dropout mask, ``(rows, dim)`` bool (True: kept), drawn with integer torch
    ops on ``device`` (the same bits as the kernels' Philox 4x32-10; any seed and offset, taken mod
    2^64)."""
    n = rows * dim
    seed, offset = int(seed) % 2**64, int(offset) % 2**64
    groups = torch.arange((n + 3) // 4, dtype=torch.int64, device=device)
    c0 = groups & _MASK
    c1 = groups >> 32
    c2 = torch.full_like(groups, offset & _MASK)
    c3 = torch.full_like(groups, offset >> 32)
    k0, k1 = seed & _MASK, seed >> 32
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    words = torch.stack([c0, c1, c2, c3], dim=-1).reshape(-1)[:n]
    u = (words >> 8).to(torch.float32) * (1.0 / 16777216.0)
    p32 = torch.tensor(p, dtype=torch.float32).item()  # the kernels compare in float32
    return (u >= p32).reshape(rows, dim)
