"""FlashAttention's interface over :func:`kittens.attention`: ``from kittens.flash_attn import
flash_attn_func`` where a model imports it from ``flash_attn``.

:func:`flash_attn_func` takes FlashAttention's arguments in its layout, (batch, seqlen, nheads,
headdim), and passes :func:`kittens.attention` the (batch, nheads, seqlen, headdim) views
``q.transpose(1, 2)`` (no copy: the kernel reads the (B, N, H, D) memory in place) and returns the
output in FlashAttention's layout, again a view. The mapping:

* ``softmax_scale`` -> ``scale=`` (``None``: ``1/sqrt(headdim)``);
* ``causal=True`` -> ``causal=True, causal_align="bottom_right"`` (FlashAttention aligns the causal mask
  bottom-right: query i keeps keys j <= i + seqlen_k - seqlen_q);
* ``window_size=(left, right)`` -> ``window=(left, right)`` when either side is not -1 (bottom-right
  aligned like FlashAttention's: query i keeps keys i + seqlen_k - seqlen_q - left ..= i + seqlen_k -
  seqlen_q + right, -1 unbounded; with ``causal`` both apply, which is FlashAttention's right side 0);
* ``softcap`` -> ``softcap=`` when > 0 (logits ``softcap * tanh(logits / softcap)``; 0.0, the
  default, is none);
* ``deterministic`` -> ``deterministic=`` (the CUDA backward's dQ from a pass of its own, bitwise
  reproducible; the default takes float32 atomic adds at head dims other than 96, whose last bits vary);
* ``alibi_slopes`` -> ``alibi_slopes=`` (float32 (nheads,) or (batch, nheads): ``-slope * |i + seqlen_k -
  seqlen_q - j|`` added to each scaled logit, FlashAttention's bias; under ``causal`` FlashAttention's
  kernel adds ``slope * j`` instead, the same output).

Not supported (a clear error rather than a silently different result): ``dropout_p > 0``,
``return_attn_probs=True``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple

from ._fa_args import _check_softcap, _check_window

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"]


def flash_attn_func(
    q: Any,
    k: Any,
    v: Any,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Any = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
):
    """FlashAttention's ``flash_attn_func``: q (batch, seqlen_q, nheads, headdim), k and v (batch,
    seqlen_k, nheads_k, headdim) with nheads_k dividing nheads (MQA/GQA), bfloat16; returns the output
    (batch, seqlen_q, nheads, headdim). See the module documentation for how each argument maps onto
    :func:`kittens.attention`, which computes it (and its backward, under autograd)."""
    from . import attention

    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p!r}: kittens attention has no dropout (use 0.0)")
    if return_attn_probs:
        raise NotImplementedError(
            "return_attn_probs=True: kittens attention does not return the attention probabilities "
            "(the softmax's log-sum-exp is kittens.attention(..., return_lse=True))"
        )
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool)
        or not isinstance(softmax_scale, numbers.Real)
        or not (math.isfinite(softmax_scale) and softmax_scale > 0)
    ):
        raise ValueError(f"softmax_scale={softmax_scale!r}: must be None (1/sqrt(headdim)) or finite and positive")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    left, right = _check_window(window_size)
    cap = _check_softcap(softcap)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if getattr(t, "ndim", None) != 4:
            raise ValueError(
                f"{name} must be 4-d (batch, seqlen, nheads, headdim), got shape {tuple(getattr(t, 'shape', ()))}"
            )
    extra = {}
    if (left, right) != (-1, -1):
        extra["window"] = (left, right)
    if cap is not None:
        extra["softcap"] = cap
    out = attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        causal=causal,
        scale=softmax_scale,
        causal_align="bottom_right" if causal else "top_left",
        deterministic=deterministic,
        alibi_slopes=alibi_slopes,
        **extra,
    )
    return out.transpose(1, 2)


def __getattr__(name: str):
    if name == "flash_attn_varlen_func":
        # The packed variable-length interface lives in kittens.varlen.
        from .varlen import flash_attn_varlen_func

        return flash_attn_varlen_func
    if name == "flash_attn_with_kvcache":
        from .kvcache import flash_attn_with_kvcache

        return flash_attn_with_kvcache
    raise AttributeError(f"module 'kittens.flash_attn' has no attribute {name!r}")
