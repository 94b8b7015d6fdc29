"""kittens.flash_attn_with_kvcache on CPU tensors (the interpreter) against float64 attention over each
sequence's cache rows plus its new keys, by FlashAttention's rule (error at most 2x the plain bfloat16
computation's + 2^-12): a contiguous cache and a paged one (page size 16, not dividing the lengths,
blocks in a shuffled order), cache lengths 0, 1 and odd ones, appends of 1 and 3 keys (checked in the
cache too), GQA, causal bottom-right, the lse, ALiBi (slopes (nheads,) and (batch, nheads), the bias
aligned bottom-right on each sequence's length after the append), a soft cap and a sliding window (bottom-right:
query i at key position len + i - seqlen_q after the append; windows cutting at and inside pages and key steps,
on contiguous and paged caches); stale cache rows past each length hold NaN and must not reach the output; bad
input names the argument."""

import pytest

torch = pytest.importorskip("torch")

from kittens import flash_attn_with_kvcache  # noqa: E402

FLOOR = 2.0 ** -12


def _rand(*shape, gen, scale=2.0):
    return ((torch.rand(*shape, generator=gen) * 2 - 1) * scale).bfloat16()


def make_case(lens, sn, sq, h, hk, d, page, capacity, seed, device="cpu"):
    """``(q, k_cache, v_cache, k, v, cache_seqlens, block_table, logical)``: ``logical(cache)`` maps a
    cache to its per-sequence (batch, capacity, hk, d) view. Rows past each length hold NaN."""
    g = torch.Generator().manual_seed(seed)
    b = len(lens)
    q = _rand(b, sq, h, d, gen=g)
    k = _rand(b, sn, hk, d, gen=g) if sn else None
    v = _rand(b, sn, hk, d, gen=g, scale=1.0) if sn else None
    logical_k = _rand(b, capacity, hk, d, gen=g)
    logical_v = _rand(b, capacity, hk, d, gen=g, scale=1.0)
    for i, n in enumerate(lens):
        logical_k[i, n:] = float("nan")
        logical_v[i, n:] = float("nan")
    if page is None:
        kc, vc, table = logical_k.clone(), logical_v.clone(), None

        def logical(cache):
            return cache[:b]
    else:
        per = capacity // page
        nblocks = b * per + 3  # spare blocks nobody uses
        perm = torch.randperm(nblocks, generator=g)[: b * per]
        table = perm.reshape(b, per).to(torch.int32)
        kc = torch.zeros(nblocks, page, hk, d, dtype=torch.bfloat16)
        vc = torch.zeros_like(kc)
        kc[table.long()] = logical_k.reshape(b, per, page, hk, d)
        vc[table.long()] = logical_v.reshape(b, per, page, hk, d)

        def logical(cache):
            return cache[table.long().to(cache.device)].reshape(b, capacity, hk, d)
    seqlens = torch.tensor(lens, dtype=torch.int32)
    mv = lambda t: None if t is None else t.to(device)  # noqa: E731
    return (q.to(device), kc.to(device), vc.to(device), mv(k), mv(v), seqlens.to(device), mv(table), logical,
            logical_k, logical_v)


