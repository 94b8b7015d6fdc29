"""The arithmetic of context-parallel (ring) attention that needs neither torch nor a GPU: how a sequence
is cut into chunks and dealt to ranks, which (query chunk, key chunk) blocks a rank computes when a
given rank's keys and values are in hand, and how partial attention outputs over disjoint key sets are
merged by their log-sum-exp.

The merge is the one MI300X-attn §5.2's tail KV split uses between the splits of one query block: an
attention output over keys K₁ ∪ K₂ is the weighted mean of the outputs over K₁ and over K₂, each
weighted by its share of the softmax denominator, exp(lse_i - lse). Across GPUs the parts are the K/V
shards that travel around the ring.

Every function here works on numpy arrays and on torch tensors alike (the array's own namespace does
the arithmetic), so the same code is tested on the CPU in float64 and run on the GPU in float32.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple


# ----------------------------------------------------------------------------------------- the merge


def _xp(x):
    """The namespace that does arithmetic on x: torch for tensors, numpy otherwise."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        return torch
    import numpy

    return numpy


def merge_partials(out_a, lse_a, out_b, lse_b):
    """Attention over keys A ∪ B from the attention over A and over B (disjoint key sets).

    ``out_*`` are (..., N, D) outputs, ``lse_*`` the (..., N) natural-log sums of exp(scale·q·k) over
    each part's unmasked keys (-inf where a row saw no key). Returns ``(out, lse)``:
    ``lse = log(exp(lse_a) + exp(lse_b))`` and ``out = w_a·out_a + w_b·out_b`` with
    ``w_i = exp(lse_i - lse)``. Computed relative to ``max(lse_a, lse_b)`` so that no exponent is
    positive (nothing overflows whatever the logits); a row with no key in either part stays
    ``(0, -inf)`` instead of becoming NaN.
    """
    xp = _xp(lse_a)
    m = xp.maximum(lse_a, lse_b)
    finite = xp.isfinite(m)
    m = xp.where(finite, m, xp.zeros_like(m))
    ea, eb = xp.exp(lse_a - m), xp.exp(lse_b - m)  # each in [0, 1], one of them exactly 1 on live rows
    s = ea + eb
    live = s > 0
    safe = xp.where(live, s, xp.ones_like(s))
    lse = xp.where(live, m + xp.log(safe), xp.full_like(m, -float("inf")))
    wb = eb / safe
    if xp.__name__ == "torch" and out_a.dtype == out_b.dtype:
        # One pass over the outputs: on a live row w_a = 1 - w_b; on a dead row w_b = 0 and out_a = 0.
        return xp.lerp(out_a, out_b, wb[..., None].to(out_a.dtype)), lse
    wa = ea / safe
    out = wa[..., None] * out_a + wb[..., None] * out_b
    return out, lse


def empty_partial_like(q_like, xp_dtype=None):
    """The identity of :func:`merge_partials` for queries shaped like ``q_like`` (..., N, D): output
    zeros, log-sum-exp -inf (no key seen yet)."""
    xp = _xp(q_like)
    if xp.__name__ == "torch":
        dt = xp_dtype or xp.float32
        out = xp.zeros(q_like.shape, dtype=dt, device=q_like.device)
        lse = xp.full(q_like.shape[:-1], -float("inf"), dtype=dt, device=q_like.device)
    else:
        dt = xp_dtype or xp.float64
        out = xp.zeros(q_like.shape, dtype=dt)
        lse = xp.full(q_like.shape[:-1], -xp.inf, dtype=dt)
    return out, lse


# ------------------------------------------------------------------------------ chunks and their owners


def chunk_bounds(n: int, parts: int) -> List[Tuple[int, int]]:
    """[lo, hi) of ``parts`` consecutive chunks covering 0..n, the first ``n % parts`` one longer."""
    if parts < 1:
        raise ValueError(f"{parts} chunks: need at least one")
    if n < 0:
        raise ValueError(f"sequence length {n} is negative")
    base, extra = divmod(n, parts)
    bounds, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def chunks_per_rank(causal: bool) -> int:
    """Two mirrored chunks per rank under a causal mask (load balance), one otherwise."""
    return 2 if causal else 1


