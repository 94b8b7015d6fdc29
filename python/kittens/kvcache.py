"""FlashAttention's ``flash_attn_with_kvcache`` (decoding with a KV cache), forward only.

q (batch, seqlen_q, nheads, headdim); the cache k_cache, v_cache (batch_cache, seqlen_cache, nheads_k,
headdim), or paged with ``block_table`` (batch, max_blocks) int32: (num_blocks, page_size, nheads_k,
headdim); ``cache_seqlens`` (an int or int32 (batch,)) the keys each sequence holds; new k, v
(batch, seqlen_new, nheads_k, headdim) are written into the cache at ``cache_seqlens`` first (in place,
as FlashAttention does) and attended to. Causal is bottom-right (query i keeps keys j <= i + seqlen_k -
seqlen_q). Returns out like q (and with ``return_softmax_lse`` the lse float32 (batch, nheads, seqlen_q)).

How it runs: the varlen forward with FlashAttention's ``seqused_k`` (registry ``attn_varlen``, variant
``seqused_k``: the sm_90a kernel on CUDA, the interpreter on CPU): the queries are packed (batch·seqlen_q
rows, ``cu_seqlens_q = b·seqlen_q``), the cache is one packed tensor with ``cu_seqlens_k = b·capacity``
and ``seqused_k = cache_seqlens + seqlen_new``, all made on the device (no host read). The kernel stops
each sequence's keys at ``seqused_k`` (clipped loads: stale cache rows are never read). A paged cache is
first gathered through ``block_table`` into that form (``k_cache[block_table]``: a copy of the batch's
pages, made by torch; the kernel itself does not read the block table), so the page size is free (it
need not divide the lengths). The append is torch's indexed assignment.

Bad input: shapes, dtypes, devices, the head dim and the unsupported options are checked everywhere.
``cache_seqlens`` beyond the capacity (after the append) and ``block_table`` entries outside the cache are
checked on CPU tensors only: on CUDA each would need a device read (a synchronisation), so, as in
FlashAttention, they are the caller's to keep in range (out-of-range indices make torch's gather/scatter
raise a device-side assert).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor

__all__ = ["flash_attn_with_kvcache"]


def _refuse(**opts) -> None:
    for name, (value, default) in opts.items():
        same = value is default or (value == default if not isinstance(value, Tensor) else False)
        if not same:
            raise NotImplementedError(f"{name}={value!r}: flash_attn_with_kvcache in kittens does not take it "
                                      f"(pass {default!r})")


def _check(name: str, t: Tensor, dims: int, dtype) -> None:
    if not isinstance(t, Tensor) or t.dim() != dims or t.dtype != dtype:
        got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, Tensor) else repr(t)
        raise ValueError(f"{name} must be a {dims}-d {dtype} tensor, got {got}")


def flash_attn_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Optional[Tensor] = None,
    v: Optional[Tensor] = None,
    rotary_cos: Optional[Tensor] = None,
    rotary_sin: Optional[Tensor] = None,
    cache_seqlens: Union[int, Tensor, None] = None,
    cache_batch_idx: Optional[Tensor] = None,
    cache_leftpad: Optional[Tensor] = None,
    block_table: Optional[Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: Any = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
):
    """FlashAttention's ``flash_attn_with_kvcache`` (module documentation)."""
    _refuse(rotary_cos=(rotary_cos, None), rotary_sin=(rotary_sin, None), cache_batch_idx=(cache_batch_idx, None),
            cache_leftpad=(cache_leftpad, None), alibi_slopes=(alibi_slopes, None), softcap=(softcap, 0.0))
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError(f"window_size={tuple(window_size)!r}: not taken with a KV cache (pass (-1, -1))")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _check(name, t, 4, torch.bfloat16)
    if (k is None) != (v is None):
        raise ValueError("k and v: give both new-key tensors or neither")
    b, sq, h, d = q.shape
    hk = k_cache.shape[2]
    if tuple(v_cache.shape) != tuple(k_cache.shape) or k_cache.shape[3] != d:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must match, with "
                         f"headdim {d} as q")
    if hk == 0 or h % hk:
        raise ValueError(f"k_cache: nheads_k = {hk} must divide q's nheads = {h}")
    dev = q.device
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v), ("block_table", block_table),
                    ("cache_seqlens", cache_seqlens)):
        if isinstance(t, Tensor) and t.device != dev:
            raise ValueError(f"{name} is on {t.device}, q on {dev}: all tensors must be on one device")
    if block_table is not None:
        _check("block_table", block_table, 2, torch.int32)
        if block_table.shape[0] != b:
            raise ValueError(f"block_table has {block_table.shape[0]} rows for a batch of {b}")
        page = k_cache.shape[1]
        capacity = block_table.shape[1] * page
    else:
        if k_cache.shape[0] < b:
            raise ValueError(f"k_cache holds {k_cache.shape[0]} sequences for a batch of {b}")
        page, capacity = None, k_cache.shape[1]
    sn = 0
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _check(name, t, 4, torch.bfloat16)
            if t.shape[0] != b or t.shape[2:] != k_cache.shape[2:]:
                raise ValueError(f"{name} {tuple(t.shape)} must be (batch={b}, seqlen_new, {hk}, {d})")
        if v.shape != k.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must match")
        sn = k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = capacity - sn
    if isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, (int, Tensor)):
        raise ValueError(f"cache_seqlens={cache_seqlens!r}: an int or an int32 (batch,) tensor")
    if isinstance(cache_seqlens, int):
        if not 0 <= cache_seqlens <= capacity - sn:
            raise ValueError(f"cache_seqlens={cache_seqlens}: with {sn} new keys it must be 0 to {capacity - sn} "
                             f"(the cache holds {capacity} per sequence)")
        cache_seqlens = torch.full((b,), cache_seqlens, dtype=torch.int32, device=dev)
    _check("cache_seqlens", cache_seqlens, 1, torch.int32)
    if cache_seqlens.shape[0] != b:
        raise ValueError(f"cache_seqlens has {cache_seqlens.shape[0]} entries for a batch of {b}")
    if not q.is_cuda:  # host-side checks: free on CPU tensors, a synchronisation on CUDA (skipped there)
        lo, hi = (int(cache_seqlens.min()), int(cache_seqlens.max())) if b else (0, 0)
        if lo < 0 or hi + sn > capacity:
            raise ValueError(f"cache_seqlens: values {lo}..{hi} plus {sn} new keys must stay within 0..{capacity} "
                             "(the cache's capacity per sequence)")
        if block_table is not None and block_table.numel() and (
                int(block_table.min()) < 0 or int(block_table.max()) >= k_cache.shape[0]):
            raise ValueError(f"block_table: entries {int(block_table.min())}..{int(block_table.max())} point outside "
                             f"the cache's {k_cache.shape[0]} blocks")
    used = cache_seqlens.to(torch.int64)
    if sn:  # the append, in place (FlashAttention's semantics)
        pos = used[:, None] + torch.arange(sn, device=dev)
        if block_table is None:
            rows = torch.arange(b, device=dev)[:, None].expand(b, sn)
            k_cache[rows, pos] = k
            v_cache[rows, pos] = v
        else:
            blk = block_table.to(torch.int64).gather(1, pos // page)
            k_cache[blk, pos % page] = k
            v_cache[blk, pos % page] = v
    if block_table is None:
        kc, vc = k_cache[:b], v_cache[:b]
    else:
        kc, vc = k_cache[block_table.to(torch.int64)], v_cache[block_table.to(torch.int64)]  # (b, blocks, page, hk, d)
    kc = kc.reshape(b * capacity, hk, d)
    vc = vc.reshape(b * capacity, hk, d)
    cu_q = torch.arange(b + 1, device=dev, dtype=torch.int32) * sq
    cu_k = torch.arange(b + 1, device=dev, dtype=torch.int32) * capacity
    seqused = (used + sn).to(torch.int32)
    from . import varlen  # noqa: F401  (registers the op)

    out, lse = torch.ops.kittens.attention_varlen(q.reshape(b * sq, h, d), kc, vc, cu_q, cu_k, sq, capacity,
                                                  bool(causal), softmax_scale, seqused)
    out = out.reshape(b, sq, h, d)
    if return_softmax_lse:
        return out, lse.reshape(h, b, sq).transpose(0, 1)
    return out
