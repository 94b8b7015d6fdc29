"""kittens.flash_attn_with_kvcache on CUDA (sm_90a): the cases of ``test_kvcache_cpu`` (contiguous and
paged caches, page sizes 16, 48 and 256 not dividing the lengths, appends, lengths 0 and 1, GQA, causal, NaN
in the stale cache rows) on the GPU, by FlashAttention's rule against float64; the paged ones run the
registry kernel ``attn_paged`` (``kittens_kernels::attn_paged_hopper``) on the cache in place (checked),
with its key blocks of 16, 32, 64 and 128 keys, head dims 64 to 256, split-KV with the merge; a soft cap and a
sliding window (``test_kvcache_cpu``'s cases, then windows cutting inside and at the edges of 128-key and 64-key
steps, on contiguous caches read as one page per sequence and on paged ones); against SDPA on
the gathered cache; plus a decode step at a larger size, no host synchronisation once prepared, and bad
input named.

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True)

from kittens import flash_attn_with_kvcache  # noqa: E402
from test_kvcache_cpu import ALIBI_CASES, CAP_WINDOW_CASES, CASES, PAGED_CASES, make_case, run_case  # noqa: E402

# The sm_90a program's other key blocks and head dims: page 32 (32-key blocks) with 19 causal queries, page
# 64 at head dim 256 (64-key blocks), page 128 at head dim 192 (64), lengths that no page divides.
SM90_CASES = [
    ([300, 20, 0], 0, 19, 4, 2, 128, 32, 320, True),
    ([1000, 1, 0, 77], 1, 1, 8, 2, 256, 64, 1024, False),
    ([129, 5], 2, 3, 6, 3, 192, 128, 256, True),
]

BIG = [
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, True),
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, 256, 4096, True),
    ([300, 5], 4, 4, 8, 1, 64, 16, 512, True),
]


@pytest.mark.parametrize("case", CASES + PAGED_CASES + SM90_CASES + BIG)
def test_matches_float64_on_cuda(case):
    e, eb = run_case(case, "cuda")
    print(f"{case}: out rel_err {e:.3e} (bf16 {eb:.3e})")


# ALiBi on CUDA: the CPU file's cases plus the sm_90a program's wider key blocks (page 32, 256 at D128, 64
# at D256) with split-KV.
SM90_ALIBI_CASES = [
    (([300, 20, 0], 0, 19, 4, 2, 128, 32, 320, True), "bh", 0),
    (([1000, 1, 0, 77], 1, 1, 8, 2, 256, 64, 1024, False), "h", 4),
    (([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, 256, 4096, True), "h", 0),
    (([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, True), "bh", 0),
]


@pytest.mark.parametrize("case,alibi,splits", ALIBI_CASES + SM90_ALIBI_CASES)
def test_alibi_matches_float64_on_cuda(case, alibi, splits):
    e, eb = run_case(case, "cuda", num_splits=splits, alibi=alibi)
    print(f"{case} alibi {alibi} splits {splits}: out rel_err {e:.3e} (bf16 {eb:.3e})")


# The sm_90a program's wider key steps with a soft cap and a window: 128-key steps (page 256, contiguous caches of
# 4096 read as one page each) with windows whose left edge falls mid-step (left 200) and at a step edge (127 +
# the row), a right side only on a contiguous cache, 64-key steps at head dim 256 and 192, 32-key steps with 19
# causal queries, split-KV.
# (case, softcap, window, alibi, num_splits)
SM90_CAP_WINDOW_CASES = [
    (([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, 256, 4096, True), 0.0, (200, 0), None, 0),
    (([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, True), 30.0, (127, 0), None, 0),
    (([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, False), 0.0, (-1, 7), None, 0),
    (([1000, 1, 0, 77], 1, 1, 8, 2, 256, 64, 1024, False), 5.0, (63, 0), "h", 4),
    (([129, 5], 2, 3, 6, 3, 192, 128, 256, True), 2.0, (100, -1), None, 0),
    (([300, 20, 0], 0, 19, 4, 2, 128, 32, 320, True), 3.0, (40, 0), "bh", 3),
    (([4000, 33], 1, 4, 8, 8, 64, 256, 4096, False), 0.0, (300, 5), None, 16),
]


@pytest.mark.parametrize("case,softcap,window,alibi,splits", CAP_WINDOW_CASES + SM90_CAP_WINDOW_CASES)
def test_softcap_and_window_match_float64_on_cuda(case, softcap, window, alibi, splits):
    e, eb = run_case(case, "cuda", num_splits=splits, alibi=alibi, softcap=softcap, window=window)
    print(f"{case} softcap {softcap} window {window} alibi {alibi} splits {splits}: out rel_err {e:.3e} "
          f"(bf16 {eb:.3e})")


def test_no_host_synchronisation():
    q, kc, vc, k, v, seqlens, table, *_ = make_case([30, 7], 1, 1, 4, 2, 64, 16, 64, seed=3, device="cuda")
    flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens + 1, block_table=table, causal=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_paged_matches_sdpa_on_the_gathered_cache():
    """The paged kernel against PyTorch's SDPA on the pages gathered into a dense cache (every sequence
    full, no mask needed): FlashAttention's rule against float64 with SDPA's bfloat16 error as the
    baseline."""
    b, h, hk, d, page, per = 8, 32, 8, 128, 16, 64
    g = torch.Generator().manual_seed(5)
    nblocks = b * per + 5
    table = torch.randperm(nblocks, generator=g)[: b * per].reshape(b, per).to(torch.int32).cuda()
    kc = ((torch.rand(nblocks, page, hk, d, generator=g) * 2 - 1) * 2).bfloat16().cuda()
    vc = (torch.rand(nblocks, page, hk, d, generator=g) * 2 - 1).bfloat16().cuda()
    q = ((torch.rand(b, 1, h, d, generator=g) * 2 - 1) * 2).bfloat16().cuda()
    seqlens = torch.full((b,), per * page, dtype=torch.int32, device="cuda")
    out = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table)
    kd = kc[table.long()].reshape(b, per * page, hk, d).transpose(1, 2).repeat_interleave(h // hk, 1)
    vd = vc[table.long()].reshape(b, per * page, hk, d).transpose(1, 2).repeat_interleave(h // hk, 1)
    qt = q.transpose(1, 2)
    sdpa = torch.nn.functional.scaled_dot_product_attention(qt, kd, vd).transpose(1, 2)
    ref = torch.nn.functional.scaled_dot_product_attention(qt.double(), kd.double(), vd.double()).transpose(1, 2)
    e = ((out.double() - ref).norm() / ref.norm()).item()
    es = ((sdpa.double() - ref).norm() / ref.norm()).item()
    print(f"paged vs f64 {e:.3e}, SDPA vs f64 {es:.3e}")
    assert e <= 2 * es + 2.0 ** -12


@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_paged_split_kv_and_scale_on_cuda(num_splits):
    """Split-KV (the partials in scratch, then the merge) at 1, 3 and 16 parts, any scale, GQA, lengths 0
    and 1 and ones page 16 does not divide."""
    case = ([300, 1, 37, 0, 999], 1, 2, 4, 2, 128, 16, 1024, True)
    run_case(case, "cuda", scale=0.3, num_splits=num_splits)


def test_paged_reads_the_cache_in_place_on_cuda(monkeypatch):
    """On CUDA the paged path calls the ``attention_paged`` op (the registry kernel) on the cache itself:
    no gathered copy."""
    from kittens import ops

    seen = []
    body = ops._BODIES["attention_paged"]

    def spy(q, k_cache, v_cache, *rest):
        seen.append((k_cache.data_ptr(), v_cache.data_ptr(), q.is_cuda))
        return body(q, k_cache, v_cache, *rest)

    monkeypatch.setitem(ops._BODIES, "attention_paged", spy)
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 20], 1, 1, 2, 1, 64, 16, 32, seed=4, device="cuda")
    flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table)
    assert seen == [(kc.data_ptr(), vc.data_ptr(), True)]


def test_paged_bad_input_on_cuda_names_the_argument():
    """What is checked without a device read on CUDA: the page size, the head dim the sm_90a kernel takes,
    the table's dtype and rows. (Entries outside the cache and lengths past the capacity are not checked
    on CUDA: a device read; the kernel clamps them, see kittens.kvcache.)"""
    q, kc, vc, k, v, seqlens, table, *_ = make_case([5, 9], 1, 1, 2, 1, 64, 16, 32, seed=2, device="cuda")
    with pytest.raises(ValueError, match="page_size.*multiple of 16, got 8"):
        flash_attn_with_kvcache(q, kc.reshape(-1, 8, 1, 64), vc.reshape(-1, 8, 1, 64), cache_seqlens=seqlens,
                                block_table=table)
    with pytest.raises(ValueError, match="headdim 96"):
        flash_attn_with_kvcache(q[..., :48].repeat(1, 1, 1, 2), kc[..., :48].repeat(1, 1, 1, 2),
                                vc[..., :48].repeat(1, 1, 1, 2), cache_seqlens=seqlens, block_table=table)
    with pytest.raises(ValueError, match="block_table"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table.long())
    with pytest.raises(ValueError, match="block_table"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table[:1])
