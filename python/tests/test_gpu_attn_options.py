"""FlashAttention's options on CUDA (sm_90a) through ``kittens.flash_attn.flash_attn_func``: the
backward with a soft cap and a sliding window (the Hopper launches), checked by FlashAttention's rule
against the float64 reference of ``test_flash_attn_cpu`` (our error at most twice the plain bf16
computation's plus a floor); and ``deterministic=True``: two backward runs bit-equal at head dims 128,
192 and 256, where the default form adds dQ with float32 atomics; ALiBi (`alibi_slopes`) forward and backward against
float64 and against SDPA given the bias as `attn_mask`, new slope values without a recompile, bad slopes
refused by name.

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True)

from kittens.flash_attn import flash_attn_func  # noqa: E402
from test_flash_attn_cpu import FLOOR, rand, reference, rel_err  # noqa: E402

CASES = [
    # (nq, nk, h, hk, d, input scale, kwargs)
    (333, 333, 4, 2, 64, 4.0, dict(softcap=5.0)),
    (300, 417, 4, 2, 128, 4.0, dict(softcap=5.0, causal=True)),
    (1000, 1000, 4, 4, 128, 2.0, dict(window_size=(128, 0))),
    (700, 513, 4, 1, 64, 2.0, dict(window_size=(100, 37))),
    (555, 777, 2, 1, 128, 4.0, dict(window_size=(90, 20), softmax_scale=0.1, softcap=5.0, causal=True)),
    # Head dims 192 and 256 (the atomic form by default, the two launches with `deterministic=True`)
    (301, 245, 4, 2, 192, 2.0, dict(causal=True)),
    (245, 301, 4, 1, 256, 2.0, dict(causal=True)),
    (333, 333, 2, 2, 256, 4.0, dict(softcap=5.0)),
    (555, 777, 4, 2, 192, 4.0, dict(window_size=(90, 20), softmax_scale=0.1, softcap=5.0, causal=True)),
    (700, 513, 2, 1, 256, 2.0, dict(window_size=(100, 37))),
]


def _ids(c):
    return f"q{c[0]}k{c[1]}h{c[2]}/{c[3]}d{c[4]}-" + "-".join(f"{k}={v}" for k, v in c[6].items())


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_backward_with_options_matches_float64(case, deterministic):
    nq, nk, h, hk, d, scale, kw = case
    g = torch.Generator().manual_seed(nq * 1000 + nk)
    q, k, v = (rand(1, n, hh, d, gen=g, scale=scale) for n, hh in ((nq, h), (nk, hk), (nk, hk)))
    do = rand(1, nq, h, d, gen=g)
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    out = flash_attn_func(qc, kc, vc, deterministic=deterministic, **kw)
    ours = (out, *torch.autograd.grad(out, (qc, kc, vc), do.cuda()))

    def run(dtype):
        qq, kk, vv = (t.to(dtype).requires_grad_() for t in (q, k, v))
        oo = reference(qq, kk, vv, **kw)
        return (oo, *torch.autograd.grad(oo, (qq, kk, vv), do.to(dtype)))

    exact, base = run(torch.float64), run(torch.bfloat16)
    for name, x, b, r in zip(("out", "dq", "dk", "dv"), ours, base, exact):
        err, bound = rel_err(x.cpu(), r), 2 * rel_err(b, r) + FLOOR
        assert err <= bound, f"{name}: {err:.3e} over 2 x bf16's {rel_err(b, r):.3e} + {FLOOR}"


@pytest.mark.parametrize("d,kw", [(128, {}), (128, dict(causal=True)), (64, dict(window_size=(64, 0))),
                                  (256, dict(causal=True)), (192, {})])
def test_deterministic_backward_is_bit_equal(d, kw):
    """Two backward runs with ``deterministic=True`` agree bit for bit (dQ from the query blocks' own
    pass, not the atomic adds the default form takes at head dim 128)."""
    g = torch.Generator().manual_seed(d)
    q, k, v, do = (rand(2, 1500, 8, d, gen=g, scale=2.0).cuda() for _ in range(4))

    def grads():
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = flash_attn_func(qq, kk, vv, deterministic=True, **kw)
        return torch.autograd.grad(out, (qq, kk, vv), do)

    first = grads()
    for _ in range(3):
        again = grads()
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), f"{name}: {int((a != b).sum())} elements differ between runs"


@pytest.mark.parametrize("d", [192, 256])
@pytest.mark.parametrize("kw", [{}, dict(causal=True), dict(softcap=5.0, window_size=(100, 0))], ids=str)
def test_forward_head_dims_192_and_256(d, kw):
    """The Hopper forward at head dims 192 and 256 (64-key blocks) against float64, and the deterministic
    (two-launch) backward there, which takes these dims since a0b13cf: dq against float64 (the default
    backward at these dims: the CASES above)."""
    g = torch.Generator().manual_seed(d)
    q, k, v = (rand(2, n, hh, d, gen=g, scale=2.0) for n, hh in ((333, 4), (301, 2), (301, 2)))
    out = flash_attn_func(q.cuda(), k.cuda(), v.cuda(), **kw).cpu()
    exact = reference(*(t.double() for t in (q, k, v)), **kw)
    base = reference(q, k, v, **kw)
    err, bound = rel_err(out, exact), 2 * rel_err(base, exact) + FLOOR
    assert err <= bound, f"{err:.3e} over 2 x bf16's {rel_err(base, exact):.3e} + {FLOOR}"
    dout = rand(*out.shape, gen=g)
    qc = q.cuda().requires_grad_()
    flash_attn_func(qc, k.cuda(), v.cuda(), deterministic=True, **kw).backward(dout.cuda())
    grads = []
    for t in (q.double(), q):
        t = t.clone().requires_grad_()
        reference(t, *(x.to(t.dtype) for x in (k, v)), **kw).backward(dout.to(t.dtype))
        grads.append(t.grad)
    err, bound = rel_err(qc.grad.cpu(), grads[0]), 2 * rel_err(grads[1], grads[0]) + FLOOR
    assert err <= bound, f"dq {err:.3e} over 2 x bf16's {rel_err(grads[1], grads[0]):.3e} + {FLOOR}"


def test_deterministic_must_be_a_bool():
    q = torch.zeros(1, 8, 1, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="deterministic"):
        flash_attn_func(q, q, q, deterministic=1)


ALIBI_CASES = [
    # (b, nq, nk, h, hk, d, input scale, slopes shape, kwargs)
    (2, 333, 333, 4, 2, 64, 2.0, "h", {}),
    (2, 300, 417, 4, 2, 128, 2.0, "bh", dict(causal=True)),
    (1, 1000, 1000, 4, 4, 128, 2.0, "h", dict(window_size=(128, 0))),
    (2, 555, 777, 2, 1, 64, 4.0, "bh", dict(window_size=(90, 20), softmax_scale=0.1, softcap=5.0, causal=True)),
]


def _slopes(kind, b, h, gen):
    """ALiBi's geometric slopes (Press et al.: 2^(-8i/H)) for "h"; fresh ones of both signs for "bh"."""
    if kind == "h":
        return torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float32)
    return (torch.rand(b, h, generator=gen) * 2 - 1) * 0.5


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("case", ALIBI_CASES, ids=[f"b{c[0]}q{c[1]}k{c[2]}h{c[3]}/{c[4]}d{c[5]}-{c[7]}-{c[8]}"
                                                   for c in ALIBI_CASES])
