"""FlashAttention's ``flash_attn_varlen_func`` (packed variable-length batches) as torch.library ops.

q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), bfloat16, sequence ``b``'s rows
``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` (int32 tensors of batch + 1 offsets, starting at 0), causal
aligned bottom-right in each sequence. The kernels read the offsets from the tensors themselves;
``max_seqlen_q/k`` (Python ints, as FlashAttention takes them) size the grid, so nothing is read back
from the device.

Where it runs (the ops ``kittens::attention_varlen`` and ``kittens::attention_varlen_backward``, with
``register_fake`` and autograd, defined through ``ops._op`` / ``ops._autograd`` and called through
``ops.call`` as the other kittens ops, so ``torch.compile(fullgraph=True)`` traces them without a graph break):

- forward: CUDA (sm_90a) through the registry kernel ``attn_varlen`` (``kittens_kernels::attn_varlen_hopper``,
  ``_dispatch.attention_varlen``); the CPU interpreter (``kittens_kernels::attn_varlen``) on CPU tensors;
- backward: CUDA (sm_90a, head dims 64-256) through the registry kernel ``attn_varlen_bwd``
  (``_dispatch.attention_varlen_backward``: FlashAttention-3's three launches, the key blocks
  ``kittens_kernels::attn_varlen_bwd_hopper`` adding dQ in float32, so its last bits vary from run to
  run; 128-key blocks at head dims 64 and 128, 64-key blocks at 192 and 256 and at 128 with a soft
  cap); the CPU interpreter (``kittens_kernels::attn_varlen_bwd``: key blocks, then query blocks) on
  CPU tensors. Both take ALiBi, a soft cap and a sliding window; :func:`_backward_torch` (a PyTorch
  composition, f32) is the GPU tests' second reference.

Checks: on the CPU the offsets are checked (start at 0, never decrease, within the tensors, ``max_seqlen``
at least every length), each error naming the argument. On CUDA those checks would need a device read (a
synchronisation), so, as in FlashAttention, they are skipped: offsets past the tensors are clipped by the
kernel (rows past ``total`` are neither read nor written), a ``max_seqlen`` below a sequence's length
leaves that sequence's later rows unwritten (zero; in the backward, their gradients 0), and decreasing or
negative offsets are the caller's error (undefined result). Shapes, dtypes, devices and the head dim are
checked without a device read.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from . import _kittens
from ._fa_args import _check_softcap, _check_window
from .ops import _autograd, _op, call

__all__ = ["flash_attn_varlen_func"]


def _f32_bytes(t: Tensor) -> bytes:
    return t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()


def _from_bytes(b: bytes, shape, dtype=torch.float32) -> Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.float32).reshape(shape).to(dtype)


def _sizes(q: Tensor, k: Tensor, max_q: int, max_k: int):
    return (int(q.shape[1]), int(k.shape[1]), int(q.shape[2]), int(max_q), int(max_k))


def _offsets(cu_q: Tensor, cu_k: Tensor):
    return ([int(x) for x in cu_q.tolist()], [int(x) for x in cu_k.tolist()])


def _slopes(alibi: Optional[Tensor]):
    return None if alibi is None else [float(x) for x in alibi.detach().float().flatten().tolist()]


def _segments(cu: Tensor, total: int):
    """Per packed row (on the device, no host read): its sequence, its position in it, the sequence's
    length; rows past the last offset get sequence ``batch`` (nobody's)."""
    rows = torch.arange(total, device=cu.device, dtype=torch.int64)
    cu = cu.to(torch.int64)
    seq = torch.searchsorted(cu[1:], rows, right=True)
    at = seq.clamp(max=cu.numel() - 2)
    return seq, rows - cu[at], cu[at + 1] - cu[at]


def _backward_torch(grad_out, q, k, v, out, lse, cu_q, cu_k, causal, scale, block_elems: int = 1 << 26,
                    alibi=None):
    """dq, dk, dv of varlen attention as a PyTorch composition in f32, for CUDA tensors at head dims
    the sm_90a backward does not take (192, 256) and as the GPU tests' second reference
    (FlashAttention-2 §3.2's equations on the packed batch, a query row keeping the keys of its own sequence, bottom-right
    causal): P from the forward's lse, dV = Pᵀ·dO, dS = P∘(dO·Vᵀ − rowsum(dO∘O)), dQ = dS·K·scale,
    dK = dSᵀ·Q·scale, GQA heads summed into their KV head. Queries go in chunks of a fixed size
    (from the shapes only), so the score block is at most about ``block_elems``; no host read."""
    total_q, h, d = q.shape
    total_k, hk, _ = k.shape
    g = h // hk
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    f = torch.float32
    qf, kf, vf = q.to(f), k.to(f).repeat_interleave(g, dim=1), v.to(f).repeat_interleave(g, dim=1)
    do, of = grad_out.to(f), out.to(f)
    dq = torch.zeros_like(qf)
    dk = torch.zeros((total_k, h, d), dtype=f, device=q.device)
    dv = torch.zeros_like(dk)
    batch = cu_q.numel() - 1
    sq, pq, lq = _segments(cu_q, total_q)
    sk, pk, lk = _segments(cu_k, total_k)
    chunk = max(1, block_elems // max(1, h * total_k))
    for r0 in range(0, total_q, chunk):
        r = slice(r0, min(total_q, r0 + chunk))
        keep = (sq[r, None] == sk[None, :]) & (sq[r, None] < batch)
        if causal:
            keep &= pk[None, :] <= pq[r, None] + lk[None, :] - lq[r, None]
        s = torch.einsum("ihd,jhd->hij", qf[r], kf) * sc
        if alibi is not None:  # −slope·|i + len_k − len_q − j| per row's sequence and head
            slope = alibi.to(f)[sq[r].clamp(max=batch - 1)].transpose(0, 1)  # (h, rows)
            dist = (pq[r, None] + lk[None, :] - lq[r, None] - pk[None, :]).abs().to(f)
            s = s - slope[..., None] * dist[None]
        lse_r = lse[:, r].to(f)
        p = torch.where(keep[None] & torch.isfinite(lse_r)[..., None], torch.exp(s - lse_r[..., None]), 0.0)
        dv += torch.einsum("hij,ihd->jhd", p, do[r])
        dp = torch.einsum("ihd,jhd->hij", do[r], vf)
        delta = (do[r] * of[r]).sum(-1).transpose(0, 1)
        ds = p * (dp - delta[..., None])
        dq[r] = torch.einsum("hij,jhd->ihd", ds, kf) * sc
        dk += torch.einsum("hij,ihd->jhd", ds, qf[r]) * sc
    dk = dk.view(total_k, hk, g, d).sum(2)
    dv = dv.view(total_k, hk, g, d).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def attention_varlen_eager(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                     max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                     scale: Optional[float] = None, seqused_k: Optional[Tensor] = None,
                     alibi_slopes: Optional[Tensor] = None, softcap: Optional[float] = None,
                     window: Optional[List[int]] = None) -> Tuple[Tensor, Tensor]:
    """``(out, lse)``: out like q (bfloat16), lse float32 (nheads, total_q) in natural-log units of the
    scaled logits (``-inf`` where a query keeps no key; 0 on rows outside every sequence).
    ``seqused_k`` (int32 (batch,)): sequence b keeps only the first ``seqused_k[b]`` keys from
    ``cu_seqlens_k[b]`` (FlashAttention's; a KV cache's lengths). Forward only. ``alibi_slopes``:
    float32 (batch, nheads), ``−slope·|i + len_k − len_q − j|`` on the scaled logits. ``softcap``:
    ``cap·tanh(x / cap)`` on the scaled logits (before ALiBi); ``window``: ``[left, right]``, query i of a
    sequence keeps keys ``i + len_k − len_q − left ≤ j ≤ i + len_k − len_q + right`` (-1: unbounded side).
    Both with their backward."""
    win = None if window is None else (int(window[0]), int(window[1]))
    if q.is_cuda:
        from . import _dispatch

        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the packed layouts (a copy only if not)
        return _dispatch.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                          bool(causal), None if scale is None else float(scale),
                                          seqused_k=seqused_k, alibi=alibi_slopes, softcap=softcap, window=win)
    o, lse = _kittens.attention_varlen_cpu(
        [_f32_bytes(t) for t in (q, k, v)], _offsets(cu_seqlens_q, cu_seqlens_k),
        _sizes(q, k, max_seqlen_q, max_seqlen_k), bool(causal), None if scale is None else float(scale),
        None if seqused_k is None else [int(x) for x in seqused_k.tolist()], _slopes(alibi_slopes),
        None if softcap is None else float(softcap), win,
    )
    return _from_bytes(o, q.shape, q.dtype), _from_bytes(lse, (q.shape[1], q.shape[0]))


attention_varlen = _op("attention_varlen")(attention_varlen_eager)


@attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None, seqused_k=None,
      alibi_slopes=None, softcap=None, window=None):
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def attention_varlen_backward_eager(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                              cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                              max_seqlen_k: int, causal: bool = False,
                              scale: Optional[float] = None,
                              alibi_slopes: Optional[Tensor] = None, softcap: Optional[float] = None,
                              window: Optional[List[int]] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` of :func:`attention_varlen` in the dtypes of q, k, v (``softcap`` and ``window``
    as the forward's)."""
    win = None if window is None else (int(window[0]), int(window[1]))
    cap = None if softcap is None else float(softcap)
    if q.is_cuda:
        from . import _dispatch

        c = [t.contiguous() for t in (grad_out, q, k, v, out, lse)]  # the packed layouts (a copy only if not)
        return _dispatch.attention_varlen_backward(*c, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                   bool(causal), None if scale is None else float(scale),
                                                   alibi=alibi_slopes, softcap=cap, window=win)
    dq, dk, dv = _kittens.attention_varlen_backward_cpu(
        [_f32_bytes(t) for t in (q, k, v, out, grad_out, lse)], _offsets(cu_seqlens_q, cu_seqlens_k),
        _sizes(q, k, max_seqlen_q, max_seqlen_k), bool(causal), None if scale is None else float(scale),
        _slopes(alibi_slopes), cap, win,
    )
    return tuple(_from_bytes(g, t.shape, t.dtype) for g, t in ((dq, q), (dk, k), (dv, v)))


attention_varlen_backward = _op("attention_varlen_backward")(attention_varlen_backward_eager)


@attention_varlen_backward.register_fake
def _(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
      scale=None, alibi_slopes=None, softcap=None, window=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, *rest = inputs  # the optional ones as called
    seqused_k, alibi, softcap, window = (list(rest) + [None] * 4)[:4]
    ctx.seqused = seqused_k is not None
    ctx.softcap, ctx.window = softcap, window
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi)
    ctx.max_q, ctx.max_k, ctx.causal, ctx.scale = max_q, max_k, causal, scale
    ctx.mark_non_differentiable(lse)


def _grad(ctx, grad_out, grad_lse):
    if ctx.seqused:
        raise NotImplementedError("seqused_k (a KV cache): kittens' varlen attention is forward only there")
    q, k, v, out, lse, cu_q, cu_k, alibi = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    args = (grad_out.to(q.dtype), q, k, v, out, lse, cu_q, cu_k, ctx.max_q, ctx.max_k, ctx.causal, ctx.scale,
            alibi, ctx.softcap, ctx.window)
    if torch.is_grad_enabled():
        # create_graph=True: the op itself, whose missing double backward torch reports by name.
        dq, dk, dv = torch.ops.kittens.attention_varlen_backward(*args)
    else:
        dq, dk, dv = call("attention_varlen_backward", *args)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


_autograd("attention_varlen", attention_varlen, _grad, _setup)


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Any = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: Any = None,
) -> Tensor:
    """FlashAttention's ``flash_attn_varlen_func`` (module documentation): returns the output
    (total_q, nheads, headdim). ``alibi_slopes``: float32 (nheads,) or (batch, nheads), FlashAttention's
    ALiBi (``−slope·|i + len_k − len_q − j|`` on the scaled logit of query i and key j of a sequence).
    ``softcap`` (> 0: ``softcap·tanh(x / softcap)`` on the scaled logits) and ``window_size=(left, right)``
    (aligned bottom-right in each sequence, -1 an unbounded side), as FlashAttention's, with their
    backward. Not supported, each a clear error: dropout, the attention probabilities, a paged
    ``block_table``."""
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p!r}: kittens attention has no dropout (use 0.0)")
    left, right = _check_window(window_size)
    window = None if (left, right) == (-1, -1) else [left, right]
    cap = _check_softcap(softcap)
    if return_attn_probs:
        raise NotImplementedError("return_attn_probs=True: kittens attention does not return probabilities")
    if block_table is not None:
        raise NotImplementedError("block_table: paged KV caches are not supported by varlen attention yet")
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real)
        or not (math.isfinite(softmax_scale) and softmax_scale > 0)
    ):
        raise ValueError(f"softmax_scale={softmax_scale!r}: must be None (1/sqrt(headdim)) or finite and positive")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-d (total, nheads, headdim), got shape {tuple(t.shape)}")
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{name} must be bfloat16, got {t.dtype}")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if t.dim() != 1 or t.dtype != torch.int32:
            raise ValueError(f"{name} must be a 1-d int32 tensor (batch + 1 offsets), got {t.dtype} "
                             f"of shape {tuple(t.shape)}")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
            raise ValueError(f"{name}={m!r}: must be a Python int >= 0 (no device read is made to find it)")
    slopes = None
    if alibi_slopes is not None:
        batch, h = cu_seqlens_q.shape[0] - 1, q.shape[1]
        if not isinstance(alibi_slopes, Tensor) or alibi_slopes.dtype != torch.float32 or (
                tuple(alibi_slopes.shape) not in ((h,), (batch, h))):
            raise ValueError(f"alibi_slopes must be a float32 tensor of shape ({h},) or ({batch}, {h}) (nheads or "
                             f"batch x nheads), got {getattr(alibi_slopes, 'dtype', type(alibi_slopes))} of shape "
                             f"{tuple(getattr(alibi_slopes, 'shape', ()))}")
        if alibi_slopes.device != q.device:
            raise ValueError(f"alibi_slopes is on {alibi_slopes.device} and q on {q.device}")
        slopes = alibi_slopes.expand(batch, h).contiguous()  # on the device: no host read
    out, _ = call("attention_varlen", q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                  int(max_seqlen_k), bool(causal), softmax_scale, None, slopes, cap, window)
    return out
