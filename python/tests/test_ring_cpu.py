"""Context-parallel (ring) attention's arithmetic on the CPU, in float64, without torch or a GPU: the
log-sum-exp merge against a full softmax, the chunk bookkeeping, and a fake ring of R ranks simulated
in one process (each rank's blocks computed by a float64 numpy attention, keys/values and their
gradient accumulators handed from rank to rank as the real ring does) against attention and its
gradients over the whole sequence.

Inputs are random (never zeros), lengths are not multiples of the number of chunks, heads are grouped
(GQA) and the scale is not the default one.
"""

import numpy as np
import pytest

from kittens._ring_plan import (
    WHOLE,
    Block,
    Layout,
    backward_step,
    block_plan,
    check_shard,
    chunk_bounds,
    empty_partial_like,
    forward_step,
    merge_partials,
    owned_chunks,
    ring_source,
)

# ------------------------------------------------------------------------------ float64 references


def _scores(q, k, scale, mask):
    """(B, H, Nq, Nk) logits, kv heads repeated for grouped queries; masked entries -inf."""
    group = q.shape[1] // k.shape[1]
    s = np.einsum("bhid,bhjd->bhij", q, np.repeat(k, group, axis=1)) * scale
    return s if mask is None else np.where(mask, s, -np.inf)


