"""FlashAttention's ``flash_attn_with_kvcache`` (decoding with a KV cache), forward only.

q (batch, seqlen_q, nheads, headdim); the cache k_cache, v_cache (batch_cache, seqlen_cache, nheads_k,
headdim), or paged with ``block_table`` (batch, max_blocks) int32: (num_blocks, page_size, nheads_k,
headdim); ``cache_seqlens`` (an int or int32 (batch,)) the keys each sequence holds; new k, v
(batch, seqlen_new, nheads_k, headdim) are written into the cache at ``cache_seqlens`` first (in place,
as FlashAttention does) and attended to. Causal is bottom-right (query i keeps keys j <= i + seqlen_k -
seqlen_q). ``alibi_slopes``: float32 (nheads,) or (batch, nheads), ``-slope * |i + seqlen_k - seqlen_q - j|``
on the scaled logits, seqlen_k each sequence's length after the append (FlashAttention's rule, bottom-right;
``kittens._alibi``). ``softcap`` (> 0): logits ``softcap * tanh(logits / softcap)``, before ALiBi (0.0:
none). ``window_size=(left, right)``: query i sits at key position ``p = i + seqlen_k - seqlen_q`` (the
bottom-right diagonal, seqlen_k again after the append) and keeps keys ``p - left ..= p + right`` (-1: that
side unbounded; with ``causal`` both apply). Returns out like q (and with ``return_softmax_lse`` the lse
float32 (batch, nheads, seqlen_q)).

How it runs. A paged cache (``block_table``): the paged decode kernel (registry ``attn_paged``,
``ops.attention_paged``) reads the pages in place, on every device: each block walks its sequence's pages
through the block table, read by the kernel on the device (no gather, no host read), keys at or past
``cache_seqlens + seqlen_new`` masked; split-KV (``num_splits``) then the merge. On CUDA that is the sm_90a
program ``kittens_kernels::attn_paged_hopper`` (64 query rows per block, pages streamed by a cp.async
warpgroup, key blocks of the largest of 128/64/32/16 keys that divides the page size) through the generic
registry path (``_dispatch.attention_paged``); on CPU tensors the interpreter (16 query rows per block,
16-key steps). The page size must be a multiple of 16 (``PAGE_MULTIPLE``, checked on every device). A dense
cache: the varlen forward with FlashAttention's ``seqused_k`` (registry ``attn_varlen``, variant
``seqused_k``): the queries are packed (batch·seqlen_q rows, ``cu_seqlens_q = b·seqlen_q``), the cache is
one packed tensor with ``cu_seqlens_k = b·capacity`` and ``seqused_k = cache_seqlens + seqlen_new``, all
made on the device; with a soft cap or a window, and for decoding (seqlen_q 1) where seqlen_cache is a
multiple of 16 (and on CUDA the head dim one the sm_90a program takes), the dense cache is read by the
paged kernel instead, as one page per sequence (``block_table = arange(batch)``, page size =
``seqlen_cache``, which with a soft cap or a window must then be a multiple of 16). The append of new k/v is
torch's indexed assignment, in place, before the kernel runs.

Decoding (seqlen_q 1, no ALiBi, no window) packs each GQA group's query heads into one block's rows (the
kernel's ``pack_gqa``: the group's K and V read once); ``num_splits=0`` on CUDA splits each block's key walk
into as many parts as keep the blocks within one pass over the 132 SMs (``_splits``).

Bad input: shapes, dtypes, devices, the head dim, the page size and the unsupported options are checked
everywhere, without a device read. ``cache_seqlens`` beyond the capacity (after the append) and
``block_table`` entries outside ``[0, num_blocks)`` are checked on CPU tensors only: on CUDA each would need
a device read (a synchronisation), so, as in FlashAttention, they are the caller's to keep in range (on
CUDA an out-of-range page or length makes the append's scatter, when new k/v are given, raise a
device-side assert). The paged kernel itself never reads outside the cache whatever the table holds: it
holds each length to the table's capacity, each table index to the sequence's last page and each page
number to ``[0, num_blocks)`` (a bad entry gives wrong values for that sequence, not a fault). On CUDA the
paged kernel takes head dims 64, 128, 192 and 256 (checked here, naming q's headdim).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor

from . import _alibi
from ._fa_args import _check_softcap, _check_window, packs_gqa

__all__ = ["flash_attn_with_kvcache"]

# Keys per step of the paged kernel on CPU (``kittens_kernels::attn_paged::kv_block_for``): a page holds
# whole steps.
PAGE_MULTIPLE = 16
# The most key parts of the split-KV form (``kittens_kernels::attn_fwd::split::MAX_KV_SPLITS``).
MAX_SPLITS = 16
# Blocks that fill an H100/H200 once (132 SMs): the automatic split aims at this many.
_SMS = 132
# Query rows per block of the sm_90a program (``kittens_kernels::attn_paged_hopper::BLOCK_Q``) and of the
# interpreter's (``kittens_kernels::attn_paged::BLOCK_Q``).
_BLOCK_Q_CUDA, _BLOCK_Q_CPU = 64, 16


def _kv_block(page: int, d: int, cuda: bool) -> int:
    """Keys per step (``kv_block_for``): on sm_90a the largest of 128, 64, 32, 16 dividing the page (64 at
    most past head dim 128); 16 on the interpreter."""
    if not cuda:
        return PAGE_MULTIPLE
    return next(kv for kv in (128, 64, 32, 16) if kv <= (64 if d > 128 else 128) and page % kv == 0)


def _splits(num_splits: int, b: int, grid_heads: int, rows: int, steps: int, cuda: bool) -> int:
    """FlashAttention's ``num_splits``: the count given (at most 16, at most one per key step), or for 0
    on CUDA as many parts as keep the blocks (``grid_heads`` heads of ``rows`` rows per sequence) within
    one pass over the SMs (the sm_90a grid is persistent: a block past the SMs' count is a second wave);
    1 on CPU."""
    if num_splits > 0:
        return min(int(num_splits), MAX_SPLITS, max(steps, 1))
    if not cuda:
        return 1
    blocks = max(b * grid_heads * -(-rows // _BLOCK_Q_CUDA), 1)
    return max(1, min(MAX_SPLITS, _SMS // blocks, max(steps, 1)))


_OPS: list = []


def _ops():
    """kittens.ops, imported once (an import statement runs the import machinery on every call)."""
    if not _OPS:
        from . import ops

        _OPS.append(ops)
    return _OPS[0]


# One page per sequence (``block_table = arange(batch)``) per (batch, device): made once outside CUDA graph
# capture (a tensor made while capturing is only written when the graph replays), kept for later calls.
_ROWS: dict = {}


def _one_page_each(b: int, dev) -> Tensor:
    if torch.compiler.is_compiling():  # traced: made in the graph, nothing kept
        return torch.arange(b, device=dev, dtype=torch.int32)[:, None]
    key = (b, dev)
    t = _ROWS.get(key)
    if t is None:
        t = torch.arange(b, device=dev, dtype=torch.int32)[:, None]
        if not (dev.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            if len(_ROWS) >= 64:  # a few batch sizes at a time; never grows without bound
                _ROWS.clear()
            _ROWS[key] = t
    return t


def _paged(q, k_cache, v_cache, block_table, seqlens, causal, scale, num_splits, return_lse, slopes=None,
           softcap=None, window=None):
    """The paged cache read in place by the ``attn_paged`` kernel (``ops.attention_paged``)."""
    b, sq, h, d = q.shape
    hk = k_cache.shape[2]
    cuda = q.is_cuda
    steps = block_table.shape[1] * k_cache.shape[1] // _kv_block(k_cache.shape[1], d, cuda)
    grid = (hk, h // hk) if packs_gqa(sq, h, hk, slopes, window) else (h, sq)
    g = _splits(num_splits, b, *grid, steps, cuda)
    if not q.is_contiguous():
        q = q.contiguous()
    if not block_table.is_contiguous():
        block_table = block_table.contiguous()
    out, lse = _ops().call("attention_paged", q, k_cache, v_cache, block_table, seqlens, bool(causal),
                           None if scale is None else float(scale), g, slopes, softcap,
                           None if window is None else list(window))
    return (out, lse) if return_lse else out


def _as_pages(sq: int, d: int, capacity: int, cuda: bool, softcap, window, k_cache, v_cache) -> bool:
    """Whether a contiguous cache is read by the paged kernel as one page per sequence: with a soft cap or a
    window (the varlen kernel takes neither), and for decoding's one query per sequence (the paged kernel's
    GQA packing and key split; the varlen kernel's 128-row blocks hold one row each), where the capacity is a
    page the kernel steps through, the caches are dense (read in place) and, on CUDA, the head dim is one the
    sm_90a program takes."""
    if softcap is not None or window is not None:
        return True
    return (sq == 1 and capacity > 0 and capacity % PAGE_MULTIPLE == 0 and (not cuda or d in (64, 128, 192, 256))
            and k_cache.is_contiguous() and v_cache.is_contiguous())


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
    # Decoding calls this once per layer and token: the defaults are told apart first, without the checks'
    # abstract-class tests (``numbers.Integral``) or the refusals' argument tuples.
    if rotary_cos is not None or rotary_sin is not None or cache_batch_idx is not None or cache_leftpad is not None:
        _refuse(rotary_cos=(rotary_cos, None), rotary_sin=(rotary_sin, None),
                cache_batch_idx=(cache_batch_idx, None), cache_leftpad=(cache_leftpad, None))
    if type(window_size) is tuple and window_size == (-1, -1) and type(window_size[0]) is int \
            and type(window_size[1]) is int:
        window = None
    else:
        window = _check_window(window_size)
        window = None if window == (-1, -1) else window
    softcap = None if type(softcap) is float and softcap == 0.0 else _check_softcap(softcap)
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
    # Checked before the append mutates the cache.
    slopes = None if alibi_slopes is None else _alibi.slopes(alibi_slopes, b, h, dev)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v), ("block_table", block_table),
                    ("cache_seqlens", cache_seqlens)):
        if t is not None and type(t) is not int and isinstance(t, Tensor) and t.device != dev:
            raise ValueError(f"{name} is on {t.device}, q on {dev}: all tensors must be on one device")
    if block_table is not None:
        _check("block_table", block_table, 2, torch.int32)
        if k_cache.shape[1] % PAGE_MULTIPLE:
            raise ValueError(f"page_size: the paged decode kernel reads pages in steps of {PAGE_MULTIPLE} keys, "
                             f"so k_cache's page size (dim 1) must be a multiple of {PAGE_MULTIPLE}, got "
                             f"{k_cache.shape[1]}")
        if q.is_cuda and d not in (64, 128, 192, 256):
            raise ValueError(f"headdim {d}: the paged decode kernel on CUDA (sm_90a) takes 64, 128, 192 or 256")
        if block_table.shape[0] != b:
            raise ValueError(f"block_table has {block_table.shape[0]} rows for a batch of {b}")
        page = k_cache.shape[1]
        capacity = block_table.shape[1] * page
    else:
        if k_cache.shape[0] < b:
            raise ValueError(f"k_cache holds {k_cache.shape[0]} sequences for a batch of {b}")
        page, capacity = None, k_cache.shape[1]
        if (softcap is not None or window is not None) and (capacity == 0 or capacity % PAGE_MULTIPLE):
            raise ValueError(f"seqlen_cache: with softcap or window_size a contiguous cache is read by the paged "
                             f"decode kernel as one page per sequence, so k_cache's seqlen_cache (dim 1) must be "
                             f"a positive multiple of {PAGE_MULTIPLE}, got {capacity} (or pass a block_table)")
        if (softcap is not None or window is not None) and q.is_cuda and d not in (64, 128, 192, 256):
            raise ValueError(f"headdim {d}: the paged decode kernel on CUDA (sm_90a) takes 64, 128, 192 or 256")
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
    if sn:  # the append, in place (FlashAttention's semantics)
        used = cache_seqlens.to(torch.int64)
        pos = used[:, None] + torch.arange(sn, device=dev)
        if block_table is None:
            rows = torch.arange(b, device=dev)[:, None].expand(b, sn)
            k_cache[rows, pos] = k
            v_cache[rows, pos] = v
        else:
            blk = block_table.to(torch.int64).gather(1, pos // page)
            k_cache[blk, pos % page] = k
            v_cache[blk, pos % page] = v
    # Each sequence's keys after the append: the caller's tensor itself without one (no device op).
    if sn:
        seqused = (cache_seqlens.to(torch.int64) + sn).to(torch.int32)
    else:
        seqused = cache_seqlens if cache_seqlens.is_contiguous() else cache_seqlens.contiguous()
    if block_table is None and _as_pages(sq, d, capacity, q.is_cuda, softcap, window, k_cache, v_cache):
        # The contiguous cache as pages of one sequence each: sequence i is page i.
        block_table = _one_page_each(b, dev)
    if block_table is not None:
        return _paged(q, k_cache, v_cache, block_table, seqused, causal, softmax_scale,
                      num_splits, return_softmax_lse, slopes, softcap, window)
    kc, vc = k_cache[:b], v_cache[:b]
    kc = kc.reshape(b * capacity, hk, d)
    vc = vc.reshape(b * capacity, hk, d)
    cu_q = torch.arange(b + 1, device=dev, dtype=torch.int32) * sq
    cu_k = torch.arange(b + 1, device=dev, dtype=torch.int32) * capacity
    from . import varlen  # noqa: F401  (registers the op)

    out, lse = torch.ops.kittens.attention_varlen(q.reshape(b * sq, h, d), kc, vc, cu_q, cu_k, sq, capacity,
                                                  bool(causal), softmax_scale, seqused, slopes)
    out = out.reshape(b, sq, h, d)
    if return_softmax_lse:
        return out, lse.reshape(h, b, sq).transpose(0, 1)
    return out
