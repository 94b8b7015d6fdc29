"""Variable-length (packed) attention through the prepared ``attn_varlen`` call."""

from __future__ import annotations

import torch

from . import _core
from ._core import _dense, _BF16, _HANDLES, _bf16s, _check_out, _launch, _same_device, _spec, _store


# -- varlen attention ----------------------------------------------------------------------------------


def attention_varlen(q, k, v, cu_q, cu_k, max_q: int, max_k: int, causal: bool, scale, out=None, lse=None,
                     seqused_k=None, alibi=None, softcap=None, window=None):
    """``(out, lse)`` of the packed variable-length attention forward on CUDA (registry ``attn_varlen``,
    the sm_90a program ``kittens_kernels::attn_varlen_hopper``): q (total_q, H, D), k and v
    (total_k, H_kv, D), dense, bfloat16; cu_q, cu_k int32 (B + 1,) offsets that the kernel reads on the
    device (nothing is read back here). ``out`` like q, ``lse`` float32 (H, total_q): rows outside
    every sequence are never written (zeros when this call allocates them). ``softcap`` (a float) and
    ``window`` (``(left, right)``) as ``kittens.varlen.attention_varlen``'s, None for none."""
    softcap = None if softcap is None else float(softcap)
    window = None if window is None else (int(window[0]), int(window[1]))
    key = (10, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), cu_q.shape, cu_k.shape,
           cu_q.dtype, cu_k.dtype, q.device, k.device, v.device, cu_q.device, cu_k.device, int(max_q),
           int(max_k), bool(causal), scale,
           None if seqused_k is None else (seqused_k.shape, seqused_k.dtype, seqused_k.device),
           _alibi_key(alibi), softcap, window)
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_varlen(key, q, k, v, cu_q, cu_k, int(max_q), int(max_k), bool(causal), scale, seqused_k,
                              alibi, softcap, window)
    total_q, h, _ = q.shape
    if out is None:
        out = torch.zeros_like(q)
    else:
        _check_out("out", out, q.shape, (h * q.shape[2], q.shape[2], 1), _BF16, q)
    if lse is None:
        lse = torch.zeros((h, total_q), dtype=torch.float32, device=q.device)
    else:
        _check_out("lse", lse, (h, total_q), (total_q, 1), torch.float32, q)
    if rec[0] is not None:
        used = () if seqused_k is None else (seqused_k,)
        slopes = () if alibi is None else (alibi,)
        ptrs = tuple(t.data_ptr() for t in (q, k, v, cu_q, cu_k, *used, *slopes, out, lse))
        _launch(rec, ptrs, q.get_device(), device_obj=q.device)
    return out, lse


def _check_offsets(cu_q, cu_k):
    """The offsets' layout (their values stay on the device: the module documentation of
    ``kittens.varlen`` says which checks that skips)."""
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if t.dim() != 1 or t.dtype != torch.int32 or (t.numel() > 1 and t.stride(0) != 1):
            raise ValueError(f"{name} must be a dense 1-d int32 tensor (batch + 1 offsets), got {t.dtype} "
                             f"of shape {tuple(t.shape)}")
    if cu_q.shape != cu_k.shape or cu_q.shape[0] < 1:
        raise ValueError(f"cu_seqlens_q {tuple(cu_q.shape)} and cu_seqlens_k {tuple(cu_k.shape)} must both "
                         "hold batch + 1 >= 1 offsets")


def _alibi_key(alibi):
    return None if alibi is None else (alibi.shape, alibi.stride(), alibi.dtype, alibi.device)


def _alibi_spec(problem, alibi, q, cu_q):
    """ALiBi's slopes as the varlen programs declare them (float32 (batch, nheads), dense), flagged in
    ``problem``; ``()`` without."""
    if alibi is None:
        return ()
    _same_device(q=q, alibi_slopes=alibi)
    shape = (cu_q.shape[0] - 1, q.shape[1])
    if alibi.dtype != torch.float32 or tuple(alibi.shape) != shape or not alibi.is_contiguous():
        raise ValueError(f"alibi_slopes must be a dense float32 tensor of shape {shape} (batch, nheads), got "
                         f"{alibi.dtype} of shape {tuple(alibi.shape)}")
    problem["alibi"] = True
    return (_spec("alibi", shape, (shape[1], 1), "float32"),)