def owned_chunks(rank: int, world: int, causal: bool) -> Tuple[int, ...]:
    """The global chunk indices rank ``rank`` of ``world`` holds, in sequence order.

    Causal: the sequence is cut into 2·world chunks and rank r holds chunks r and 2·world-1-r (the
    "zigzag" assignment of the public ring-attention work): under a causal mask an early chunk has
    little to attend to and a late one much, so pairing chunk r with its mirror gives every rank the
    same work at every ring step. Without a mask every block is full and rank r holds chunk r alone.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1}")
    return (rank, 2 * world - 1 - rank) if causal else (rank,)


class Layout(NamedTuple):
    """How a sequence of ``n`` positions is spread over ``world`` ranks."""

    n: int
    world: int
    causal: bool

    def bounds(self) -> List[Tuple[int, int]]:
        return chunk_bounds(self.n, self.world * chunks_per_rank(self.causal))

    def chunks(self, rank: int) -> Tuple[int, ...]:
        return owned_chunks(rank, self.world, self.causal)

    def local_bounds(self, rank: int) -> List[Tuple[int, int]]:
        """Global [lo, hi) of each chunk rank ``rank`` holds, in the order they sit in its shard."""
        b = self.bounds()
        return [b[c] for c in self.chunks(rank)]

    def local_lengths(self, rank: int) -> List[int]:
        return [hi - lo for lo, hi in self.local_bounds(rank)]

    def local_length(self, rank: int) -> int:
        return sum(self.local_lengths(rank))

    def positions(self, rank: int) -> List[int]:
        """Global positions of the rows of rank ``rank``'s shard (for position embeddings)."""
        return [p for lo, hi in self.local_bounds(rank) for p in range(lo, hi)]


def ring_source(rank: int, step: int, world: int) -> int:
    """Whose keys and values rank ``rank`` holds at ring step ``step``: each step every rank passes what
    it holds to rank + 1 and receives from rank - 1, so at step t it holds rank - t's."""
    return (rank - step) % world


#: A block index meaning the rank's whole shard (all its chunks, in sequence order) rather than one chunk.
WHOLE = -1


class Block(NamedTuple):
    """One attention call of a ring step: query chunk ``qi`` (index into the rank's own chunks) against
    key chunk ``kj`` (index into the source rank's chunks), causal (top-left) or full; ``WHOLE`` for
    both when the rank attends to its own keys (the shard against itself, one call)."""

    qi: int
    kj: int
    causal: bool


def block_plan(q_chunks: Sequence[int], k_chunks: Sequence[int], causal: bool) -> List[Block]:
    """The blocks to compute for query chunks ``q_chunks`` against key chunks ``k_chunks`` (global
    chunk indices).

    The rank's own keys: one block of the whole shard against itself, causal or not. A shard's chunks
    are in sequence order, so local row i sees local key j under the global causal mask exactly when
    j <= i: the top-left mask of the square shard. One causal call over the shard also runs much
    faster than two half-size causal calls beside a full one (the diagonal tiles and the short rows of
    a causal kernel are a larger share of a small one; measured on the H200 at 65536: 1.8x the time
    per unmasked element).

    Another rank's keys: without a mask every pair of chunks; with a causal mask, key chunk before
    query chunk in full and a later key chunk not at all (every key is after every query). The same
    chunk cannot occur (chunks have one owner)."""
    if tuple(q_chunks) == tuple(k_chunks):
        return [Block(WHOLE, WHOLE, causal)]
    plan = []
    for qi, qc in enumerate(q_chunks):
        for kj, kc in enumerate(k_chunks):
            if not causal or kc < qc:
                plan.append(Block(qi, kj, False))
            elif kc == qc:
                plan.append(Block(qi, kj, True))
    return plan