def test_alibi_forward_and_backward_match_float64(case, deterministic):
    """ALiBi (``alibi_slopes``, read by the kernels from the tensor) forward and backward against the
    float64 reference of FlashAttention's bias, by FlashAttention's rule."""
    b, nq, nk, h, hk, d, scale, kind, kw = case
    g = torch.Generator().manual_seed(nq * 1000 + nk + 7)
    q, k, v = (rand(b, n, hh, d, gen=g, scale=scale) for n, hh in ((nq, h), (nk, hk), (nk, hk)))
    do = rand(b, nq, h, d, gen=g)
    slopes = _slopes(kind, b, h, g)
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    out = flash_attn_func(qc, kc, vc, deterministic=deterministic, alibi_slopes=slopes.cuda(), **kw)
    ours = (out, *torch.autograd.grad(out, (qc, kc, vc), do.cuda()))

    def run(dtype):
        qq, kk, vv = (t.to(dtype).requires_grad_() for t in (q, k, v))
        oo = reference(qq, kk, vv, alibi_slopes=slopes, **kw)
        return (oo, *torch.autograd.grad(oo, (qq, kk, vv), do.to(dtype)))

    exact, base = run(torch.float64), run(torch.bfloat16)
    for name, x, bb, r in zip(("out", "dq", "dk", "dv"), ours, base, exact):
        err, bound = rel_err(x.cpu(), r), 2 * rel_err(bb, r) + FLOOR
        assert err <= bound, f"{name}: {err:.3e} over 2 x bf16's {rel_err(bb, r):.3e} + {FLOOR}"


@pytest.mark.parametrize("d", [64, 128])
def test_alibi_matches_sdpa_with_the_bias_as_attn_mask(d):
    """The forward against PyTorch's SDPA given ALiBi's bias as a float32 ``attn_mask`` (the baseline row
    of ``python -m kittens.bench attn --opts``), both against float64."""
    import torch.nn.functional as F

    b, h, n = 2, 8, 1024
    g = torch.Generator().manual_seed(d)
    q, k, v = (rand(b, h, n, d, gen=g, scale=2.0).cuda() for _ in range(3))
    slopes = _slopes("h", b, h, g).cuda()
    i = torch.arange(n, device="cuda").view(-1, 1)
    j = torch.arange(n, device="cuda").view(1, -1)
    bias = -slopes.view(1, h, 1, 1) * (i - j).abs().float()
    import kittens

    ours = kittens.attention(q, k, v, alibi_slopes=slopes)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(torch.bfloat16))
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double())
    err_ours, err_sdpa = rel_err(ours, exact), rel_err(sdpa, exact)
    assert err_ours <= 2 * err_sdpa + FLOOR, f"{err_ours:.3e} vs SDPA's {err_sdpa:.3e}"