def attend(q, k, v, scale, mask=None):
    """(out, lse) of softmax attention in float64; a row with no unmasked key gives (0, -inf)."""
    s = _scores(q, k, scale, mask)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    lse = np.where(total[..., 0] > 0, np.log(np.where(total > 0, total, 1.0))[..., 0] + m[..., 0], -np.inf)
    out = np.einsum("bhij,bhjd->bhid", p / np.where(total > 0, total, 1.0), np.repeat(v, q.shape[1] // v.shape[1], 1))
    return out, lse


def attend_grads(q, k, v, out, dout, lse, scale, mask=None):
    """dQ, dK, dV of attention given the rows' (global) output and log-sum-exp, float64."""
    group = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    p = np.exp(_scores(q, k, scale, mask) - lse[..., None])
    dvr = np.einsum("bhij,bhid->bhjd", p, dout)
    dp = np.einsum("bhid,bhjd->bhij", dout, vr)
    delta = (dout * out).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = np.einsum("bhij,bhjd->bhid", ds, kr) * scale
    dkr = np.einsum("bhij,bhid->bhjd", ds, q) * scale
    fold = lambda x: x.reshape(x.shape[0], k.shape[1], group, *x.shape[2:]).sum(axis=2)  # noqa: E731
    return dq, fold(dkr), fold(dvr)


def causal_mask(nq, nk):
    return np.tril(np.ones((nq, nk), dtype=bool))


# ----------------------------------------------------------------------------------------- the merge


def test_merge_of_key_splits_is_the_full_softmax():
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(2, 3, 13, 8)), rng.normal(size=(2, 3, 29, 8)), rng.normal(size=(2, 3, 29, 8))
    full, full_lse = attend(q, k, v, 0.7)
    for cuts in ([11], [1, 2, 28], [5, 6, 17, 20]):
        acc = empty_partial_like(q)
        for lo, hi in zip([0] + cuts, cuts + [29]):
            acc = merge_partials(*acc, *attend(q, k[:, :, lo:hi], v[:, :, lo:hi], 0.7))
        np.testing.assert_allclose(acc[0], full, rtol=0, atol=1e-13)
        np.testing.assert_allclose(acc[1], full_lse, rtol=1e-14, atol=0)
    # Merging is symmetric and the empty partial is its identity.
    a, b = attend(q, k[:, :, :9], v[:, :, :9], 0.7), attend(q, k[:, :, 9:], v[:, :, 9:], 0.7)
    ab, ba = merge_partials(*a, *b), merge_partials(*b, *a)
    np.testing.assert_allclose(ab[0], ba[0], atol=1e-15)
    e = merge_partials(*empty_partial_like(q), *a)
    assert np.array_equal(e[0], a[0]) and np.array_equal(e[1], a[1])


def test_merge_is_stable_at_huge_logits_and_keeps_empty_rows_empty():
    rng = np.random.default_rng(8)
    q = rng.normal(size=(1, 2, 6, 4)) * 60.0  # logits in the thousands: exp() would overflow
    k, v = rng.normal(size=(1, 2, 10, 4)) * 60.0, rng.normal(size=(1, 2, 10, 4))
    full, full_lse = attend(q, k, v, 1.0)
    assert np.all(np.abs(full_lse) > 700)  # far past exp's float64 range
    got = merge_partials(*attend(q, k[:, :, :4], v[:, :, :4], 1.0), *attend(q, k[:, :, 4:], v[:, :, 4:], 1.0))
    assert np.all(np.isfinite(got[0])) and np.all(np.isfinite(got[1]))
    np.testing.assert_allclose(got[0], full, atol=1e-12)
    np.testing.assert_allclose(got[1], full_lse, rtol=1e-14)
    # Rows that see no key in one part take the other part unchanged; rows that see none in either
    # stay (0, -inf), not NaN.
    none = np.zeros((6, 4), dtype=bool)
    some = causal_mask(6, 4)
    some[0] = False  # row 0 sees nothing anywhere
    a, b = attend(q, k[:, :, :4], v[:, :, :4], 1.0, some), attend(q, k[:, :, 4:8], v[:, :, 4:8], 1.0, none)
    assert np.all(b[1] == -np.inf)
    o, lse = merge_partials(*a, *b)
    assert np.array_equal(o[:, :, 1:], a[0][:, :, 1:]) and np.array_equal(lse[:, :, 1:], a[1][:, :, 1:])
    assert np.all(o[:, :, 0] == 0) and np.all(lse[:, :, 0] == -np.inf)


# ------------------------------------------------------------------------------------ the bookkeeping


def test_chunks_cover_the_sequence_and_zigzag_pairs_mirrors():
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(3, 4) == [(0, 1), (1, 2), (2, 3), (3, 3)]
    for world in (1, 2, 3, 5):
        for causal in (False, True):
            lay = Layout(1001, world, causal)
            seen = sorted(p for r in range(world) for p in lay.positions(r))
            assert seen == list(range(1001))  # every position on exactly one rank
            for r in range(world):
                assert lay.positions(r) == sorted(lay.positions(r))
    assert owned_chunks(0, 4, True) == (0, 7) and owned_chunks(3, 4, True) == (3, 4)
    assert [ring_source(1, t, 3) for t in range(3)] == [1, 0, 2]
    with pytest.raises(ValueError, match="must be even"):
        check_shard(7, 0, 2, True)
    with pytest.raises(ValueError, match="gives it 8"):
        check_shard(5, 1, 2, True, seq_len=17)


def test_causal_zigzag_balances_the_work_of_every_step():
    """Under the causal mask each rank computes the same number of unmasked (query, key) pairs at
    every ring step (chunks of equal length), and over the whole ring exactly the causal triangle."""
    n, world = 64, 4
    lay = Layout(n, world, True)
    c = n // (2 * world)
    total = 0
    for t in range(world):
        work = []
        for r in range(world):
            src = ring_source(r, t, world)
            plan = block_plan(lay.chunks(r), lay.chunks(src), True)
            size = lambda i: 2 * c if i == WHOLE else c  # noqa: E731
            work.append(sum(size(b.qi) * (size(b.qi) + 1) // 2 if b.causal else size(b.qi) * size(b.kj)
                            for b in plan))
        total += sum(work)
        assert len(set(work)) == 1 if t > 0 else True, work
        if t > 0:
            assert work[0] == 2 * c * c  # two full blocks (or their mirrors) per rank
    assert total == n * (n + 1) // 2
    # Block kinds: key chunk before query chunk full, a later one skipped, the rank's own keys one
    # causal block over its whole shard.
    assert block_plan((1, 6), (0, 7), True) == [Block(0, 0, False), Block(1, 0, False)]
    assert block_plan((1, 6), (2, 5), True) == [Block(1, 0, False), Block(1, 1, False)]
    assert block_plan((1, 6), (1, 6), True) == [Block(WHOLE, WHOLE, True)]
    assert block_plan((2,), (2,), False) == [Block(WHOLE, WHOLE, False)]
    assert block_plan((2,), (0,), False) == [Block(0, 0, False)]


# ----------------------------------------------------------------------------------- the fake ring


def _split(x, lengths):
    out, lo = [], 0
    for n in lengths:
        out.append(x[:, :, lo:lo + n])
        lo += n
    return out


def fake_ring(q, k, v, dout, world, causal, scale):
    """What R ranks compute, simulated in turn: per rank the chunks it owns, per step the source rank's
    keys/values (and in the backward their travelling dK/dV accumulator). Returns the full-sequence
    output, lse, dQ, dK, dV reassembled from the ranks' chunks."""
    n = q.shape[2]
    lay = Layout(n, world, causal)
    bounds = lay.bounds()
    take = lambda x, r: [x[:, :, lo:hi] for lo, hi in lay.local_bounds(r)]  # noqa: E731

    def block_fwd(qb, kb, vb, c):
        return attend(qb, kb, vb, scale, causal_mask(qb.shape[2], kb.shape[2]) if c else None)

    def block_bwd(qb, kb, vb, ob, dob, lseb, c):
        return attend_grads(qb, kb, vb, ob, dob, lseb, scale, causal_mask(qb.shape[2], kb.shape[2]) if c else None)

    def whole(x, r):  # the rank's shard: its chunks in sequence order
        return np.concatenate(take(x, r), axis=2)

    # Forward: every rank's partials, step by step.
    acc = {r: [None] * len(take(q, r)) for r in range(world)}  # as the real ring starts
    for t in range(world):
        for r in range(world):
            s = ring_source(r, t, world)
            forward_step(acc[r], take(q, r), take(k, s), take(v, s),
                         block_plan(lay.chunks(r), lay.chunks(s), causal), block_fwd,
                         (whole(q, r), whole(k, r), whole(v, r)), lay.local_lengths(r))
    out, lse = np.zeros_like(q), np.zeros(q.shape[:3])
    for r in range(world):
        for (lo, hi), (o, l) in zip(lay.local_bounds(r), acc[r]):
            out[:, :, lo:hi], lse[:, :, lo:hi] = o, l

    # Backward: the accumulator that starts on rank r belongs to rank r's keys and moves to r + 1 at
    # each step, so at step t rank r holds the one of ring_source(r, t).
    dq = {r: [np.zeros_like(c) for c in take(q, r)] for r in range(world)}
    travelling = {r: ([np.zeros_like(c) for c in take(k, r)], [np.zeros_like(c) for c in take(v, r)])
                  for r in range(world)}  # keyed by the keys' owner
    held = {r: r for r in range(world)}  # rank -> owner of the accumulator it holds
    for t in range(world):
        for r in range(world):
            s = ring_source(r, t, world)
            assert held[r] == s
            dk_s, dv_s = travelling[s]
            backward_step(dq[r], dk_s, dv_s, take(q, r), take(k, s), take(v, s), take(out, r),
                          take(dout, r), take(lse, r), block_plan(lay.chunks(r), lay.chunks(s), causal),
                          block_bwd, tuple(whole(x, r) for x in (q, k, v, out, dout, lse)), lay.local_lengths(r))
        held = {(r + 1) % world: held[r] for r in range(world)}  # pass on
    assert held == {r: r for r in range(world)}  # after R hops every accumulator is home
    dqf, dkf, dvf = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for r in range(world):
        for (lo, hi), a, b, c in zip(lay.local_bounds(r), dq[r], *travelling[r]):
            dqf[:, :, lo:hi], dkf[:, :, lo:hi], dvf[:, :, lo:hi] = a, b, c
    assert bounds[-1][1] == n
    return out, lse, dqf, dkf, dvf


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [37, 48])
def test_fake_ring_matches_full_attention_and_its_gradients(world, causal, n):
    rng = np.random.default_rng(100 * world + n + causal)
    b, h, hkv, d, scale = 2, 4, 2, 8, 0.3
    q, k, v = rng.normal(size=(b, h, n, d)), rng.normal(size=(b, hkv, n, d)), rng.normal(size=(b, hkv, n, d))
    dout = rng.normal(size=(b, h, n, d))
    mask = causal_mask(n, n) if causal else None
    ref_out, ref_lse = attend(q, k, v, scale, mask)
    ref_dq, ref_dk, ref_dv = attend_grads(q, k, v, ref_out, dout, ref_lse, scale, mask)
    out, lse, dq, dk, dv = fake_ring(q, k, v, dout, world, causal, scale)
    for got, ref in ((out, ref_out), (lse, ref_lse), (dq, ref_dq), (dk, ref_dk), (dv, ref_dv)):
        assert np.max(np.abs(got - ref)) <= 1e-12 * max(1.0, np.max(np.abs(ref)))
