"""The attention ops of :mod:`kittens.ops` (``torch.ops.kittens.*``): ``attention`` with its backward
``attention_backward``, and decode attention against a paged KV cache, ``attention_paged``. Each is a
``torch.library`` custom op made as every op of :mod:`kittens.ops` is (:mod:`kittens._opcall`): a real
and a fake implementation and an autograd formula; :mod:`kittens.ops` imports them from here, and the
package reaches them there."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _alibi, _attention, _attn_opts, _opchecks
from ._opcall import _autograd, _bf16, _empty, _in_layout, _layout_like, _op, call

if torch.cuda.is_available():
    from . import _dispatch

# -- attention -----------------------------------------------------------------------------------------


def attention_eager(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: Optional[float] = None,
              bottom_right: bool = False, lse_grad: bool = False, softcap: Optional[float] = None,
              window: Optional[List[int]] = None, deterministic: bool = False,
              alibi_slopes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """``(out, lse)``: attention of q (B, H, N, D) over k, v (B, H_kv, N_kv, D) and the float32
    log-sum-exp (B, H, N) of every query's scaled logits (``-inf`` where a query keeps no key).

    q, k, v may each be in its own strides, the head dim contiguous (FlashAttention's rule): all read in
    place, no copy (``kittens_kernels::attn_strides``); the output is new in q's dense layout where q
    has one, else (B, H, N, D). ``lse_grad``: whether ``lse`` is differentiable (the
    public ``kittens.attention(..., return_lse=True)``); otherwise it carries no gradient, and the
    backward skips its term. ``deterministic``: the backward's dQ is the launches' own pass (bitwise
    reproducible), never the atomic adds (FlashAttention's ``deterministic=True``). ``alibi_slopes``:
    ALiBi's float32 slopes, (H,) or (B, H) (``kittens._alibi``; no gradient)."""
    # The kernels take the scale, soft cap, window and ALiBi slopes themselves (kittens_kernels::attn::score).
    opts = _attn_opts(scale, softcap, window)
    alibi = _alibi.slopes(alibi_slopes, q.shape[0], q.shape[1], q.device)
    if q.is_cuda:
        return _dispatch.attention(q, k, v, bool(causal), bool(bottom_right), opts=opts, alibi=alibi)
    out = _empty(q.shape, _layout_like(q), q)
    return _attention(q, k, v, causal, scale, out, True, "bottom_right" if bottom_right else "top_left",
                      softcap, window, alibi)


def attention_no_lse(q: Tensor, k: Tensor, v: Tensor, causal: bool, bottom_right: bool,
                     opts: tuple = ()) -> Optional[Tensor]:
    """Eager CUDA attention without the log-sum-exp output (nothing to differentiate, none wanted);
    ``opts``: scale, soft cap and window as ``kittens._attn_opts`` makes them."""
    r = _dispatch.attention(q, k, v, causal, bottom_right, need_lse=False, opts=opts)
    return None if r is None else r[0]


attention = _op("attention")(attention_eager)


@attention.register_fake
def _(q, k, v, causal=False, scale=None, bottom_right=False, lse_grad=False, softcap=None, window=None,
      deterministic=False, alibi_slopes=None):
    for name, t in (("q", q), ("k", k), ("v", v)):
        _bf16(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
    _opchecks.attention_args(q, k, v, causal, scale, bottom_right, softcap, window)
    b, h, n, _ = q.shape
    return _empty(q.shape, _layout_like(q), q), q.new_empty((b, h, n), dtype=torch.float32)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, bottom_right, lse_grad, softcap, window, deterministic, *alibi = inputs
    if alibi and alibi[0] is not None and alibi[0].requires_grad:
        # No silent gradient drop (issue 33): the backward has no term for the slopes.
        raise RuntimeError("alibi_slopes requires grad, but kittens' attention has no gradient for the ALiBi "
                           "slopes (a fixed bias, as in FlashAttention); pass alibi_slopes.detach()")
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, alibi[0] if alibi else None)
    ctx.causal, ctx.scale, ctx.bottom_right, ctx.lse_grad = causal, scale, bottom_right, lse_grad
    ctx.softcap, ctx.window, ctx.deterministic = softcap, window, deterministic
    if not lse_grad:
        ctx.mark_non_differentiable(lse)


def _kernel_readable(t: Tensor) -> bool:
    """Whether the attention kernels read ``t`` (B, H, N, D) in place (``_dispatch.attn_strides``' rule:
    the head dim contiguous, every other stride a positive multiple of 8 elements, unit dimensions aside)."""
    st = t.stride()
    return (t.shape[-1] <= 1 or st[-1] == 1) and all(
        n <= 1 or (s > 0 and s % 8 == 0) for s, n in zip(st[:-1], t.shape[:-1]))


def _attention_grad(ctx, grad_out, grad_lse):
    q, k, v, out, lse, alibi = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    # With return_lse the lse's gradient rides in the same backward run: its preprocessing takes
    # D = rowsum(dO∘O) − dlse (FlashAttention's fold for ring attention; d lse_i / d s_ij = P_ij).
    dlse = grad_lse.to(torch.float32).contiguous() if ctx.lse_grad and grad_lse is not None else None
    grad_out = grad_out.to(torch.bfloat16)
    if not _kernel_readable(grad_out):  # autograd's layout (e.g. an expanded one: strides 0): a dense copy
        grad_out = grad_out.contiguous()
    dq, dk, dv = call(
        "attention_backward", grad_out, q, k, v, out, lse, ctx.causal, ctx.scale,
        ctx.bottom_right, ctx.softcap, ctx.window, ctx.deterministic, dlse, alibi,
    )
    return dq, dk, dv, None, None, None, None, None, None, None, None


_autograd("attention", attention, _attention_grad, _attention_setup)


@_op("attention_backward")
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       causal: bool = False, scale: Optional[float] = None,
                       bottom_right: bool = False, softcap: Optional[float] = None,
                       window: Optional[List[int]] = None,
                       deterministic: bool = False,
                       grad_lse: Optional[Tensor] = None,
                       alibi_slopes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` of :func:`attention` from its output and log-sum-exp, by the attention
    backward kernel (dK and dV summed over each KV head's query heads); q, k, v, out, grad_out in any
    strides with the head dim contiguous (read in place on CUDA); each gradient new in its input's dense
    layout, else (B, H, N, D). ``deterministic``: the two-launch form on CUDA (dQ a pass of its own, bitwise
    reproducible), whatever ``KITTENS_ATTN_BWD`` says. ``grad_lse``: the gradient of the forward's
    log-sum-exp (float32 (B, H, N)), folded into the kernel's preprocessing (D = rowsum(dO∘O) − dlse)."""
    from ._backward import attention_backward as run

    # A query that keeps no key has lse = -inf from the forward; the backward takes +inf there (P = 0).
    lse = torch.where(lse == float("-inf"), torch.full_like(lse, float("inf")), lse)
    dq, dk, dv = run(q, k, v, out, grad_out, lse, causal, scale, "two" if deterministic else None,
                     bottom_right=bottom_right, softcap=softcap, window=window, dlse=grad_lse,
                     alibi=alibi_slopes)
    return tuple(_in_layout(g, _layout_like(t)) for g, t in zip((dq, dk, dv), (q, k, v)))


@attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, causal=False, scale=None, bottom_right=False, softcap=None, window=None,
      deterministic=False, grad_lse=None, alibi_slopes=None):
    return tuple(_empty(t.shape, _layout_like(t), q) for t in (q, k, v))


def _attention_backward_setup(ctx, inputs, output):
    ctx.save_for_backward()


def _attention_backward_grad(ctx, *grads):
    raise RuntimeError(
        "kittens::attention_backward has no backward (double backward through kittens.attention is not "
        "implemented): grad_out, q, k, v, out and lse cannot be differentiated"
    )


_autograd("attention_backward", attention_backward, _attention_backward_grad, _attention_backward_setup)


# -- paged KV-cache decode attention -------------------------------------------------------------------


@_op("attention_paged")
def attention_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, cache_seqlens: Tensor,
                    causal: bool = False, scale: Optional[float] = None,
                    num_splits: int = 1, alibi_slopes: Optional[Tensor] = None,
                    softcap: Optional[float] = None, window: Optional[List[int]] = None) -> Tuple[Tensor, Tensor]:
    """``(out, lse)`` of decode attention against a paged KV cache read in place (registry ``attn_paged``,
    ``kittens_kernels::attn_paged``): q (B, Nq, H, D) bfloat16, k_cache and v_cache (num_blocks,
    page_size, H_kv, D) bfloat16, block_table int32 (B, max_blocks), cache_seqlens int32 (B,), all read
    on the device (no gather, no host read on CUDA). Causal is bottom-right. out like q, lse float32
    (B, H, Nq) in natural-log units of the scaled logits (``-inf`` where a query keeps no key).
    ``num_splits`` (1 to 16): parts of the key walk (split-KV, then the merge). ``alibi_slopes``: ALiBi's
    float32 slopes, (H,) or (B, H) (``kittens._alibi``), aligned bottom-right per sequence. ``softcap``:
    logits ``softcap * tanh(logits / softcap)`` before ALiBi (None: uncapped). ``window``: ``(left,
    right)``, query i of sequence b keeping keys within ``[i + len_b - Nq - left, i + len_b - Nq + right]``
    (FlashAttention's bottom-right window; -1 an unbounded side; None: no window)."""
    b, sq, h, d = q.shape
    _opchecks.softcap_window(softcap, window)
    alibi = _alibi.slopes(alibi_slopes, b, h, q.device)
    softcap = None if softcap is None else float(softcap)
    window = None if window is None else (int(window[0]), int(window[1]))
    if q.is_cuda:
        return _dispatch.attention_paged(q, k_cache, v_cache, block_table, cache_seqlens, bool(causal),
                                         None if scale is None else float(scale), int(num_splits), alibi=alibi,
                                         softcap=softcap, window=window)
    from . import _kittens

    nb, page, hk, _ = k_cache.shape
    f32 = [t.detach().to(torch.float32).contiguous().numpy().tobytes() for t in (q, k_cache, v_cache)]
    o, lse = _kittens.attention_paged_cpu(
        f32, [int(x) for x in block_table.reshape(-1).tolist()], [int(x) for x in cache_seqlens.tolist()],
        (b, sq, h, hk, d, nb, page, block_table.shape[1]), bool(causal),
        None if scale is None else float(scale), int(num_splits),
        None if alibi is None else [float(x) for x in alibi.reshape(-1).tolist()], softcap=softcap, window=window)
    out = torch.frombuffer(bytearray(o), dtype=torch.float32).reshape(q.shape).to(q.dtype)
    return out, torch.frombuffer(bytearray(lse), dtype=torch.float32).reshape(b, h, sq)


@attention_paged.register_fake
def _(q, k_cache, v_cache, block_table, cache_seqlens, causal=False, scale=None, num_splits=1,
      alibi_slopes=None, softcap=None, window=None):
    _opchecks.softcap_window(softcap, window)
    _opchecks.alibi_slopes(alibi_slopes, q.shape[0], q.shape[2], q.device)
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
