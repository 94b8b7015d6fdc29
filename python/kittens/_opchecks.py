"""The argument checks an op's real body and its fake implementation share, so that a fake refuses what
the real op refuses (issue 33: torch.compile traces with the fakes, and a fake that accepts an input the
kernel refuses only defers the error to the first run; one that refuses an input the kernel takes
breaks a graph that would run). Each error names the argument, what it got and what is needed.

Checks read only shapes, strides and dtypes, never data, so they run on FakeTensors; a symbolic size
(``torch.compile(dynamic=True)``) is checked only where the rule needs no concrete value.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from torch import Tensor

from ._opcall import _bf16


def _concrete(*xs) -> bool:
    return all(isinstance(x, int) for x in xs)


def same_shape(name: str, t: Tensor, like_name: str, like: Tensor) -> None:
    if tuple(t.shape) != tuple(like.shape):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; it must have {like_name}'s shape {tuple(like.shape)}")


def norm_weight(name: str, w: Tensor, x: Tensor) -> None:
    d = x.shape[-1]
    if w.dim() != 1 or w.shape[0] != d:
        raise ValueError(f"{name} has shape {tuple(w.shape)}; it must be ({d},), x's last dimension")


def rmsnorm_args(x: Tensor, residual: Optional[Tensor], weight: Tensor) -> None:
    """``kittens::rmsnorm``: bfloat16 x, weight (D,) and residual of x's shape."""
    _bf16("x", x)
    _bf16("weight", weight)
    norm_weight("weight", weight, x)
    if residual is not None:
        _bf16("residual", residual)
        same_shape("residual", residual, "x", x)


def rmsnorm_backward_args(grad: Tensor, h: Tensor, weight: Tensor, grad_h: Optional[Tensor]) -> None:
    """``kittens::rmsnorm_backward``: bfloat16 grad and grad_h of h's shape, weight (D,)."""
    for name, t in (("grad", grad), ("h", h), ("weight", weight)):
        _bf16(name, t)
    same_shape("grad", grad, "h", h)
    norm_weight("weight", weight, h)
    if grad_h is not None:
        _bf16("grad_h", grad_h)
        same_shape("grad_h", grad_h, "h", h)


def swiglu_args(gate: Tensor, up: Tensor, grad: Optional[Tensor] = None) -> None:
    """``kittens::swiglu`` (and its backward, with ``grad``): bfloat16 tensors of one shape."""
    _bf16("gate", gate)
    _bf16("up", up)
    same_shape("up", up, "gate", gate)
    if grad is not None:
        _bf16("grad", grad)
        same_shape("grad", grad, "gate", gate)


def dropout_p(p: float) -> None:
    """The layernorm's dropout probability, as the kernels take it."""
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"dropout p = {p} must be in [0, 1)")


def rotary_dim(q: Tensor) -> None:
    """The rotary kernels' head dimension (``kittens_kernels::rotary``'s rule)."""
    d = q.shape[-1]
    if _concrete(d) and (d % 16 or not 16 <= d <= 512):
        raise ValueError(f"rotary: head dimension {d} must be a multiple of 16 from 16 to 512")


# Head dims the CUDA attention forward takes (kittens._dispatch._attn's rule).
_CUDA_ATTN_DIMS = (32, 64, 96, 128, 192, 256)


def _view_args(t: Tensor):
    """``t``'s description as the extension's checks take it, without its address (a fake has none)."""
    return (0, [int(s) for s in t.shape], [int(s) for s in t.stride()], "bfloat16", t.device.type,
            t.device.index or 0)


def attention_args(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float], bottom_right: bool,
                   softcap: Optional[float], window: Optional[Sequence[int]]) -> None:
    """The fake of ``kittens::attention``: on CPU tensors of concrete sizes the very checks the real CPU
    path runs before it allocates (the extension's ``attention`` without an output: shapes, strides,
    head dim, GQA, scale, soft cap, window, mask); otherwise the rules both devices share that need no
    concrete stride (GQA, scale, head dim: the CUDA kernels take fewer), and on CUDA tensors of concrete
    strides the CUDA op's layout rule (``kittens._dispatch._attn.attn_strides``: the head dim contiguous,
    the other strides multiples of 8 elements, unless q, k, v are dense in one layout)."""
    sizes = [s for t in (q, k, v) for s in tuple(t.shape) + tuple(t.stride())]
    if q.device.type == "cpu" and _concrete(*sizes):
        from . import _kittens

        win = None if window is None else (int(window[0]), int(window[1]))
        _kittens.attention(_view_args(q), _view_args(k), _view_args(v), None, None, bool(causal), bool(bottom_right),
                           None if scale is None else float(scale),
                           softcap=None if softcap is None else float(softcap), window=win, alibi=None)
        return
    h, hk, d = q.shape[1], k.shape[1], q.shape[3]
    if _concrete(h, hk) and (hk == 0 or h % hk):
        raise ValueError(f"{h} query heads cannot share {hk} key/value heads: GQA needs H divisible by H_kv")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale={scale}: the softmax scale must be finite and positive")
    if _concrete(d) and q.device.type == "cuda" and d not in _CUDA_ATTN_DIMS:
        raise ValueError(f"head dim {d}: the attention forward on CUDA (sm_90a) takes 32, 64, 96, 128, 192 or 256")
    if q.device.type == "cuda" and _concrete(*sizes):
        # The CUDA op's layout rule (kittens._dispatch._attn): q, k, v dense in one layout, or each read in
        # its own strides, the head dim contiguous and every other stride a multiple of 8 elements.
        from ._dispatch._attn import _dense_layout, attn_strides

        if _dense_layout(q, k, v) is None:
            for name, t in (("q", q), ("k", k), ("v", v)):
                attn_strides(name, t.shape, t.stride())



def softcap_window(softcap: Optional[float], window: Optional[Sequence[int]]) -> None:
    """The kernels' rule on a soft cap (finite and positive; None for none) and a window (two ints, each
    -1 or at least 0; ``kittens_kernels::attn::score``), naming the argument: shared by ops whose fakes
    must refuse what the kernels refuse (``kittens::attention_paged``)."""
    if softcap is not None and not (math.isfinite(softcap) and softcap > 0):
        raise ValueError(f"softcap={softcap}: the soft cap must be finite and positive (None for none)")
    if window is not None:
        if len(window) != 2 or not all(isinstance(w, int) and not isinstance(w, bool) for w in window):
            raise ValueError(f"window={window!r}: a pair of ints (left, right)")
        for side, w in zip(("left", "right"), window):
            if w < -1:
                raise ValueError(f"window={tuple(window)}: the {side} side must be -1 (unbounded) or at least 0")


def alibi_slopes(alibi: Optional[Tensor], batch: int, heads: int, device) -> None:
    """The fakes' check of ALiBi's slopes: ``kittens._alibi.check`` (type, dtype, shape, device, naming
    ``alibi_slopes``); the finiteness check reads values, so only the real CPU path makes it."""
    if alibi is not None and _concrete(batch, heads):
        from . import _alibi

        _alibi.check(alibi, batch, heads, device)
