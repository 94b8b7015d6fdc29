"""Context-parallel attention over ``torch.distributed``: :func:`ring_attention` with the sequence
sharded over the ranks of a process group, and the helpers that shard a sequence the way it expects.

How it works (one process per GPU, as ``torchrun`` starts them):

* The sequence is cut into chunks (:mod:`kittens._ring_plan`): one per rank without a mask; with a
  causal mask two per rank, rank r holding chunks r and 2R-1-r, so that every rank does the same work
  at every step (an early chunk attends to little, its mirror to much).
* Each rank computes attention of its queries against the keys and values it holds, then passes those
  to rank + 1 and receives rank - 1's (``torch.distributed.batch_isend_irecv``: NCCL send/recv on
  NCCL's own stream, issued before the step's attention kernels so the transfer runs beside them;
  the caller's stream waits for it only before the next step). After R steps every query has seen
  every key.
* The partial outputs are merged by their log-sum-exp (:func:`kittens._ring_plan.merge_partials`, the
  tail KV split's merge of MI300X-attn §5.2), which ``kittens.attention(..., return_lse=True)``
  returns beside each block's output.
* Backward: the keys and values go around the ring again, and with them an accumulator of their dK and
  dV (float32); each rank adds its queries' share from ``kittens._attention_backward`` with the global
  output and log-sum-exp of its rows, and after R steps and one last hop every accumulator is home.

Every rank must call with the same shapes apart from the sequence shard, in the same order (the ring's
sends and receives pair up across ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist

from ._ring_plan import (
    Layout,
    backward_step,
    block_plan,
    check_shard,
    forward_step,
    ring_source,
)

__all__ = ["ring_attention", "RingAttentionFunction", "BlockKernels", "KITTENS", "REFERENCE", "shard", "gather",
           "positions"]


# ------------------------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class BlockKernels:
    """The attention of one block, as the ring calls it.

    ``forward(q, k, v, causal, scale) -> (out, lse)``: out like q, lse float32 (B, H, Nq).
    ``backward(q, k, v, out, dout, lse, causal, scale) -> (dq, dk, dv)`` with out and lse the rows'
    global output and log-sum-exp. q (B, H, Nq, D), k and v (B, H_kv, Nk, D), dense; ``causal`` only
    on square diagonal blocks.
    """

    forward: Callable
    backward: Callable


def _kittens_forward(q, k, v, causal, scale):
    import kittens

    try:
        return kittens.attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    except TypeError as e:
        if "return_lse" in str(e):
            raise RuntimeError(
                "ring attention needs the forward's log-sum-exp (kittens.attention(..., return_lse=True)), "
                "which this build of kittens does not have"
            ) from e
        raise


def _kittens_backward(q, k, v, out, dout, lse, causal, scale):
    import kittens

    bwd = getattr(kittens, "_attention_backward", None)
    if bwd is None:
        raise RuntimeError("ring attention's backward needs kittens' attention backward, which this build lacks")
    return bwd(q, k, v, out, dout, lse, causal, scale)


KITTENS = BlockKernels(_kittens_forward, _kittens_backward)


def _reference_scores(q, k, causal, scale):
    group = q.shape[1] // k.shape[1]
    s = torch.matmul(q, k.repeat_interleave(group, 1).transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
    return s


def _reference_forward(q, k, v, causal, scale):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = _reference_scores(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - lse[..., None]), v.repeat_interleave(q.shape[1] // v.shape[1], 1)), lse


def _reference_backward(q, k, v, out, dout, lse, causal, scale):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    p = torch.exp(_reference_scores(q, k, causal, scale) - lse[..., None])
    ds = p * (torch.matmul(dout, vr.transpose(-1, -2)) - (dout * out).sum(-1, keepdim=True))
    fold = lambda x: x.unflatten(1, (k.shape[1], group)).sum(2)  # noqa: E731
    return (torch.matmul(ds, kr) * scale, fold(torch.matmul(ds.transpose(-1, -2), q) * scale),
            fold(torch.matmul(p.transpose(-1, -2), dout)))


#: Block kernels in plain torch arithmetic (any device and dtype, memory O(Nq·Nk)): for tests and CPU
#: runs of the ring, never for speed.
REFERENCE = BlockKernels(_reference_forward, _reference_backward)


# ------------------------------------------------------------------------------------------ the ring


class _Ring:
    """A process group seen as a ring: this rank, the group's size, and the global ranks of the next
    and previous members (what torch.distributed's point-to-point calls take)."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        peer = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
        self.next = peer((self.rank + 1) % self.world)
        self.prev = peer((self.rank - 1) % self.world)

    def exchange(self, send: torch.Tensor, recv: torch.Tensor):
        """Starts sending ``send`` to the next rank and receiving the previous rank's into ``recv``;
        returns the works to wait on (on CUDA the wait makes the current stream wait)."""
        ops = [
            dist.P2POp(dist.isend, send, self.next, self.group),
            dist.P2POp(dist.irecv, recv, self.prev, self.group),
        ]
        return dist.batch_isend_irecv(ops)


def _wait(works) -> None:
    for w in works:
        w.wait()


def _split(x: torch.Tensor, lengths: Sequence[int]) -> List[torch.Tensor]:
    """x (B, H, N, D) cut along N into dense (B, H, n_i, D) chunks (the kernels read dense blocks)."""
    out, lo = [], 0
    for n in lengths:
        out.append(x.narrow(2, lo, n).contiguous())
        lo += n
    return out


def _kv_shapes(layout: Layout, rank: int, like: torch.Tensor):
    b, h, _, d = like.shape
    return [(b, h, n, d) for n in layout.local_lengths(rank)]


def _numel(shapes) -> int:
    total = 0
    for s in shapes:
        n = 1
        for x in s:
            n *= x
        total += n
    return 2 * total  # keys and values


def _pack(k_chunks, v_chunks, dtype=None) -> torch.Tensor:
    """Keys then values of one rank, chunk by chunk, in one flat buffer (one send per ring step)."""
    parts = [c.reshape(-1) for c in list(k_chunks) + list(v_chunks)]
    flat = torch.cat(parts)
    return flat if dtype is None else flat.to(dtype)


def _views(flat: torch.Tensor, shapes):
    """The (keys, values) chunk views of a buffer made by :func:`_pack` for chunks of ``shapes``."""
    views, lo = [], 0
    for s in list(shapes) + list(shapes):
        n = s[0] * s[1] * s[2] * s[3]
        views.append(flat[lo: lo + n].view(s))
        lo += n
    half = len(shapes)
    return views[:half], views[half:]


def _stitch(chunks: Sequence[torch.Tensor], like: torch.Tensor, dtype) -> torch.Tensor:
    """Chunks (B, H, n_i, D) joined along N into a new tensor with ``like``'s shape and memory order
    ((B, H, N, D) dense, or a (B, N, H, D) buffer seen through ``.transpose(1, 2)``)."""
    b, h, n, d = like.shape
    bshd = like.dim() == 4 and h > 1 and n > 1 and like.stride(1) < like.stride(2)
    out = torch.empty((b, n, h, d), dtype=dtype, device=like.device).transpose(1, 2) if bshd else \
        torch.empty((b, h, n, d), dtype=dtype, device=like.device)
    lo = 0
    for c in chunks:
        out.narrow(2, lo, c.shape[2]).copy_(c)
        lo += c.shape[2]
    return out


def _acc_dtype(x: torch.Tensor):
    """Partials and gradients accumulate in float32 (float64 for float64 inputs)."""
    return torch.promote_types(x.dtype, torch.float32)


def _ring_forward(ring: _Ring, layout: Layout, q, k, v, scale, kernels: BlockKernels):
    """(out in q's dtype and order, lse float32 (B, H, n_local)) of the rank's queries."""
    rank, world, causal = ring.rank, ring.world, layout.causal
    mine = layout.local_lengths(rank)
    q_ch = _split(q, mine)
    kv = _pack(_split(k, mine), _split(v, mine))
    whole = (q.contiguous(), k.contiguous(), v.contiguous())  # the shard against itself: one block
    acc = [None] * len(q_ch)
    wide = _acc_dtype(q)

    def attend(qb, kb, vb, c):
        o, lse = kernels.forward(qb, kb, vb, c, scale)
        return o.to(wide), lse.to(wide)

    for t in range(world):
        src = ring_source(rank, t, world)
        pending = None
        if t + 1 < world:  # start passing what this step reads; the kernels below run beside it
            recv = torch.empty(_numel(_kv_shapes(layout, ring_source(rank, t + 1, world), k)),
                               dtype=kv.dtype, device=kv.device)
            pending = ring.exchange(kv, recv)
        ks, vs = _views(kv, _kv_shapes(layout, src, k))
        forward_step(acc, q_ch, ks, vs, block_plan(layout.chunks(rank), layout.chunks(src), causal), attend,
                     whole, mine)
        if pending is not None:
            _wait(pending)
            kv = recv
    out = _stitch([a[0] for a in acc], q, q.dtype)
    lse = torch.cat([a[1] for a in acc], dim=-1)
    return out, lse


def _ring_backward(ring: _Ring, layout: Layout, q, k, v, out, lse, dout, scale, kernels: BlockKernels):
    """(dq, dk, dv) of the rank's shards."""
    rank, world, causal = ring.rank, ring.world, layout.causal
    mine = layout.local_lengths(rank)
    q_ch, o_ch, do_ch = _split(q, mine), _split(out, mine), _split(dout, mine)
    lse_ch, lo = [], 0
    for n in mine:
        lse_ch.append(lse.narrow(-1, lo, n).contiguous())
        lo += n
    dq = [torch.zeros(c.shape, dtype=_acc_dtype(q), device=c.device) for c in q_ch]
    kv = _pack(_split(k, mine), _split(v, mine))
    whole = tuple(x.contiguous() for x in (q, k, v, out, dout, lse))

    def grads(qb, kb, vb, ob, dob, lseb, c):
        return kernels.backward(qb, kb, vb, ob, dob, lseb, c, scale)

    pending_dkv, dkv_recv, acc = None, None, None
    for t in range(world):
        src = ring_source(rank, t, world)
        pending_kv = None
        if t + 1 < world:
            recv = torch.empty(_numel(_kv_shapes(layout, ring_source(rank, t + 1, world), k)),
                               dtype=kv.dtype, device=kv.device)
            pending_kv = ring.exchange(kv, recv)
        shapes = _kv_shapes(layout, src, k)
        acc = torch.zeros(_numel(shapes), dtype=_acc_dtype(k), device=kv.device)
        dks, dvs = _views(acc, shapes)
        ks, vs = _views(kv, shapes)
        plan = block_plan(layout.chunks(rank), layout.chunks(src), causal)
        backward_step(dq, dks, dvs, q_ch, ks, vs, o_ch, do_ch, lse_ch, plan, grads, whole, mine)
        if pending_dkv is not None:  # what earlier ranks added for these keys
            _wait(pending_dkv)
            acc += dkv_recv
        if pending_kv is not None:
            _wait(pending_kv)
            kv = recv
        if world > 1:  # pass the accumulator on; the next step's kernels run beside the transfer
            dkv_recv = torch.empty(_numel(_kv_shapes(layout, ring_source(rank, t + 1, world), k)),
                                   dtype=_acc_dtype(k), device=kv.device)
            pending_dkv = ring.exchange(acc, dkv_recv)
    if world > 1:  # the last hop brings every accumulator home: ring_source(rank, world) == rank
        _wait(pending_dkv)
        acc = dkv_recv
    dk_ch, dv_ch = _views(acc, _kv_shapes(layout, rank, k))
    return _stitch(dq, q, q.dtype), _stitch(dk_ch, k, k.dtype), _stitch(dv_ch, v, v.dtype)


# ------------------------------------------------------------------------------------------ the API


class RingAttentionFunction(torch.autograd.Function):
    """Forward and backward of :func:`ring_attention` (saves q, k, v, the output and its float32
    log-sum-exp)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, group, seq_len, kernels):
        ring = _Ring(group)
        layout = check_shard(q.shape[2], ring.rank, ring.world, bool(causal), seq_len)
        if k.shape[2] != q.shape[2] or v.shape != k.shape:
            raise ValueError(
                f"ring attention takes shards of one sequence: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                f"v {tuple(v.shape)} (as many keys as queries on every rank, v shaped like k)"
            )
        out, lse = _ring_forward(ring, layout, q, k, v, scale, kernels)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.layout, ctx.scale, ctx.kernels = ring, layout, scale, kernels
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(ctx.ring, ctx.layout, q, k, v, out, lse, dout, ctx.scale, ctx.kernels)
        return dq, dk, dv, None, None, None, None, None


def ring_attention(q, k, v, group=None, causal: bool = False, scale: Optional[float] = None, *,
                   seq_len: Optional[int] = None, kernels: BlockKernels = KITTENS):
    """Attention over a sequence sharded across the ranks of ``group`` (default: the world).

    ``q`` (B, H, n, D) and ``k``, ``v`` (B, H_kv, n, D) are this rank's shard of the sequence, as
    :func:`shard` cuts it (with ``causal=True`` two mirrored chunks, rank r holding chunks r and
    2R-1-r of 2R; otherwise chunk r of R). Returns this rank's rows of
    ``softmax(scale·q·kᵀ [+ causal mask])·v`` over the whole sequence, in q's memory order; a
    ``torch.autograd.Function`` (:class:`RingAttentionFunction`), so gradients flow to every rank's
    shard. ``seq_len`` is the global length when it does not split into equal chunks. ``kernels`` are
    the block attention and its backward (default kittens' own kernels; tests pass references).
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention needs torch.distributed initialised (e.g. under torchrun)")
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be 4-D (B, H, N, D), got {tuple(q.shape)} and {tuple(k.shape)}")
    return RingAttentionFunction.apply(q, k, v, bool(causal), scale, group, seq_len, kernels)


def _layout(n: int, group, causal: bool) -> Layout:
    return Layout(int(n), dist.get_world_size(group), bool(causal))


def shard(x: torch.Tensor, group=None, causal: bool = False, dim: int = 2) -> torch.Tensor:
    """This rank's shard of the full sequence ``x`` (the same on every rank) along ``dim``: the chunks
    :func:`ring_attention` expects, concatenated in sequence order."""
    layout = _layout(x.shape[dim], group, causal)
    parts = [x.narrow(dim, lo, hi - lo) for lo, hi in layout.local_bounds(dist.get_rank(group))]
    return torch.cat(parts, dim=dim)


def positions(seq_len: int, group=None, causal: bool = False, device=None) -> torch.Tensor:
    """Global positions (int64) of this rank's shard's rows, for position embeddings."""
    layout = _layout(seq_len, group, causal)
    return torch.tensor(layout.positions(dist.get_rank(group)), dtype=torch.long, device=device)


def gather(x: torch.Tensor, seq_len: int, group=None, causal: bool = False, dim: int = 2) -> torch.Tensor:
    """The full sequence from every rank's shard (``all_gather``; shards padded to the longest)."""
    layout = _layout(seq_len, group, causal)
    world = layout.world
    longest = max(layout.local_length(r) for r in range(world))
    pad = list(x.shape)
    pad[dim] = longest - x.shape[dim]
    xp = torch.cat([x, x.new_zeros(pad)], dim=dim).contiguous()
    bufs = [torch.empty_like(xp) for _ in range(world)]
    dist.all_gather(bufs, xp, group=group)
    full = [None] * (2 * world if causal else world)
    for r in range(world):
        lo = 0
        for c, n in zip(layout.chunks(r), layout.local_lengths(r)):
            full[c] = bufs[r].narrow(dim, lo, n)
            lo += n
    return torch.cat(full, dim=dim)
