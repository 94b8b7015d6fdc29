"""kittens.flash_attn_varlen_func on CUDA (sm_90a): the forward (also with a soft cap and a sliding window) is
the registry kernel ``attn_varlen`` (``kittens_kernels::attn_varlen_hopper``: offsets and each tile's key walk
read on the device, TMA fills read unclipped, bounds-checked stores), the backward (also with a soft cap and a
sliding window) the registry kernel ``attn_varlen_bwd`` at every head dim (FlashAttention-3's three launches:
D and the zeroed float32 dQ accumulator, the key blocks ``kittens_kernels::attn_varlen_bwd_hopper``, 128 keys
at head dims 64 and 128, 64 at 192 and 256 and at 128 with a soft cap, the dQ conversion); the PyTorch
composition of the same equations (``varlen._backward_torch``) is a second reference.
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

from gpu_rule import rule  # noqa: E402
from kittens import _dispatch, flash_attn_varlen_func  # noqa: E402
from kittens.varlen import _backward_torch  # noqa: E402
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


# -- the backward kernel (attn_varlen_bwd) ----------------------------------------------------------------

BWD_CASES = [
    # (lens_q, lens_k, heads, heads_kv, dim, causal, scale): odd lengths, one past a 128-key block and a
    # 64-query step, empty sequences (both sides, and keys only: rows with no key), GQA and MHA.
    ([1, 129, 0, 300, 64, 77], [1, 129, 0, 300, 64, 200], 4, 2, 64, True, None),
    ([1, 129, 0, 300, 64, 77], [1, 129, 0, 300, 64, 200], 4, 1, 64, False, None),
    ([45, 3, 200, 9, 0, 513], [20, 150, 0, 64, 7, 700], 4, 4, 128, True, None),
    ([45, 3, 200, 9, 0, 513], [20, 150, 0, 64, 7, 700], 6, 2, 128, False, 0.05),
    ([255, 2], [0, 383], 2, 1, 64, True, 0.3),
    # The 64-key blocks: one past a block and a step, an empty sequence, rows with no key.
    ([70, 1, 0, 255, 65], [33, 190, 7, 256, 64], 4, 2, 192, True, None),
    ([130, 17, 0], [300, 1, 65], 2, 2, 256, False, 0.05),
]


def _bwd_ids(c):
    return f"q{c[0]}-k{c[1]}-h{c[2]}/{c[3]}-d{c[4]}-{'causal' if c[5] else 'full'}-s{c[6]}"


def _reference_scaled(q, k, v, lens_q, lens_k, causal, dtype, scale):
    """``test_varlen_cpu._reference`` at any scale (it applies 1/sqrt(d)): q rescaled so that its
    1/sqrt(d) gives ``scale``."""
    if scale is None:
        return _reference(q, k, v, lens_q, lens_k, causal, dtype)
    return _reference(q * (scale * q.shape[2] ** 0.5), k, v, lens_q, lens_k, causal, dtype)


@pytest.mark.parametrize("case", BWD_CASES, ids=[_bwd_ids(c) for c in BWD_CASES])
def test_backward_kernel_matches_float64_and_the_torch_composition(case):
    """dq, dk, dv of the kernel (the op itself, on the kittens forward's out and lse) against float64
    autograd by FlashAttention's rule (relative norm, and gpu_rule's max-abs form), and against the
    PyTorch composition of the same equations (their difference within the rule's bound too)."""
    lens_q, lens_k, h, hk, d, causal, scale = case
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=len(lens_q) * 5 + d + h)
    qc, kc, vc, cq, ck = (t.cuda() for t in (q, k, v, cu_q, cu_k))
    mq, mk = max(lens_q), max(lens_k)
    out, lse = torch.ops.kittens.attention_varlen(qc, kc, vc, cq, ck, mq, mk, causal, scale)
    g = (torch.rand(out.shape, generator=torch.Generator().manual_seed(3)) - 0.5).bfloat16()
    dq, dk, dv = torch.ops.kittens.attention_varlen_backward(g.cuda(), qc, kc, vc, out, lse, cq, ck, mq, mk,
                                                             causal, scale)
    tq, tk, tv = _backward_torch(g.cuda(), qc, kc, vc, out, lse, cq, ck, causal, scale)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    _reference_scaled(q64, k64, v64, lens_q, lens_k, causal, torch.float64, scale).backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference_scaled(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16, scale).backward(g)
    for name, ours, comp, want, bl in (("dq", dq, tq, q64, qb), ("dk", dk, tk, k64, kb), ("dv", dv, tv, v64, vb)):
        assert ours.dtype == torch.bfloat16 and ours.shape == want.shape, (name, ours.dtype, ours.shape)
        ours, comp = ours.cpu(), comp.cpu()
        e, eb, ec = _err(ours, want.grad), _err(bl.grad, want.grad), _err(comp, want.grad)
        print(f"{_bwd_ids(case)}: {name} rel_err {e:.3e} (bf16 {eb:.3e}, torch composition {ec:.3e})")
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"
        rule(ours, want.grad, bl.grad)
        diff = _err(ours, comp.double()) if comp.double().norm() > 0 else ours.double().abs().max().item()
        assert diff <= 2 * eb + FLOOR, f"{name}: kernel vs torch composition {diff:.3e}"


