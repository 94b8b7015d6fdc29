"""kittens.flash_attn.flash_attn_func (FlashAttention's signature and (B, N, H, D) layout) on torch CPU
tensors, run on the CPU interpreter, against a float64 torch reference that implements every option
(softmax_scale, bottom-right causal, window_size, softcap, alibi_slopes, GQA): outputs and gradients by
FlashAttention's rule, our error at most twice the plain bf16 torch computation's plus a floor, at odd
lengths, with GQA and with windows whose edges fall on and off the kernels' 32-key blocks.

Needs torch (scripts/test-python.sh installs it; in CI a missing torch fails, see conftest.py).
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU suite runs without it)")

from kittens.flash_attn import flash_attn_func  # noqa: E402

FLOOR = 1e-5


def rand(*shape, gen, scale=1.0):
    return ((torch.rand(*shape, generator=gen, dtype=torch.float32) * 2 - 1) * scale).to(torch.bfloat16)


def reference(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """FlashAttention's definition in the dtype of q, k, v, (B, N, H, D) layout: logits
    ``softcap * tanh(scale * q.k / softcap)`` (or ``scale * q.k``), plus ALiBi's
    ``-slope[b, h] * |i + Nk - Nq - j|`` (slopes (H,) or (B, H)), query i keeping keys j with
    ``i + Nk - Nq - left <= j <= i + Nk - Nq + right`` (a side -1: unbounded; causal: right 0), a
    query that keeps no key giving a zero row."""
    b, nq, h, d = q.shape
    nk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(h // hk, 1)
    vh = v.transpose(1, 2).repeat_interleave(h // hk, 1)
    s = (qh @ kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(nq).view(-1, 1)
    j = torch.arange(nk).view(1, -1)
    diag = i + nk - nq
    if alibi_slopes is not None:
        # The bias in float32 (float64 for the exact reference), as FlashAttention's reference adds
        # its float32 attn_bias: bf16 scores are promoted, the softmax runs in float32.
        wide = torch.float64 if s.dtype == torch.float64 else torch.float32
        slopes = alibi_slopes.to(wide).expand(b, h).reshape(b, h, 1, 1)
        s = s - slopes * (diag - j).abs().to(wide)
    keep = torch.ones(nq, nk, dtype=torch.bool)
    left, right = window_size
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if right >= 0:
        keep &= j <= diag + right
    if left >= 0:
        keep &= j >= diag - left
    s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    p = (e / torch.where(den == 0, torch.ones_like(den), den)).to(vh.dtype)
    return (p @ vh).transpose(1, 2)


def rel_err(x, ref):
    x, ref = x.detach().to(torch.float64), ref.detach().to(torch.float64)
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))


CASES = [
    # (nq, nk, h, hk, d, input scale, kwargs)
    (77, 77, 4, 2, 64, 4.0, dict(softmax_scale=0.3)),
    (61, 45, 2, 1, 64, 1.0, dict(softmax_scale=1.5, causal=True)),
    (93, 150, 4, 2, 64, 8.0, dict(softcap=5.0)),
    (100, 100, 4, 4, 32, 2.0, dict(softmax_scale=0.2, softcap=2.0, causal=True)),
    (150, 150, 4, 2, 64, 4.0, dict(window_size=(32, 31))),
    (129, 200, 2, 1, 64, 4.0, dict(window_size=(64, 0))),
    (200, 150, 4, 2, 64, 4.0, dict(window_size=(-1, 40))),
    (70, 101, 4, 2, 64, 4.0, dict(window_size=(17, -1), causal=True)),
    (45, 37, 4, 2, 64, 4.0, dict(window_size=(0, 0))),
    (111, 97, 4, 1, 64, 8.0, dict(window_size=(40, 3), softmax_scale=0.5, softcap=3.0, causal=True)),
    # ALiBi: "h" draws fresh (H,) slopes, "bh" (B, H) ones of both signs (any values run).
    (77, 93, 4, 2, 64, 2.0, dict(alibi_slopes="h")),
    (130, 70, 4, 2, 64, 2.0, dict(alibi_slopes="bh", causal=True)),
    (93, 150, 2, 1, 32, 4.0, dict(alibi_slopes="h", window_size=(40, 3))),
    (111, 97, 4, 1, 64, 4.0, dict(alibi_slopes="bh", softmax_scale=0.2, softcap=3.0, window_size=(-1, 20),
                                  causal=True)),
]


def _ids(c):
    return f"q{c[0]}k{c[1]}h{c[2]}/{c[3]}d{c[4]}-" + "-".join(f"{k}={v}" for k, v in c[6].items())


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_flash_attn_func_forward_and_backward(case):
    nq, nk, h, hk, d, scale, kw = case
    g = torch.Generator().manual_seed(nq * 1000 + nk)
    b = 2 if "alibi_slopes" in kw else 1
    q = rand(b, nq, h, d, gen=g, scale=scale).requires_grad_()
    k = rand(b, nk, hk, d, gen=g, scale=scale).requires_grad_()
    v = rand(b, nk, hk, d, gen=g, scale=scale).requires_grad_()
    do = rand(b, nq, h, d, gen=g)
    if kw.get("alibi_slopes") == "h":
        kw = dict(kw, alibi_slopes=torch.rand(h, generator=g) * 0.5)
    elif kw.get("alibi_slopes") == "bh":
        kw = dict(kw, alibi_slopes=(torch.rand(b, h, generator=g) * 2 - 1) * 0.5)

    out = flash_attn_func(q, k, v, **kw)
    assert out.shape == (b, nq, h, d) and out.dtype == torch.bfloat16
    assert out.is_contiguous(), "the output comes back in FlashAttention's (B, N, H, D) memory order"
    (dq, dk, dv) = torch.autograd.grad(out, (q, k, v), do)

    def run(dtype):
        qq, kk, vv = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        oo = reference(qq, kk, vv, **kw)
        return (oo, *torch.autograd.grad(oo, (qq, kk, vv), do.to(dtype)))

    exact, base = run(torch.float64), run(torch.bfloat16)
    # The gradients' magnitude, for an output that is exactly 0 (one key per query: P = 1, dS = 0).
    grad_scale = max(float(t.abs().max()) for t in exact[1:])
    for name, ours, b, r in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), base, exact):
        if not bool(r.abs().max() > 0):
            worst = float(ours.detach().abs().max())
            assert worst <= 1e-4 * grad_scale, f"{name}: {worst:.3e} where the exact value is 0"
            continue
        err, bound = rel_err(ours, r), 2 * rel_err(b, r) + FLOOR
        assert err <= bound, f"{name}: {err:.3e} over 2 x bf16's {rel_err(b, r):.3e} + {FLOOR}"


def test_window_and_causal_reference_agree_with_the_definition():
    """The test's reference keeps exactly FlashAttention's keys: a (left, right) window of query i is
    keys i + Nk - Nq - left ..= i + Nk - Nq + right (checked on one-hot values)."""
    nq, nk, d = 5, 9, 32
    q = torch.zeros(1, nq, 1, d, dtype=torch.float64)
    k = torch.zeros(1, nk, 1, d, dtype=torch.float64)
    v = torch.eye(nk, d, dtype=torch.float64).view(1, nk, 1, d)
    o = reference(q, k, v, window_size=(1, 2))[0, :, 0, :nk]
    for i in range(nq):
        kept = [j for j in range(nk) if i + nk - nq - 1 <= j <= i + nk - nq + 2]
        want = torch.zeros(nk, dtype=torch.float64)
        want[kept] = 1.0 / len(kept)
        assert torch.allclose(o[i], want), (i, o[i], want)


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(dropout_p=0.1), NotImplementedError, "dropout_p"),
        (dict(alibi_slopes=torch.zeros(3)), ValueError, "alibi_slopes"),
        (dict(alibi_slopes=torch.zeros(2, 4)), ValueError, "alibi_slopes"),
        (dict(alibi_slopes=torch.zeros(4, dtype=torch.float64)), ValueError, "alibi_slopes"),
        (dict(alibi_slopes=torch.zeros(4, dtype=torch.bfloat16)), ValueError, "alibi_slopes"),
        (dict(alibi_slopes=[0.5] * 4), TypeError, "alibi_slopes"),
        (dict(alibi_slopes=torch.tensor([0.5, float("nan"), 0.1, 0.2])), ValueError, "alibi_slopes"),
        (dict(alibi_slopes=torch.tensor([0.5, 0.1, float("inf"), 0.2])), ValueError, "alibi_slopes"),
        (dict(return_attn_probs=True), NotImplementedError, "return_attn_probs"),
        (dict(window_size=(-2, 0)), ValueError, "window_size"),
        (dict(window_size=(3, -7)), ValueError, "window_size"),
        (dict(window_size=5), TypeError, "window_size"),
        (dict(softcap=-1.0), ValueError, "softcap"),
        (dict(softcap=float("nan")), ValueError, "softcap"),
        (dict(softmax_scale=-0.5), ValueError, "scale"),
        (dict(softmax_scale=float("inf")), ValueError, "scale"),
    ],
)
def test_bad_arguments_are_refused_by_name(kw, err, match):
    g = torch.Generator().manual_seed(3)
    q = rand(1, 40, 4, 64, gen=g)
    k = v = rand(1, 40, 2, 64, gen=g)
    with pytest.raises(err, match=match):
        flash_attn_func(q, k, v, **kw)


def test_the_package_exports_it_as_flash_attn_does():
    """Replacing ``flash_attn`` by ``kittens`` in the import is enough."""
    import kittens

    assert kittens.flash_attn_func is flash_attn_func
    from kittens import flash_attn_func as again

    assert again is flash_attn_func


def test_deterministic_reaches_the_backward_form():
    """``deterministic=True`` asks the backward for the two-launch form (dQ a pass of its own) whatever
    the default; the default takes the atomic form at head dim 128 only without a soft cap (the atomic
    key blocks refuse one there), at head dim 64 with one too, and the two launches at 96; on the CPU
    both give the interpreter's gradients."""
    from kittens import _backward

    assert _backward._form("auto", 128) == "atomic"
    assert _backward._form("auto", 128, softcap=5.0) == "two"
    assert _backward._form("auto", 64) == "atomic"
    assert _backward._form("auto", 64, softcap=5.0) == "atomic"
    assert _backward._form("auto", 96) == "two"
    seen = []
    real = _backward.attention_backward

    def spy(*a, **kw):
        seen.append(a[8] if len(a) > 8 else kw.get("form"))
        return real(*a, **kw)

    g = torch.Generator().manual_seed(5)
    q, k, v = (rand(1, 40, 2, 64, gen=g).requires_grad_() for _ in range(3))
    _backward.attention_backward = spy
    try:
        grads = {}
        for det in (False, True):
            out = flash_attn_func(q, k, v, causal=True, deterministic=det)
            grads[det] = torch.autograd.grad(out.float().sum(), (q, k, v))
    finally:
        _backward.attention_backward = real
    assert seen == [None, "two"], seen
    for a, b in zip(grads[False], grads[True]):
        assert torch.equal(a, b)
    with pytest.raises(TypeError, match="deterministic"):
        flash_attn_func(q, k, v, deterministic=1)