def reference(q, logical_k, logical_v, k, v, lens, causal, dtype, scale=None, slopes=None, softcap=None,
              window=None):
    """Per sequence: keys = its first lens[b] cache rows then the new ones; out (b, sq, h, d), lse. ``slopes``
    (batch, nheads): ALiBi's ``-slope * |i + nk - sq - j|`` on the scaled logits (FlashAttention's rule);
    ``softcap``: ``cap * tanh(logit / cap)`` before the bias (float32 in the bfloat16 baseline); ``window``
    (left, right): keys ``i + nk - sq - left ..= i + nk - sq + right`` kept (-1: unbounded)."""
    b, sq, h, d = q.shape
    hk = logical_k.shape[2]
    outs, lses = [], []
    for i, n in enumerate(lens):
        ks, vs = logical_k[i, :n], logical_v[i, :n]
        if k is not None:
            ks, vs = torch.cat([ks, k[i]]), torch.cat([vs, v[i]])
        ks = ks.to(dtype).transpose(0, 1).repeat_interleave(h // hk, 0)
        vs = vs.to(dtype).transpose(0, 1).repeat_interleave(h // hk, 0)
        qs = q[i].to(dtype).transpose(0, 1)
        nk = ks.shape[1]
        s = (qs @ ks.transpose(1, 2)) * (d ** -0.5 if scale is None else scale)
        ii, jj = torch.arange(sq)[:, None], torch.arange(nk)[None, :]
        if softcap is not None:
            s = softcap * torch.tanh((s.float() if dtype == torch.bfloat16 else s) / softcap)
        if slopes is not None:
            dist = (ii + nk - sq - jj).abs().to(torch.float64)
            bias = -slopes[i].double()[:, None, None] * dist
            s = s + bias.to(torch.float32 if dtype == torch.bfloat16 else s.dtype)
        if causal:
            s = s.masked_fill(jj > ii + nk - sq, float("-inf"))
        if window is not None and window[0] >= 0:
            s = s.masked_fill(jj < ii + nk - sq - window[0], float("-inf"))
        if window is not None and window[1] >= 0:
            s = s.masked_fill(jj > ii + nk - sq + window[1], float("-inf"))
        lses.append(torch.logsumexp(s.double(), -1))
        p = torch.softmax(s.float() if dtype == torch.bfloat16 else s, -1).to(dtype)
        p = torch.nan_to_num(p, nan=0.0)
        outs.append((p @ vs).transpose(0, 1))
    return torch.stack(outs), torch.stack(lses)


def _err(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


CASES = [
    # (lens, seqlen_new, seqlen_q, h, hk, d, page, capacity, causal)
    ([0, 1, 37, 100], 1, 1, 4, 2, 64, None, 130, True),
    ([5, 0, 61], 3, 3, 4, 1, 64, None, 70, True),
    ([50, 17, 1], 0, 2, 2, 2, 128, None, 64, False),
    ([33, 0, 70, 9], 1, 1, 4, 2, 64, 16, 96, True),
    ([20, 47], 3, 4, 2, 1, 128, 16, 64, True),
]


def run_case(case, device, scale=None, num_splits=0, alibi=None, softcap=0.0, window=(-1, -1)):
    """``alibi``: None, ``"h"`` (slopes (nheads,)) or ``"bh"`` ((batch, nheads)), random of either sign;
    ``softcap`` and ``window`` as FlashAttention takes them."""
    lens, sn, sq, h, hk, d, page, cap, causal = case
    q, kc, vc, k, v, seqlens, table, logical, lk, lv = make_case(lens, sn, sq, h, hk, d, page, cap, seed=sum(lens) + sn,
                                                                 device=device)
    slopes = full = None
    if alibi is not None:
        g = torch.Generator().manual_seed(len(lens) + h)
        shape = (h,) if alibi == "h" else (len(lens), h)
        slopes = (torch.rand(*shape, generator=g) - 0.3) * 0.5  # either sign, up to 0.35
        full = slopes.expand(len(lens), h)
        slopes = slopes.to(device)
    out, lse = flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=causal,
                                       softmax_scale=scale, num_splits=num_splits, return_softmax_lse=True,
                                       alibi_slopes=slopes, softcap=softcap, window_size=window)
    qc, kn, vn = q.cpu(), None if k is None else k.cpu(), None if v is None else v.cpu()
    opts = dict(softcap=softcap or None, window=None if tuple(window) == (-1, -1) else window)
    ref, ref_lse = reference(qc, lk, lv, kn, vn, lens, causal, torch.float64, scale, full, **opts)
    base, _ = reference(qc, lk, lv, kn, vn, lens, causal, torch.bfloat16, scale, full, **opts)
    assert torch.isfinite(out).all(), "NaN from stale cache rows reached the output"
    e, eb = _err(out.cpu(), ref), _err(base, ref)
    assert e <= 2 * eb + FLOOR, f"out error {e:.3e}, bf16 baseline {eb:.3e}"
    fin = torch.isfinite(ref_lse)
    got = lse.cpu().double()
    assert torch.equal(torch.isfinite(got), fin)
    assert ((got[fin] - ref_lse[fin]).abs() <= 1e-4 * (1 + ref_lse[fin].abs())).all()
    if sn:  # the new keys landed in the cache after each sequence's rows
        got_k = logical(kc).cpu()
        for i, n in enumerate(lens):
            assert torch.equal(got_k[i, n:n + sn], k[i].cpu()), f"sequence {i}: appended keys"
            assert torch.equal(logical(vc).cpu()[i, n:n + sn], v[i].cpu())
    return e, eb


# The paged kernel (``attn_paged``) reading the pages in place: page sizes 16, 48 and 256 that do not divide
# the lengths 1, 37, 300 and 1000, a shuffled block table, several queries with causal bottom-right.
PAGED_CASES = [
    ([1, 37, 300, 999], 1, 1, 4, 2, 64, 256, 1024, False),
    ([1, 37, 300, 0], 0, 3, 3, 1, 64, 16, 320, True),
    ([37, 100], 2, 2, 4, 4, 128, 48, 144, True),
]


@pytest.mark.parametrize("case", CASES + PAGED_CASES)
def test_matches_float64(case):
    run_case(case, "cpu")


@pytest.mark.parametrize("num_splits", [2, 5])
def test_paged_split_kv_and_scale(num_splits):
    e, eb = run_case(([300, 1, 37, 0], 1, 2, 4, 2, 64, 16, 320, True), "cpu", scale=0.3, num_splits=num_splits)
    assert e <= 2 * eb + FLOOR


# ALiBi on both paths: a dense cache (the varlen kernel with seqused_k) and paged ones (attn_paged), slopes
# (nheads,) and (batch, nheads), appends, causal and not, split-KV.
ALIBI_CASES = [
    (([5, 0, 61], 3, 3, 4, 1, 64, None, 70, True), "h", 0),
    (([50, 17, 1], 0, 2, 2, 2, 128, None, 64, False), "bh", 0),
    (([33, 0, 70, 9], 1, 1, 4, 2, 64, 16, 96, True), "bh", 0),
    (([1, 37, 300, 0], 0, 3, 3, 1, 64, 16, 320, False), "h", 3),
    (([37, 100], 2, 2, 4, 4, 128, 48, 144, True), "bh", 2),
]


@pytest.mark.parametrize("case,alibi,splits", ALIBI_CASES)
def test_alibi_matches_float64(case, alibi, splits):
    run_case(case, "cpu", num_splits=splits, alibi=alibi)


def test_alibi_changes_the_output():
    """The bias reaches the kernel: the same inputs with and without slopes differ beyond the error bound."""
    case = ([33, 0, 70, 9], 1, 1, 4, 2, 64, 16, 96, True)
    outs = []
    for slopes in (None, torch.full((4,), 0.25)):
        q, kc, vc, k, v, seqlens, table, *_ = make_case(*case[:8], seed=3)
        outs.append(flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table,
                                            causal=True, alibi_slopes=slopes).float())
    assert (outs[0] - outs[1]).norm() > 0.1 * outs[0].norm()


@pytest.mark.parametrize("paged", [False, True])
def test_alibi_bad_slopes_name_the_argument(paged):
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 9], 1, 1, 2, 1, 64, 16 if paged else None, 32, seed=1)
    kc0 = kc.clone()
    for bad, what in ((torch.ones(3), "alibi_slopes.*shape"),
                      (torch.ones(2, dtype=torch.float64), "alibi_slopes.*float32"),
                      (torch.tensor([0.5, float("nan")]), "alibi_slopes.*finite"),
                      ([0.5, 0.5], "alibi_slopes")):
        with pytest.raises((ValueError, TypeError), match=what):
            flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, alibi_slopes=bad)
    assert torch.equal(kc.nan_to_num(), kc0.nan_to_num()), "a refused call must not append to the cache"