def check_shard(n_local: int, rank: int, world: int, causal: bool, seq_len=None) -> Layout:
    """The layout of a sequence whose shard on rank ``rank`` has ``n_local`` rows.

    ``seq_len`` is the global length; when omitted every rank must hold the same number of rows, each
    chunk equally long (global length n_local·world), which is what :func:`chunk_bounds` gives when the
    length divides evenly. A shard whose length does not match the layout is refused by name.
    """
    per = chunks_per_rank(causal)
    if seq_len is None:
        if n_local % per:
            raise ValueError(
                f"a causal shard holds two equal chunks, so its length must be even (got {n_local}); pass "
                "seq_len= for a sequence that does not split evenly"
            )
        seq_len = n_local * world
    layout = Layout(int(seq_len), world, causal)
    want = layout.local_length(rank)
    if want != n_local:
        raise ValueError(
            f"rank {rank} of {world} holds {n_local} positions, but a sequence of {seq_len} split into "
            f"{world * per} chunks gives it {want} (chunks {layout.chunks(rank)})"
        )
    return layout


# ------------------------------------------------------------------------------ one ring step, any arrays


def _rows(x, lo: int, hi: int, has_d: bool):
    """Rows lo..hi of a (..., N, D) array (``has_d``) or of a (..., N) one, as a view."""
    return x[..., lo:hi, :] if has_d else x[..., lo:hi]


def _fold(acc, i, part) -> None:
    # None: no key seen yet, the block's partial is the running one (a merge with the empty partial
    # would give the same, at the cost of a pass over the outputs).
    acc[i] = part if acc[i] is None else merge_partials(acc[i][0], acc[i][1], part[0], part[1])


def forward_step(acc, q, k, v, plan: Sequence[Block], attend, whole=None, lengths=()) -> None:
    """Folds one ring step into the running partials: for each block, ``attend(q, k, v, causal)``
    returns that block's (output, log-sum-exp) and :func:`merge_partials` merges it into
    ``acc[qi] = (out, lse)`` (None before the first block). ``q`` is the rank's list of query chunks,
    ``k`` and ``v`` the source rank's lists of key and value chunks; a ``WHOLE`` block reads ``whole``
    = (q, k, v) of the rank's whole shard, whose chunks are ``lengths`` rows long."""
    for b in plan:
        if b.qi == WHOLE:
            o, lse = attend(whole[0], whole[1], whole[2], b.causal)
            lo = 0
            for i, n in enumerate(lengths):
                _fold(acc, i, (_rows(o, lo, lo + n, True), _rows(lse, lo, lo + n, False)))
                lo += n
        else:
            _fold(acc, b.qi, attend(q[b.qi], k[b.kj], v[b.kj], b.causal))


def backward_step(dq, dk, dv, q, k, v, out, dout, lse, plan: Sequence[Block], grads, whole=None,
                  lengths=()) -> None:
    """Adds one ring step's gradients: for each block, ``grads(q, k, v, out, dout, lse, causal)``
    returns (dQ, dK, dV) of that block, computed with the rows' global output and log-sum-exp (so the
    block's softmax weights are the global ones restricted to its keys, and its dQ, dK, dV are exactly
    the global gradients' share from those keys). dQ goes into the rank's own ``dq`` chunks, dK and dV
    into ``dk``/``dv``, the chunks of the accumulator that travels with the source's keys; a ``WHOLE``
    block reads ``whole`` = (q, k, v, out, dout, lse) of the rank's shard, chunks of ``lengths`` rows.
    Updates in place (views into a travelling buffer stay views)."""
    for b in plan:
        if b.qi == WHOLE:
            gq, gk, gv = grads(*whole, b.causal)
            lo = 0
            for i, n in enumerate(lengths):
                dq[i] += _rows(gq, lo, lo + n, True)
                dk[i] += _rows(gk, lo, lo + n, True)
                dv[i] += _rows(gv, lo, lo + n, True)
                lo += n
            continue
        gq, gk, gv = grads(q[b.qi], k[b.kj], v[b.kj], out[b.qi], dout[b.qi], lse[b.qi], b.causal)
        dq[b.qi] += gq
        dk[b.kj] += gk
        dv[b.kj] += gv
