"""kittens.flash_attn_with_kvcache on CPU tensors (the interpreter) against float64 attention over each
sequence's cache rows plus its new keys, by FlashAttention's rule (error at most 2x the plain bfloat16
computation's + 2^-12): a contiguous cache and a paged one (page size 16, not dividing the lengths,
blocks in a shuffled order), cache lengths 0, 1 and odd ones, appends of 1 and 3 keys (checked in the
cache too), GQA, causal bottom-right, the lse; stale cache rows past each length hold NaN and must not
reach the output; bad input names the argument."""

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


def reference(q, logical_k, logical_v, k, v, lens, causal, dtype, scale=None):
    """Per sequence: keys = its first lens[b] cache rows then the new ones; out (b, sq, h, d), lse."""
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
        if causal:
            ii, jj = torch.arange(sq)[:, None], torch.arange(nk)[None, :]
            s = s.masked_fill(jj > ii + nk - sq, float("-inf"))
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


def run_case(case, device, scale=None, num_splits=0):
    lens, sn, sq, h, hk, d, page, cap, causal = case
    q, kc, vc, k, v, seqlens, table, logical, lk, lv = make_case(lens, sn, sq, h, hk, d, page, cap, seed=sum(lens) + sn,
                                                                 device=device)
    out, lse = flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=causal,
                                       softmax_scale=scale, num_splits=num_splits, return_softmax_lse=True)
    qc, kn, vn = q.cpu(), None if k is None else k.cpu(), None if v is None else v.cpu()
    ref, ref_lse = reference(qc, lk, lv, kn, vn, lens, causal, torch.float64, scale)
    base, _ = reference(qc, lk, lv, kn, vn, lens, causal, torch.bfloat16, scale)
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
    with pytest.raises(NotImplementedError, match="softcap"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, softcap=5.0)
    with pytest.raises(ValueError, match="nheads_k"):
        flash_attn_with_kvcache(q[:, :, :1].repeat(1, 1, 3, 1), kc.repeat(1, 1, 2, 1), vc.repeat(1, 1, 2, 1),
                                cache_seqlens=seqlens, block_table=table)


def test_paged_bench_module_imports_and_its_shapes_are_valid():
    """``python -m kittens.bench attn --paged`` (GPU only): its module imports and every shape's cache is whole
    pages of a size the paged path takes."""
    from kittens import bench_paged
    from kittens.kvcache import PAGE_MULTIPLE

    for b, h, hk, cap, page, d in bench_paged.SHAPES:
        assert cap % page == 0 and page % PAGE_MULTIPLE == 0 and h % hk == 0, (b, h, hk, cap, page, d)


def test_opcheck_attention_paged():
    """``kittens::attention_paged`` passes ``torch.library.opcheck`` (schema, fake tensor, dispatch)."""
    from kittens import ops  # noqa: F401  (registers the op)

    q, kc, vc, _, _, seqlens, table, *_ = make_case([5, 20], 0, 2, 2, 1, 64, 16, 32, seed=6)
    torch.library.opcheck(torch.ops.kittens.attention_paged.default, (q, kc, vc, table, seqlens, True, None, 2))