def _prepare_varlen(key, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, seqused_k=None, alibi=None,
                    softcap=None, window=None):
    _bf16s(q=q, k=k, v=v)
    dev = _same_device(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    used = ()
    if seqused_k is not None:
        _same_device(q=q, seqused_k=seqused_k)
        if seqused_k.dtype != torch.int32 or tuple(seqused_k.shape) != (cu_k.shape[0] - 1,) or (
                seqused_k.numel() > 1 and seqused_k.stride(0) != 1):
            raise ValueError(f"seqused_k must be a dense int32 tensor of shape ({cu_k.shape[0] - 1},), got "
                             f"{seqused_k.dtype} of shape {tuple(seqused_k.shape)}")
        used = (_spec("seqused_k", seqused_k.shape, (1,), "int32"),)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-d (total, nheads, headdim), got shape {tuple(t.shape)}")
    _dense(q=q, k=k, v=v)
    _check_offsets(cu_q, cu_k)
    total_q, h, d = q.shape
    total_k, hk, dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or dk != d:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (total_k, nheads_k, {d})")
    if hk == 0 or h % hk:
        raise ValueError(f"nheads_k = {hk} must divide nheads = {h}")
    if d not in (64, 128, 192, 256):
        raise ValueError(f"head dim {d}: varlen attention on CUDA (sm_90a) takes 64, 128, 192 or 256")
    batch = cu_q.shape[0] - 1
    if batch == 0 or total_q == 0 or h == 0:
        return _store(key, (None, (0, ()), None))  # nothing to compute: the zeros are the answer
    problem = {"batch": batch, "heads": h, "heads_kv": hk, "seq": max(max_q, 1), "seq_kv": max(max_k, 1),
               "dim": d, "causal": causal, "scale": scale, "total_q": total_q, "total_k": total_k}
    if used:
        problem["variant"] = "seqused_k"
    if softcap is not None:
        problem["softcap"] = softcap
    if window is not None:
        problem["window"] = window
    slopes = _alibi_spec(problem, alibi, q, cu_q)
    # Dense (checked above), so the declared strides; torch may report others on dims of size 1.
    packed = (h * d, d, 1), (hk * d, d, 1)
    tensors = (
        _spec("q", q.shape, packed[0]), _spec("k", k.shape, packed[1]), _spec("v", v.shape, packed[1]),
        _spec("cu_seqlens_q", cu_q.shape, (1,), "int32"), _spec("cu_seqlens_k", cu_k.shape, (1,), "int32"),
        *used, *slopes, _spec("o", q.shape, packed[0]), _spec("lse", (h, total_q), (total_q, 1), "float32"),
    )
    return _core._prepare(key, "attn_varlen", problem, tensors, dev)


def attention_varlen_backward(grad_out, q, k, v, out, lse, cu_q, cu_k, max_q: int, max_k: int, causal: bool,
                              scale, alibi=None, softcap=None, window=None):
    """``(dq, dk, dv)`` of the packed variable-length attention on CUDA (registry ``attn_varlen_bwd``:
    FlashAttention-3's three launches, D and the zeroed float32 dQ accumulator over the packed rows,
    the sm_90a key blocks ``kittens_kernels::attn_varlen_bwd_hopper`` adding into it, its conversion
    to bfloat16; D and the accumulator are scratch of this call). grad_out, q, out (total_q, H, D),
    k, v (total_k, H_kv, D) dense bfloat16; lse float32 (H, total_q); cu_q, cu_k int32 (B + 1,) read
    by the kernels on the device (nothing is read back here). Rows of dk, dv outside every sequence
    are 0; dq's are 0 (their accumulator rows get nothing). ``alibi``: ALiBi's slopes, float32
    (B, H) dense; ``softcap`` (a float) and ``window`` (``(left, right)``): all as the forward's."""
    softcap = None if softcap is None else float(softcap)
    window = None if window is None else (int(window[0]), int(window[1]))
    key = (12, q.shape, k.shape, v.shape, out.shape, grad_out.shape, lse.shape, cu_q.shape, cu_k.shape,
           tuple(t.stride() for t in (q, k, v, out, grad_out, lse, cu_q, cu_k)),
           tuple(t.dtype for t in (q, k, v, out, grad_out, lse, cu_q, cu_k)),
           tuple(t.device for t in (q, k, v, out, grad_out, lse, cu_q, cu_k)),
           int(max_q), int(max_k), bool(causal), scale, _alibi_key(alibi), softcap, window)
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_varlen_backward(key, grad_out, q, k, v, out, lse, cu_q, cu_k, int(max_q), int(max_k),
                                       bool(causal), scale, alibi, softcap, window)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    if rec[0] is None:
        return dq.zero_(), dk, dv
    ins = (q, k, v, out, grad_out, lse, cu_q, cu_k) + (() if alibi is None else (alibi,)) + (dq, dk, dv)
    _launch(rec, tuple(t.data_ptr() for t in ins), q.get_device(), device_obj=q.device)
    return dq, dk, dv


def _prepare_varlen_backward(key, grad_out, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale,
                             alibi=None, softcap=None, window=None):
    _bf16s(q=q, k=k, v=v, out=out, grad_out=grad_out)
    dev = _same_device(q=q, k=k, v=v, out=out, grad_out=grad_out, lse=lse, cu_seqlens_q=cu_q,
                       cu_seqlens_k=cu_k)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("grad_out", grad_out)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-d (total, nheads, headdim), got shape {tuple(t.shape)}")
    _dense(q=q, k=k, v=v, out=out, grad_out=grad_out, lse=lse)
    total_q, h, d = q.shape
    total_k, hk, _ = k.shape
    for name, t, shape in (("k", k, (total_k, hk, d)), ("v", v, (total_k, hk, d)), ("out", out, q.shape),
                           ("grad_out", grad_out, q.shape)):
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} {tuple(t.shape)} must be {tuple(shape)}")
    if lse.dtype != torch.float32 or tuple(lse.shape) != (h, total_q):
        raise ValueError(f"lse must be a float32 (nheads, total_q) = ({h}, {total_q}) tensor, got {lse.dtype} "
                         f"{tuple(lse.shape)}")
    _check_offsets(cu_q, cu_k)
    if hk == 0 or h % hk:
        raise ValueError(f"nheads_k = {hk} must divide nheads = {h}")
    if d not in (64, 128, 192, 256):
        raise ValueError(f"head dim {d}: the varlen backward on CUDA (sm_90a) takes 64, 128, 192 or 256 (64-column "
                         "tiles of the head dimension in its key blocks)")
    batch = cu_q.shape[0] - 1
    if batch == 0 or total_q == 0 or total_k == 0 or h == 0:
        return _store(key, (None, (0, ()), None))  # no score kept: every gradient is 0
    problem = {"batch": batch, "heads": h, "heads_kv": hk, "seq": max(max_q, 1), "seq_kv": max(max_k, 1),
               "dim": d, "causal": causal, "scale": scale, "total_q": total_q, "total_k": total_k}
    slopes = _alibi_spec(problem, alibi, q, cu_q)
    if softcap is not None:
        problem["softcap"] = softcap
    if window is not None:
        problem["window"] = window
    # As the kernels declare them: the packed tensors head-major, [heads, total, d] (the dense BSHD
    # declaration at batch 1, which the strip passes around the key blocks share).
    qs, ks = ((h, total_q, d), (d, h * d, 1)), ((hk, total_k, d), (d, hk * d, 1))
    tensors = (
        _spec("q", *qs), _spec("k", *ks), _spec("v", *ks), _spec("o", *qs), _spec("do", *qs),
        _spec("lse", (h, total_q), (total_q, 1), "float32"),
        _spec("cu_seqlens_q", cu_q.shape, (1,), "int32"), _spec("cu_seqlens_k", cu_k.shape, (1,), "int32"),
        *slopes, _spec("dq", *qs), _spec("dk", *ks), _spec("dv", *ks),
    )
    return _core._prepare(key, "attn_varlen_bwd", problem, tensors, dev)
