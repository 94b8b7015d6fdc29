"""kittens.flash_attn_with_kvcache on CUDA (sm_90a): the cases of ``test_kvcache_cpu`` (contiguous and
paged caches, page size 16 not dividing the lengths, appends, lengths 0 and 1, GQA, causal, NaN in the
stale cache rows) on the GPU, by FlashAttention's rule against float64; plus a decode step at a larger
size, and no host synchronisation once prepared.

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True)

from kittens import flash_attn_with_kvcache  # noqa: E402
from test_kvcache_cpu import CASES, PAGED_CASES, make_case, run_case  # noqa: E402

BIG = [
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, True),
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, 256, 4096, True),
    ([300, 5], 4, 4, 8, 1, 64, 16, 512, True),
]


@pytest.mark.parametrize("case", CASES + PAGED_CASES + BIG)
def test_matches_float64_on_cuda(case):
    e, eb = run_case(case, "cuda")
    print(f"{case}: out rel_err {e:.3e} (bf16 {eb:.3e})")


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
    """The paged path against PyTorch's SDPA on the pages gathered into a dense cache (every sequence
    full, no mask needed): FlashAttention's rule against float64 with SDPA's bfloat16 error as the
    baseline. (On CUDA the paged path gathers too until ``attn_paged`` lowers for sm_90a.)"""
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