def test_backward_padding_rows_and_no_key_rows_are_zero():
    """Rows after the last sequence get zero gradients (dk, dv never written; dq's accumulator rows
    get nothing), and so do queries that keep no key (an empty key sequence) and keys of a sequence
    with no query."""
    lens_q, lens_k, h, hk, d = [17, 5, 0, 130], [40, 0, 9, 129], 4, 2, 64
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=21)
    pad = 7
    q = torch.cat([q, torch.ones(pad, h, d, dtype=q.dtype)]).cuda()
    k = torch.cat([k, torch.ones(pad, hk, d, dtype=k.dtype)]).cuda()
    v = torch.cat([v, torch.ones(pad, hk, d, dtype=v.dtype)]).cuda()
    cq, ck = cu_q.cuda(), cu_k.cuda()
    out, lse = torch.ops.kittens.attention_varlen(q, k, v, cq, ck, 130, 129, True, None)
    g = torch.ones_like(out)
    dq, dk, dv = torch.ops.kittens.attention_varlen_backward(g, q, k, v, out, lse, cq, ck, 130, 129, True, None)
    rq, rk = sum(lens_q), sum(lens_k)
    for name, t in (("dq", dq[rq:]), ("dk", dk[rk:]), ("dv", dv[rk:]), ("dq of sequence 1 (no key)", dq[17:22]),
                    ("dk of sequence 2 (no query)", dk[40:49]), ("dv of sequence 2 (no query)", dv[40:49])):
        assert torch.isfinite(t).all() and (t == 0).all(), name
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()


def test_backward_no_host_synchronisation_and_compile():
    """Forward and backward with no host synchronisation (sync debug mode "error" once prepared), and
    under torch.compile(fullgraph=True): the same gradients (to the last bits the float32 atomic dQ
    order may change)."""
    lens = [300, 1, 0, 77]
    q, k, v, cu_q, cu_k = (t.cuda() for t in _packed(lens, lens, 4, 2, 64, seed=8))

    def grads(f):
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        out = f(qs, ks, vs, cu_q, cu_k, 300, 300)
        (out.float() * torch.linspace(-1, 1, out.numel(), device="cuda").view(out.shape)).sum().backward()
        return qs.grad, ks.grad, vs.grad

    eager = lambda *a: flash_attn_varlen_func(*a, causal=True)  # noqa: E731
    first = grads(eager)  # prepares (compiles) both directions
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = grads(eager)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    compiled = grads(torch.compile(eager, fullgraph=True))
    for a, b, c in zip(first, again, compiled):
        scale = a.double().abs().max().item()
        assert (a.double() - b.double()).abs().max().item() <= 1e-2 * scale
        assert (a.double() - c.double()).abs().max().item() <= 1e-2 * scale


def test_backward_bad_input_names_the_argument():
    lens = [5, 7]
    q, k, v, cu_q, cu_k = (t.cuda() for t in _packed(lens, lens, 2, 1, 64, seed=2))
    out, lse = torch.ops.kittens.attention_varlen(q, k, v, cu_q, cu_k, 7, 7, False, None)
    args = [out, q, k, v, out, lse, cu_q, cu_k, 7, 7, False, None]
    bad = {
        "lse": (5, lse.double()),
        "cu_seqlens_q": (6, cu_q.long()),
        "grad_out": (0, out[:5]),
    }
    for name, (i, value) in bad.items():
        a = list(args)
        a[i] = value
        with pytest.raises(ValueError, match=name):
            _dispatch.attention_varlen_backward(*a)


ALIBI_CASES = [
    # (lens_q, lens_k, heads, heads_kv, dim, causal): both key blocks of the backward (128 keys at 64 and 128,
    # 64 at 192), lengths across the tiles, an empty sequence, GQA.
    ([1, 129, 0, 300, 77], [1, 129, 0, 300, 200], 4, 2, 64, True),
    ([45, 3, 200, 9, 0], [20, 150, 0, 64, 7], 4, 4, 128, False),
    ([70, 1, 255], [33, 190, 256], 2, 1, 192, True),
]


