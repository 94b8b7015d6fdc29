"""kittens.flash_attn_varlen_func on CUDA (sm_90a): the forward is the registry kernel ``attn_varlen``
(``kittens_kernels::attn_varlen_hopper``: offsets read on the device, cp.async fills clipped at each
sequence's end, bounds-checked stores), the backward a PyTorch composition (``varlen._backward_torch``).
Judged by FlashAttention's rule against float64 per-sequence attention (``test_varlen_cpu._reference``):
our error at most twice the plain bf16 computation's plus 2^-12, at lengths 0, 1, one past a 128-row
block and longer, q and k lengths that differ (rows with no key), GQA, causal bottom-right, head dims
64-256; padding rows after the last sequence never written; no host synchronisation (sync debug mode
"error"); torch.compile(fullgraph=True).

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True)

from kittens import _dispatch, flash_attn_varlen_func  # noqa: E402
from test_varlen_cpu import FLOOR, _err, _packed, _reference  # noqa: E402

CASES = [
    # (lens_q, lens_k, heads, heads_kv, dim, causal)
    ([1, 129, 0, 300, 64, 1000], [1, 129, 0, 300, 64, 1000], 4, 2, 64, True),
    ([1, 129, 0, 300, 64, 1000], [1, 129, 0, 300, 64, 1000], 4, 2, 64, False),
    ([45, 3, 200, 9, 0, 513], [20, 150, 0, 64, 7, 700], 4, 1, 128, True),
    ([45, 3, 200, 9, 0, 513], [20, 150, 0, 64, 7, 700], 4, 4, 128, False),
    ([70, 1, 255], [33, 190, 256], 2, 1, 192, True),
    ([130, 17], [300, 1], 2, 2, 256, False),
]


def _ids(c):
    return f"q{c[0]}-k{c[1]}-h{c[2]}/{c[3]}-d{c[4]}-{'causal' if c[5] else 'full'}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_forward_and_backward_match_float64(case):
    lens_q, lens_k, h, hk, d, causal = case
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=len(lens_q) * 7 + d)
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    out = flash_attn_varlen_func(qc, kc, vc, cu_q.cuda(), cu_k.cuda(), max(lens_q), max(lens_k), causal=causal)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64)
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16)
    e, eb = _err(out.cpu(), ref.detach()), _err(base, ref.detach())
    print(f"{_ids(case)}: out rel_err {e:.3e} (bf16 {eb:.3e})")
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(7)).bfloat16() - 0.5
    out.backward(g.cuda())
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16).backward(g)
    for name, ours, want, bl in (("dq", qc, q64, qb), ("dk", kc, k64, kb), ("dv", vc, v64, vb)):
        e, eb = _err(ours.grad.cpu(), want.grad), _err(bl.grad, want.grad)
        print(f"{_ids(case)}: {name} rel_err {e:.3e} (bf16 {eb:.3e})")
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"


def test_lse_and_padding_rows():
    """The log-sum-exp against float64 (−inf where a query keeps no key), and rows after the last
    sequence (padding) keep the sentinel the caller put there: never written."""
    lens_q, lens_k, h, hk, d = [17, 0, 130, 5], [40, 9, 0, 129], 4, 2, 64
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=11)
    pad = 5
    q = torch.cat([q, torch.ones(pad, h, d, dtype=q.dtype)])
    k = torch.cat([k, torch.ones(pad, hk, d, dtype=k.dtype)])
    v = torch.cat([v, torch.ones(pad, hk, d, dtype=v.dtype)])
    sentinel = 12288.0
    out = torch.full(q.shape, sentinel, dtype=torch.bfloat16, device="cuda")
    lse = torch.full((h, q.shape[0]), sentinel, dtype=torch.float32, device="cuda")
    _dispatch.attention_varlen(q.cuda(), k.cuda(), v.cuda(), cu_q.cuda(), cu_k.cuda(), max(lens_q), max(lens_k),
                               True, None, out=out, lse=lse)
    real = sum(lens_q)
    assert (out[real:] == sentinel).all(), "o written past the last sequence"
    assert (lse[:, real:] == sentinel).all(), "lse written past the last sequence"
    oq = ok = 0
    for lq, lk in zip(lens_q, lens_k):
        for hh in range(h):
            s = (q[oq:oq + lq, hh].double() @ k[ok:ok + lk, hh // (h // hk)].double().T) / d ** 0.5
            i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
            s = s.masked_fill(j > i + lk - lq, float("-inf"))
            want = torch.logsumexp(s, dim=-1) if lk else torch.full((lq,), float("-inf"), dtype=torch.float64)
            got = lse[hh, oq:oq + lq].cpu().double()
            fin = torch.isfinite(want)
            assert torch.equal(torch.isfinite(got), fin), f"lse -inf rows differ (seq at {oq}, head {hh})"
            assert ((got[fin] - want[fin]).abs() <= 1e-4 * (1 + want[fin].abs())).all()
        oq, ok = oq + lq, ok + lk


def test_no_host_synchronisation_and_compile():
    lens = [300, 1, 0, 77]
    q, k, v, cu_q, cu_k = (t.cuda() for t in _packed(lens, lens, 2, 1, 64, seed=5))
    first = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 300, causal=True)  # prepares (compiles)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 300, causal=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(first, again)
    f = torch.compile(lambda *a: flash_attn_varlen_func(*a, causal=True), fullgraph=True)
    assert torch.equal(f(q, k, v, cu_q, cu_k, 300, 300), first)


def test_bad_input_names_the_argument():
    q, k, v, cu_q, cu_k = (t.cuda() for t in _packed([5, 7], [5, 7], 2, 1, 64, seed=1))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        flash_attn_varlen_func(q, k, v, cu_q.long(), cu_k, 7, 7)
    with pytest.raises(ValueError, match="head dim 32"):
        q32, k32 = q[..., :32].contiguous(), k[..., :32].contiguous()
        flash_attn_varlen_func(q32, k32, k32, cu_q, cu_k, 7, 7)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k.cpu(), 7, 7)
