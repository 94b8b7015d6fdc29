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
from test_kvcache_cpu import CASES, make_case, run_case  # noqa: E402

BIG = [
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, None, 4096, True),
    ([1000, 0, 1, 4095, 2048, 77, 3000, 512], 1, 1, 32, 8, 128, 256, 4096, True),
    ([300, 5], 4, 4, 8, 1, 64, 16, 512, True),
]


@pytest.mark.parametrize("case", CASES + BIG)
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