def test_alibi_fake_refuses_bad_slopes():
    """``kittens::attention_paged``'s fake (torch.compile's trace) refuses the slopes the real op refuses,
    naming ``alibi_slopes``; opcheck passes with good ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kittens import ops  # noqa: F401  (registers the op)

    q, kc, vc, _, _, seqlens, table, *_ = make_case([5, 20], 0, 2, 2, 1, 64, 16, 32, seed=6)
    torch.library.opcheck(torch.ops.kittens.attention_paged.default,
                          (q, kc, vc, table, seqlens, True, None, 2, torch.tensor([0.1, -0.2])))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fq, fk, fv, ft, fs = (mode.from_tensor(t) for t in (q, kc, vc, table, seqlens))
        with pytest.raises(ValueError, match="alibi_slopes.*shape"):
            torch.ops.kittens.attention_paged(fq, fk, fv, ft, fs, True, None, 1, mode.from_tensor(torch.ones(3)))


# A soft cap and a sliding window (FlashAttention's bottom-right rule after the append): contiguous caches (read
# as one page per sequence by the paged kernel) and paged ones with page sizes 16 and 48 that do not divide the
# lengths, GQA, appends, several queries, causal and not; windows whose left edge falls at a page edge (left 47
# at page 48, 15 + the row at page 16), inside a page and past every sequence; with ALiBi and split-KV.
# (case, softcap, window, alibi, num_splits)
CAP_WINDOW_CASES = [
    (([0, 1, 37, 100], 1, 1, 4, 2, 64, None, 112, True), 2.5, (-1, -1), None, 0),
    (([5, 0, 61], 3, 3, 4, 1, 64, None, 80, False), 0.0, (20, 1), None, 0),
    (([33, 0, 70, 9], 1, 1, 4, 2, 64, 16, 96, True), 0.0, (15, 0), None, 0),
    (([1, 37, 300, 0], 0, 3, 3, 1, 64, 16, 320, False), 4.0, (47, -1), None, 3),
    (([37, 100], 2, 2, 4, 4, 128, 48, 144, True), 3.0, (47, 0), "bh", 2),
    (([300, 1, 37], 1, 5, 4, 2, 64, 48, 336, False), 0.0, (-1, 2), "h", 0),
    (([50, 17, 1], 0, 2, 2, 2, 128, None, 64, True), 1.0, (1000, 1000), "bh", 0),
]


@pytest.mark.parametrize("case,softcap,window,alibi,splits", CAP_WINDOW_CASES)
def test_softcap_and_window_match_float64(case, softcap, window, alibi, splits):
    run_case(case, "cpu", num_splits=splits, alibi=alibi, softcap=softcap, window=window)


def test_softcap_and_window_change_the_output():
    """Both reach the kernel: each changes the output beyond the error bound."""
    case = ([33, 0, 70, 9], 1, 1, 4, 2, 64, 16, 96, True)
    outs = []
    for opts in ({}, {"softcap": 0.5}, {"window_size": (8, 0)}):
        q, kc, vc, k, v, seqlens, table, *_ = make_case(*case[:8], seed=3)
        outs.append(flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table,
                                            causal=True, **opts).float())
    for o in outs[1:]:
        assert (outs[0] - o).norm() > 0.1 * outs[0].norm()


def test_contiguous_cache_with_window_refuses_an_odd_capacity():
    q, kc, vc, k, v, seqlens, *_ = make_case([5, 9], 1, 1, 2, 1, 64, None, 30, seed=1)
    with pytest.raises(ValueError, match="seqlen_cache.*multiple of 16, got 30"):
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, window_size=(4, 0))
    with pytest.raises(ValueError, match="seqlen_cache.*multiple of 16, got 30"):
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, softcap=3.0)
    q, kc, vc, _, _, seqlens, *_ = make_case([0, 0], 0, 1, 2, 1, 64, None, 0, seed=1)
    with pytest.raises(ValueError, match="seqlen_cache.*multiple of 16, got 0"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, window_size=(4, 0))


def test_fake_refuses_the_softcap_and_window_the_op_refuses():
    """``kittens::attention_paged``'s fake refuses a soft cap and a window the real op refuses, with the same
    message naming the argument; opcheck passes with good ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kittens import ops  # noqa: F401  (registers the op)

    q, kc, vc, _, _, seqlens, table, *_ = make_case([5, 20], 0, 2, 2, 1, 64, 16, 32, seed=6)
    torch.library.opcheck(torch.ops.kittens.attention_paged.default,
                          (q, kc, vc, table, seqlens, True, None, 2, None, 3.0, [9, 0]))
    for bad, what in (((0.0, None), "softcap"), ((-2.0, None), "softcap"), ((float("nan"), None), "softcap"),
                      ((None, [-2, 0]), "window.*left"), ((None, [3, -5]), "window.*right"),
                      ((None, [1, 2, 3]), "window")):
        with pytest.raises(ValueError, match=what):
            torch.ops.kittens.attention_paged(q, kc, vc, table, seqlens, True, None, 1, None, *bad)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fq, fk, fv, ft, fs = (mode.from_tensor(t) for t in (q, kc, vc, table, seqlens))
            with pytest.raises(ValueError, match=what):
                torch.ops.kittens.attention_paged(fq, fk, fv, ft, fs, True, None, 1, None, *bad)


