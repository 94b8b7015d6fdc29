"""Variable-length (packed) attention through the prepared ``attn_varlen`` call."""

from __future__ import annotations

import torch

from . import _core
from ._core import _dense, _BF16, _HANDLES, _bf16s, _check_out, _launch, _same_device, _spec, _store


# -- varlen attention ----------------------------------------------------------------------------------


def attention_varlen(q, k, v, cu_q, cu_k, max_q: int, max_k: int, causal: bool, scale, out=None, lse=None,
                     seqused_k=None):
    """``(out, lse)`` of the packed variable-length attention forward on CUDA (registry ``attn_varlen``,
    the sm_90a program ``kittens_kernels::attn_varlen_hopper``): q (total_q, H, D), k and v
    (total_k, H_kv, D), dense, bfloat16; cu_q, cu_k int32 (B + 1,) offsets that the kernel reads on the
    device (nothing is read back here). ``out`` like q, ``lse`` float32 (H, total_q): rows outside
    every sequence are never written (zeros when this call allocates them)."""
    key = (10, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), cu_q.shape, cu_k.shape,
           cu_q.dtype, cu_k.dtype, q.device, k.device, v.device, cu_q.device, cu_k.device, int(max_q),
           int(max_k), bool(causal), scale,
           None if seqused_k is None else (seqused_k.shape, seqused_k.dtype, seqused_k.device))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_varlen(key, q, k, v, cu_q, cu_k, int(max_q), int(max_k), bool(causal), scale, seqused_k)
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
        ptrs = tuple(t.data_ptr() for t in (q, k, v, cu_q, cu_k, *used, out, lse))
        _launch(rec, ptrs, q.get_device(), device_obj=q.device)
    return out, lse


def _prepare_varlen(key, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, seqused_k=None):
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
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if t.dim() != 1 or t.dtype != torch.int32 or (t.numel() > 1 and t.stride(0) != 1):
            raise ValueError(f"{name} must be a dense 1-d int32 tensor (batch + 1 offsets), got {t.dtype} "
                             f"of shape {tuple(t.shape)}")
    if cu_q.shape != cu_k.shape or cu_q.shape[0] < 1:
        raise ValueError(f"cu_seqlens_q {tuple(cu_q.shape)} and cu_seqlens_k {tuple(cu_k.shape)} must both "
                         "hold batch + 1 >= 1 offsets")
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
    # Dense (checked above), so the declared strides; torch may report others on dims of size 1.
    packed = (h * d, d, 1), (hk * d, d, 1)
    tensors = (
        _spec("q", q.shape, packed[0]), _spec("k", k.shape, packed[1]), _spec("v", v.shape, packed[1]),
        _spec("cu_seqlens_q", cu_q.shape, (1,), "int32"), _spec("cu_seqlens_k", cu_k.shape, (1,), "int32"),
        *used, _spec("o", q.shape, packed[0]), _spec("lse", (h, total_q), (total_q, 1), "float32"),
    )
    return _core._prepare(key, "attn_varlen", problem, tensors, dev)