@pytest.mark.parametrize("case", ALIBI_CASES, ids=[_ids(c) for c in ALIBI_CASES])
def test_alibi_forward_and_backward_match_float64(case):
    """flash_attn_varlen_func with ``alibi_slopes`` (batch, nheads), slopes of both signs, against the
    float64 reference that adds −slope·|i + len_k − len_q − j| (``test_varlen_cpu._reference``):
    output and gradients by the rule; the backward kernel against the torch composition with the same
    slopes too."""
    lens_q, lens_k, h, hk, d, causal = case
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=len(lens_q) * 3 + d)
    slopes = (torch.rand(len(lens_q), h, generator=torch.Generator().manual_seed(5)) - 0.3) * 0.5
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    cq, ck, sc = cu_q.cuda(), cu_k.cuda(), slopes.cuda()
    mq, mk = max(lens_q), max(lens_k)
    out = flash_attn_varlen_func(qc, kc, vc, cq, ck, mq, mk, causal=causal, alibi_slopes=sc)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64, slopes.double())
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16, slopes)
    e, eb = _err(out.detach().cpu(), ref.detach()), _err(base, ref.detach())
    print(f"alibi {case}: out rel_err {e:.3e} (bf16 {eb:.3e})")
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(7)).bfloat16() - 0.5
    out.backward(g.cuda())
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16, slopes).backward(g)
    o2, lse = torch.ops.kittens.attention_varlen(qc.detach(), kc.detach(), vc.detach(), cq, ck, mq, mk, causal,
                                                 None, None, sc)
    comp = _backward_torch(g.cuda(), qc.detach(), kc.detach(), vc.detach(), o2, lse, cq, ck, causal, None,
                           alibi=sc)
    for name, ours, c, want, bl in (("dq", qc, comp[0], q64, qb), ("dk", kc, comp[1], k64, kb),
                                    ("dv", vc, comp[2], v64, vb)):
        e, eb, ec = _err(ours.grad.cpu(), want.grad), _err(bl.grad, want.grad), _err(c.cpu(), want.grad)
        print(f"alibi {case}: {name} rel_err {e:.3e} (bf16 {eb:.3e}, torch composition {ec:.3e})")
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"
        assert ec <= 2 * eb + FLOOR, f"{name} (torch composition) error {ec:.3e}, bf16 baseline {eb:.3e}"


OPTION_CASES = [
    # (lens_q, lens_k, heads, heads_kv, dim, causal, softcap, window): windows narrower than a 128-key block,
    # cutting inside blocks on both sides, wider than the sequences, rows that keep no key, lengths across
    # the 128-row tiles, every head dim.
    ([1, 129, 0, 300, 1000], [1, 129, 0, 300, 1000], 4, 2, 64, True, 5.0, (-1, -1)),
    ([45, 3, 200, 9, 513], [20, 150, 0, 64, 700], 4, 1, 128, False, None, (70, 10)),
    ([300, 1000], [260, 1000], 4, 2, 128, True, 30.0, (130, -1)),
    ([70, 1, 255], [33, 190, 256], 2, 1, 192, False, 2.0, (0, 140)),
    ([130, 17], [300, 1], 2, 2, 256, True, None, (5, 0)),
]


@pytest.mark.parametrize("case", OPTION_CASES, ids=[f"opt{i}" for i in range(len(OPTION_CASES))])
def test_softcap_and_window_forward_and_backward_match_float64(case):
    """flash_attn_varlen_func(softcap=, window_size=) on the sm_90a programs (the forward's window key blocks
    only walked, the masks where a block reaches them; the backward's key blocks masking every step)
    against the float64 reference with the same options (``test_varlen_cpu._reference``), by the rule:
    the output and, through autograd, dq, dk, dv (also by gpu_rule's max-abs form)."""
    lens_q, lens_k, h, hk, d, causal, cap, window = case
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, h, hk, d, seed=len(lens_q) * 5 + d)
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    out = flash_attn_varlen_func(qc, kc, vc, cu_q.cuda(), cu_k.cuda(), max(lens_q), max(lens_k),
                                 causal=causal, softcap=cap or 0.0, window_size=window)
    opts = dict(softcap=cap, window=window)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref = _reference(q64, k64, v64, lens_q, lens_k, causal, torch.float64, **opts)
    base = _reference(q, k, v, lens_q, lens_k, causal, torch.bfloat16, **opts)
    e, eb = _err(out.detach().cpu(), ref.detach()), _err(base, ref.detach())
    print(f"options {case}: out rel_err {e:.3e} (bf16 {eb:.3e})")
    assert e <= 2 * eb + FLOOR, f"output error {e:.3e}, bf16 baseline {eb:.3e}"
    g = torch.rand(out.shape, generator=torch.Generator().manual_seed(7)).bfloat16() - 0.5
    out.backward(g.cuda())
    ref.backward(g.double())
    qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
    _reference(qb, kb, vb, lens_q, lens_k, causal, torch.bfloat16, **opts).backward(g)
    for name, ours, want, bl in (("dq", qc, q64, qb), ("dk", kc, k64, kb), ("dv", vc, v64, vb)):
        e, eb = _err(ours.grad.cpu(), want.grad), _err(bl.grad, want.grad)
        print(f"options {case}: {name} rel_err {e:.3e} (bf16 {eb:.3e})")
        assert e <= 2 * eb + FLOOR, f"{name} error {e:.3e}, bf16 baseline {eb:.3e}"
        rule(ours.grad.cpu(), want.grad, bl.grad)