@pytest.mark.parametrize("causal,window", [(True, None), (True, (7, 0)), (False, (5, 3)), (False, None)])
def test_bench_options_reference_over_last_rows(causal, window):
    """`kittens.bench attn --options` checks the last rows of a square problem against a reference built
    over those rows alone: with the bottom-right alignment it keeps the same pairs (and ALiBi distances)
    as the whole problem does for them (the first rows would not: a causal check then failed)."""
    from kittens import bench_attn_opts as bo

    n, r, h = 40, 9, 2
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, h, n, 16, generator=g, dtype=torch.float64) for _ in range(3))
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    whole = bo.reference(torch, q, k, v, causal, window=window, slopes=slopes)
    last = bo.reference(torch, q[:, :, n - r:], k, v, causal, window=window, slopes=slopes)
    assert torch.allclose(last, whole[:, :, n - r:], rtol=0, atol=1e-12)
    first = bo.reference(torch, q[:, :, :r], k, v, causal, window=window, slopes=slopes)
    if causal or window is not None:  # the first rows need the whole problem's alignment: the old check's bug
        assert not torch.allclose(first, whole[:, :, :r], rtol=0, atol=1e-6)


def test_bench_options_varlen_rows_agree_with_their_baselines():
    """`kittens.bench attn --options`' varlen rows on CPU tensors (the timing is CUDA's; what is timed is
    checked here): the packed documents' output passes the row's own check, SDPA on the padded documents and
    FlexAttention's document mask compute the same attention (on each document's rows), and the kept pairs
    are the documents' causal pairs over B."""
    from kittens import bench_attn_opts as bo
    from kittens.bench_timing import _rel

    b, n, h, hk, d = 2, 40, 4, 2, 32
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = (flex_attention, create_block_mask)
    except ImportError:
        flex = None
    rows = bo.varlen_rows(torch, b, n, h, hk, d, "cpu", flex)
    lens = bo.doc_lengths(b * n)
    assert sum(lens) == b * n and min(lens) > 0 and len(set(lens)) > 2
    name, dim, causal, ours, sdpa, _, kept, check = rows[0]
    assert (dim, causal) == (d, True) and kept == sum(m * (m + 1) // 2 for m in lens) / b
    r = check()
    assert r["passed"], r
    o = ours(0).double()
    padded = sdpa(0).double()  # (docs, H, top, D)
    starts = [0]
    for m in lens[:-1]:
        starts.append(starts[-1] + m)
    for i, (a, m) in enumerate(zip(starts, lens)):
        got = o[a:a + m].transpose(0, 1)
        assert _rel(got, padded[i, :, :m]) < 2e-2, (i, m)
    if flex is not None:
        theirs = rows[1][4](0)[0].transpose(0, 1).double()  # (1, H, T, D) -> (T, H, D)
        assert _rel(o, theirs) < 2e-2
