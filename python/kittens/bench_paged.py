"""``python -m kittens.bench attn --paged``: decoding against a paged KV cache, ``kittens.flash_attn_with_kvcache``
with a ``block_table`` (one new query per sequence, GQA, cache lengths up to the capacity) against PyTorch's SDPA
on the same keys already gathered into a dense cache: the gather is NOT timed for SDPA (it is made once, before
the timing; the "SDPA+gather" column times the gather too, what a caller without a paged kernel pays), while ours
is timed from the paged cache, everything it does included. On CUDA ours is the registry kernel ``attn_paged``
(the sm_90a program ``kittens_kernels::attn_paged_hopper``) reading the pages in place: each row checks, on one
untimed call, that the ``attention_paged`` op ran on the cache itself (column "in place"). Each row is checked
against float64 by FlashAttention's rule (SDPA's bfloat16 error as the baseline). Bandwidth: the bytes of K and V
read once. A contiguous cache (page "None" in ``SHAPES``) is called without a block table: decoding reads it with
the paged kernel as one page per sequence (``kittens.kvcache``), which "in place" checks too."""

from __future__ import annotations

from typing import List

from .bench_timing import FLOOR, _rel, time_many

# (batch, heads, heads_kv, capacity, page_size or None for a contiguous cache (batch, capacity, heads_kv, d),
# head dim): decoding at batch 1-16, GQA 32/8 and MHA 32/32, caches of 1k-32k keys, pages of 256 (and 16).
SHAPES = [(1, 32, 8, 1024, 256, 128), (1, 32, 8, 32768, 256, 128), (4, 32, 8, 8192, 256, 128),
          (8, 32, 8, 4096, 256, 128), (16, 32, 8, 16384, 256, 128), (1, 32, 32, 8192, 256, 128),
          (8, 32, 32, 4096, 256, 128), (16, 32, 32, 1024, 256, 128), (8, 32, 8, 4096, 16, 128),
          (1, 32, 8, 32768, None, 128), (8, 32, 8, 4096, None, 128), (8, 32, 32, 4096, None, 128)]


def bench_paged(torch, kittens, args, shapes=None) -> List[dict]:
    F = torch.nn.functional
    rows = []
    for b, h, hk, cap, page, d in shapes or SHAPES:
        g = torch.Generator(device="cuda").manual_seed(cap + b)
        per = cap // (page or cap)
        nblocks = b * per
        table = torch.randperm(nblocks, device="cuda", generator=g).reshape(b, per).to(torch.int32)
        kc = torch.randn(nblocks, page or cap, hk, d, device="cuda", generator=g).to(torch.bfloat16)
        vc = torch.randn(nblocks, page or cap, hk, d, device="cuda", generator=g).to(torch.bfloat16)
        q = torch.randn(b, 1, h, d, device="cuda", generator=g).to(torch.bfloat16)
        seqlens = torch.full((b,), cap, dtype=torch.int32, device="cuda")
        if page is None:  # contiguous: sequence i is row i of the cache
            table = torch.arange(b, device="cuda", dtype=torch.int32)[:, None]
        kd = kc[table.long()].reshape(b, cap, hk, d).transpose(1, 2)  # gathered once, outside the timing
        vd = vc[table.long()].reshape(b, cap, hk, d).transpose(1, 2)
        qt = q.transpose(1, 2)
        gqa = {"enable_gqa": True} if hk != h else {}
        paged = {} if page is None else {"block_table": table}

        def ours(i, q=q, kc=kc, vc=vc, seqlens=seqlens, paged=paged):
            return kittens.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, **paged)

        def sdpa(i, qt=qt, kd=kd, vd=vd, gqa=gqa):
            return F.scaled_dot_product_attention(qt, kd, vd, **gqa)

        def sdpa_gather(i, qt=qt, kc=kc, vc=vc, table=table, gqa=gqa, shape=(b, cap, hk, d)):
            kg = kc[table.long()].reshape(shape).transpose(1, 2)
            vg = vc[table.long()].reshape(shape).transpose(1, 2)
            return F.scaled_dot_product_attention(qt, kg, vg, **gqa)

        in_place = _runs_in_place(ours, kc, vc)
        fns = {"ours": ours, "sdpa": sdpa}
        if page is not None:
            fns["sdpa_gather"] = sdpa_gather
        t = time_many(torch, fns, 1, args.warmup, args.iters, args.timing)
        rep = h // hk
        ref = F.scaled_dot_product_attention(qt.double(), kd.double().repeat_interleave(rep, 1),
                                             vd.double().repeat_interleave(rep, 1)).transpose(1, 2)
        e_ours, e_sdpa = _rel(ours(0), ref), _rel(sdpa(0).transpose(1, 2), ref)
        gb = 2 * b * cap * hk * d * 2 / 1e9
        cache = "contiguous" if page is None else f"page {page}"
        rows.append({"shape": f"decode B{b} H{h}/{hk} cache {cap} {cache} D{d}", "ours_ms": t["ours"],
                     "sdpa_ms": t["sdpa"], "sdpa_gather_ms": t.get("sdpa_gather", float("nan")),
                     "in_place": in_place, "ratio": t["sdpa"] / t["ours"], "ours_gbs": gb / t["ours"] * 1e3,
                     "sdpa_gbs": gb / t["sdpa"] * 1e3, "rel_err_ours": e_ours, "rel_err_sdpa": e_sdpa,
                     "passed": e_ours <= 2 * e_sdpa + FLOOR and in_place})
        del kc, vc, kd, vd
    return rows


def _runs_in_place(ours, kc, vc) -> bool:
    """Whether one call of ``ours`` runs the ``attention_paged`` op on the caches themselves (no gathered
    copy): the op's body is wrapped for that call only."""
    from . import ops

    seen = []
    body = ops._BODIES["attention_paged"]

    def spy(q, k_cache, v_cache, *rest):
        seen.append(k_cache.data_ptr() == kc.data_ptr() and v_cache.data_ptr() == vc.data_ptr())
        return body(q, k_cache, v_cache, *rest)

    ops._BODIES["attention_paged"] = spy
    try:
        ours(0)
    finally:
        ops._BODIES["attention_paged"] = body
    return seen == [True]


def main_paged(torch, kittens, args) -> int:
    rows = bench_paged(torch, kittens, args)
    print(f"{torch.cuda.get_device_name()}: paged decode vs SDPA on the gathered cache (gather not timed for "
          f"SDPA), median of {args.iters}")
    print(f"{'shape':<52} {'ours ms':>8} {'SDPA ms':>8} {'+gather':>8} {'SDPA/ours':>9} {'ours GB/s':>9} "
          f"{'in place':>8}  check")
    for r in rows:
        print(f"{r['shape']:<52} {r['ours_ms']:8.3f} {r['sdpa_ms']:8.3f} {r['sdpa_gather_ms']:8.3f} "
              f"{r['ratio']:9.3f} {r['ours_gbs']:9.0f} {str(r['in_place']):>8}  "
              f"{'ok' if r['passed'] else 'FAILED'}: err {r['rel_err_ours']:.2e} vs SDPA {r['rel_err_sdpa']:.2e}")
    return 0 if all(r["passed"] for r in rows) else 1