def test_paged_refuses_a_page_size_the_kernel_cannot_step():
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 9], 1, 1, 2, 1, 64, 8, 32, seed=2)
    with pytest.raises(ValueError, match="page_size.*multiple of 16, got 8"):
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table)


def test_paged_reads_the_cache_in_place(monkeypatch):
    """The paged path calls the ``attention_paged`` op on the cache itself (no gathered copy)."""
    from kittens import ops

    seen = []
    body = ops._BODIES["attention_paged"]

    def spy(q, k_cache, v_cache, *rest):
        seen.append((k_cache.data_ptr(), v_cache.data_ptr()))
        return body(q, k_cache, v_cache, *rest)

    monkeypatch.setitem(ops._BODIES, "attention_paged", spy)
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 20], 1, 1, 2, 1, 64, 16, 32, seed=4)
    flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table)
    assert seen == [(kc.data_ptr(), vc.data_ptr())]


def test_bad_input_names_the_argument():
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 9], 1, 1, 2, 1, 64, 16, 32, seed=1)
    with pytest.raises(ValueError, match="cache_seqlens"):
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=torch.tensor([5, 32], dtype=torch.int32),
                                block_table=table)
    with pytest.raises(ValueError, match="block_table"):
        bad = table.clone()
        bad[1, 0] = kc.shape[0]
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=bad)
    with pytest.raises(ValueError, match="cache_seqlens"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=40, block_table=table)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="softcap"):
            flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, softcap=bad)
    with pytest.raises(ValueError, match=r"window_size.*left.*-2"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, window_size=(-2, 0))
    with pytest.raises(TypeError, match="window_size"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, window_size=4)
    with pytest.raises(ValueError, match="nheads_k"):
        flash_attn_with_kvcache(q[:, :, :1].repeat(1, 1, 3, 1), kc.repeat(1, 1, 2, 1), vc.repeat(1, 1, 2, 1),
                                cache_seqlens=seqlens, block_table=table)


def test_paged_bench_module_imports_and_its_shapes_are_valid():
    """``python -m kittens.bench attn --paged`` (GPU only): its module imports and every shape's cache is whole
    pages of a size the paged path takes; a contiguous one (page None) a capacity the decode route reads as one
    page."""
    from kittens import bench_paged
    from kittens.kvcache import PAGE_MULTIPLE

    for b, h, hk, cap, page, d in bench_paged.SHAPES:
        page = page or cap
        assert cap % page == 0 and page % PAGE_MULTIPLE == 0 and h % hk == 0, (b, h, hk, cap, page, d)


def test_opcheck_attention_paged():
    """``kittens::attention_paged`` passes ``torch.library.opcheck`` (schema, fake tensor, dispatch)."""
    from kittens import ops  # noqa: F401  (registers the op)

    q, kc, vc, _, _, seqlens, table, *_ = make_case([5, 20], 0, 2, 2, 1, 64, 16, 32, seed=6)
    torch.library.opcheck(torch.ops.kittens.attention_paged.default, (q, kc, vc, table, seqlens, True, None, 2))