def test_alibi_slopes_any_values_without_recompiling():
    """New slope values run the same compiled kernel: the slopes are read from the tensor."""
    from kittens import _dispatch

    g = torch.Generator().manual_seed(5)
    q, k, v = (rand(1, 256, 4, 64, gen=g).cuda() for _ in range(3))
    flash_attn_func(q, k, v, alibi_slopes=torch.full((4,), 0.5, device="cuda"))
    n = len(_dispatch._HANDLES)
    for s in (0.0, 0.25, -1.0, 3.0):
        out = flash_attn_func(q, k, v, alibi_slopes=torch.full((4,), s, device="cuda"))
        r = reference(q.cpu().double(), k.cpu().double(), v.cpu().double(), alibi_slopes=torch.full((4,), s))
        assert rel_err(out.cpu(), r) < 2e-2, s
    assert len(_dispatch._HANDLES) == n, "a slope value compiled a kernel of its own"


@pytest.mark.parametrize(
    "slopes, err",
    [
        (lambda: torch.zeros(3, device="cuda"), ValueError),
        (lambda: torch.zeros(4, dtype=torch.float16, device="cuda"), ValueError),
        (lambda: torch.zeros(4), ValueError),  # on the CPU, q on CUDA
        (lambda: torch.zeros(3, 4, device="cuda"), ValueError),
    ],
)
def test_bad_alibi_slopes_are_refused_by_name(slopes, err):
    g = torch.Generator().manual_seed(3)
    q, k, v = (rand(1, 64, 4, 64, gen=g).cuda() for _ in range(3))
    with pytest.raises(err, match="alibi_slopes"):
        flash_attn_func(q, k, v, alibi_slopes=slopes())


@pytest.mark.parametrize("d", [32, 96])
@pytest.mark.parametrize("kw", [{}, dict(causal=True), dict(softcap=5.0, window_size=(100, 0))], ids=str)
def test_forward_head_dims_32_and_96(d, kw):
    """The Hopper forward at head dims 32 and 96 (tiles padded to 64 and 128 columns) against float64;
    at 96 the backward too (both forms)."""
    g = torch.Generator().manual_seed(d + 1)
    q, k, v = (rand(2, n, 4, d, gen=g, scale=2.0) for n in (700, 555, 555))
    do = rand(2, 700, 4, d, gen=g)
    for deterministic in ([False, True] if d == 96 else [False]):
        qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
        out = flash_attn_func(qc, kc, vc, deterministic=deterministic, **kw)
        ours = (out,) + (torch.autograd.grad(out, (qc, kc, vc), do.cuda()) if d == 96 else ())

        def run(dtype):
            qq, kk, vv = (t.to(dtype).requires_grad_() for t in (q, k, v))
            oo = reference(qq, kk, vv, **kw)
            return (oo, *torch.autograd.grad(oo, (qq, kk, vv), do.to(dtype)))

        exact, base = run(torch.float64), run(torch.bfloat16)
        for name, x, b, r in zip(("out", "dq", "dk", "dv"), ours, base, exact):
            err, bound = rel_err(x.cpu(), r), 2 * rel_err(b, r) + FLOOR
            assert err <= bound, f"{name}: {err:.3e} over 2 x bf16's {rel_err(b, r):.3e} + {FLOOR}"


@pytest.mark.parametrize("nq,nk,kw", [
    (1000, 1000, dict(window_size=(256, 0), causal=True)),
    (777, 777, dict(window_size=(100, 37))),
    (555, 700, dict(window_size=(64, 64))),
    (700, 555, dict(window_size=(1, 0), causal=True)),
    (333, 333, dict(window_size=(-1, 40))),
], ids=str)
def test_window_forward_at_head_dim_64(nq, nk, kw):
    """The Hopper forward at head dim 64 with a window, against float64: windows whose edges fall off the
    64-key edges, lengths no multiple of 64, more queries than keys."""
    g = torch.Generator().manual_seed(nq + nk)
    q, k, v = rand(2, nq, 4, 64, gen=g, scale=2.0), rand(2, nk, 2, 64, gen=g, scale=2.0), rand(2, nk, 2, 64, gen=g)
    out = flash_attn_func(q.cuda(), k.cuda(), v.cuda(), **kw)
    exact = reference(q.double(), k.double(), v.double(), **kw)
    base = reference(q, k, v, **kw)
    err, bound = rel_err(out.cpu(), exact), 2 * rel_err(base, exact) + FLOOR
    assert torch.isfinite(out).all() and err <= bound, f"{err:.3e} over 2 x bf16's {rel_err(base, exact):.3e} + {FLOOR}"
