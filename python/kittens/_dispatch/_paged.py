"""Paged KV-cache decode attention through the prepared ``attn_paged`` calls."""

from __future__ import annotations

import torch

from .._fa_args import packs_gqa
from . import _core
from ._core import _dense, _HANDLES, _bf16s, _launch, _same_device, _spec, _store


# -- paged KV-cache decode attention --------------------------------------------------------------------


def attention_paged(q, k_cache, v_cache, block_table, cache_seqlens, causal: bool, scale, num_splits: int = 1,
                    alibi=None, softcap=None, window=None):
    """``(out, lse)`` of decode attention against a paged cache on CUDA (registry ``attn_paged``): q
    (B, Nq, H, D), the caches (num_blocks, page_size, H_kv, D), dense bfloat16; block_table int32
    (B, max_blocks) and cache_seqlens int32 (B,), dense, read by the kernel on the device; ``alibi``
    ALiBi's slopes, float32 (B, H) dense (``kittens._alibi.slopes``), read on the device too; ``softcap``
    (a float) and ``window`` (``(left, right)``, bottom-right) constants of the kernel, None for none."""
    key = (11, q.shape, k_cache.shape, block_table.shape, q.device, k_cache.device, v_cache.device,
           block_table.device, cache_seqlens.device, bool(causal), scale, int(num_splits),
           None if alibi is None else (alibi.shape, alibi.stride(), alibi.dtype, alibi.device), softcap,
           None if window is None else tuple(window))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_paged(key, q, k_cache, v_cache, block_table, cache_seqlens, bool(causal), scale,
                             int(num_splits), alibi, softcap, window)
    b, sq, h, _ = q.shape
    if rec[0] is None:  # nothing to compute: the zeros are the answer
        return torch.zeros_like(q), torch.zeros((b, h, sq), dtype=torch.float32, device=q.device)
    # Every row of out and lse is written by the kernel (or the split's merge): no fill launched.
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # q is dense (checked where prepared)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    slopes = () if alibi is None else (alibi,)
    ptrs = tuple(t.data_ptr() for t in (q, k_cache, v_cache, block_table, cache_seqlens, *slopes, out, lse))
    _launch(rec, ptrs, q.get_device(), device_obj=q.device)
    return out, lse


def _prepare_paged(key, q, k_cache, v_cache, block_table, cache_seqlens, causal, scale, num_splits, alibi=None,
                   softcap=None, window=None):
    _bf16s(q=q, k_cache=k_cache, v_cache=v_cache)
    dev = _same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                       cache_seqlens=cache_seqlens)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d, got shape {tuple(t.shape)}")
    _dense(q=q, k_cache=k_cache, v_cache=v_cache)
    b, sq, h, d = q.shape
    nb, page, hk, _ = k_cache.shape
    for name, t, shape in (("block_table", block_table, (b, block_table.shape[-1])),
                           ("cache_seqlens", cache_seqlens, (b,))):
        if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous():
            raise ValueError(f"{name} must be a dense int32 tensor of shape {shape}, got {t.dtype} of shape "
                             f"{tuple(t.shape)}")
    if b == 0 or sq == 0 or h == 0:
        return _store(key, (None, (0, ()), None))  # nothing to compute: the zeros are the answer
    mb = block_table.shape[1]
    problem = {"batch": b, "heads": h, "heads_kv": hk, "seq": sq, "dim": d, "causal": causal, "scale": scale,
               "page_size": page, "max_blocks": mb, "num_blocks": nb, "num_splits": num_splits}
    if softcap is not None:
        problem["softcap"] = float(softcap)
    if window is not None:
        problem["window"] = (int(window[0]), int(window[1]))
    slopes = ()
    if alibi is not None:
        _same_device(q=q, alibi_slopes=alibi)
        if alibi.dtype != torch.float32 or tuple(alibi.shape) != (b, h) or not alibi.is_contiguous():
            raise ValueError(f"alibi_slopes must be a dense float32 tensor of shape {(b, h)} (batch, nheads), got "
                             f"{alibi.dtype} of shape {tuple(alibi.shape)}")
        problem["alibi"] = True
        slopes = (_spec("alibi", (b, h), (h, 1), "float32"),)
    # With GQA packing (``kittens._fa_args.packs_gqa``) the decode kernel declares q, and unsplit o and lse,
    # (b, heads_kv, group, ...): the same memory as (b, 1, h, d) and (b, h, 1).
    packed = packs_gqa(sq, h, hk, alibi, window)
    grp = h // hk
    qo = (_spec("q", (b, hk, grp, d), (h * d, grp * d, d, 1)) if packed
          else _spec("q", q.shape, (sq * h * d, h * d, d, 1)))
    tensors = (
        qo,
        _spec("k_cache", k_cache.shape, (page * hk * d, hk * d, d, 1)),
        _spec("v_cache", v_cache.shape, (page * hk * d, hk * d, d, 1)),
        _spec("block_table", (b * mb,), (1,), "int32"),
        _spec("cache_seqlens", (b,), (1,), "int32"),
        *slopes,
        # Split, only the merge writes `o` and declares it (b, h, s, d) over the same (B, Nq, H, D)
        # memory; unsplit, the decode kernel declares it (b, s, h, d).
        _spec("o", (b, h, sq, d), (sq * h * d, d, h * d, 1)) if num_splits > 1
        else _spec("o", qo[1], qo[2]) if packed
        else _spec("o", q.shape, (sq * h * d, h * d, d, 1)),
        _spec("lse", (b, hk, grp), (h, grp, 1), "float32") if packed and num_splits <= 1
        else _spec("lse", (b, h, sq), (h * sq, sq, 1), "float32"),
    )
    return _core._prepare(key, "attn_paged", problem, tensors, dev)
