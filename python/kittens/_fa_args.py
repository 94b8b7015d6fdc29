"""FlashAttention's option arguments (``window_size``, ``softcap``) checked once for every entry point that
takes them (kittens.flash_attn, kittens.kvcache): torch-free, so importing either needs nothing more."""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple


def _check_window(window_size: Any) -> Tuple[int, int]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair (left, right), got {window_size!r}") from None
    for side, v in (("left", left), ("right", right)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"window_size {side} must be an int, got {type(v).__name__}")
        if int(v) < -1:
            raise ValueError(
                f"window_size={tuple(window_size)!r}: the {side} side must be -1 (unbounded) or at least 0, "
                f"got {int(v)}"
            )
    return int(left), int(right)


def _check_softcap(softcap: Any) -> Optional[float]:
    """FlashAttention's ``softcap``: 0.0 for none (returned as None), else finite and positive."""
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap must be a float, got {type(softcap).__name__}")
    if not (softcap >= 0.0 and math.isfinite(softcap)):  # NaN too
        raise ValueError(f"softcap={softcap!r}: must be 0.0 (none) or finite and positive")
    return float(softcap) if softcap > 0.0 else None


def packs_gqa(sq: int, h: int, hk: int, slopes, window) -> bool:
    """Whether the decode kernel packs a GQA group's query heads into a block's rows
    (``kittens_kernels::attn_paged_problem::PagedProblem::packs_gqa``): one query, a group of 2 or more, no
    ALiBi, no window. Here, below both kittens/kvcache.py (the split count) and the CUDA dispatch (the
    tensors' declared shapes), which ask it the same question."""
    return sq == 1 and h > hk and slopes is None and window is None
