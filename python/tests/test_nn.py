"""kittens.nn against its PyTorch counterparts on the CPU (the kernels on the CPU interpreter): values and
the gradients of the input and every parameter against float64 by FlashAttention's rule (our error at
most twice the plain bf16 PyTorch computation's, plus a floor) at shapes that are no multiple of a tile,
state-dict compatibility (load either way, strict), the KV cache against the whole sequence, and the
fallbacks: PyTorch's result, exactly, with one warning naming why.

torch is required in CI (KITTENS_REQUIRE_TORCH=1): there a missing torch fails this file, never skips it.
"""

import copy
import os
import warnings

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.nn.functional as F  # noqa: E402

import kittens  # noqa: E402
import kittens.nn as knn  # noqa: E402
import kittens.ops as ops  # noqa: E402

FLOOR = 1e-5
BF, F64 = torch.bfloat16, torch.float64


def rand(*shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_rule(ours, base, ref, what):
    assert ours is not None, f"{what}: no gradient"
    assert ours.shape == ref.shape, what
    assert torch.isfinite(ours.double()).all(), what
    e, b = rel(ours, ref), rel(base, ref)
    assert e <= 2 * b + FLOOR, f"{what}: ours {e:.3e} vs bf16 {b:.3e}"


def randomize(mod, seed):
    """Fresh random parameters (never the zeros/ones of an initialiser)."""
    with torch.no_grad():
        for i, p in enumerate(mod.parameters()):
            p.copy_(rand(*p.shape, seed=seed + i, scale=0.5))
    return mod


def run(mod, x, g, dtype, *args, **kwargs):
    """Output and gradients (input first, then every parameter by name) of mod in dtype."""
    m = copy.deepcopy(mod).to(dtype)
    xs = x.detach().to(dtype).requires_grad_()
    y = m(xs, *args, **kwargs)
    y.backward(g.to(dtype))
    return y.detach(), {"input": xs.grad, **{n: p.grad for n, p in m.named_parameters()}}


def compare(ours, theirs, x, seed, what, *args, **kwargs):
    """ours in bf16 vs theirs in bf16 (base) and in float64 (reference), the same weights."""
    ours.load_state_dict(theirs.state_dict(), strict=True)
    with torch.no_grad():
        shape = copy.deepcopy(theirs).to(F64)(x.to(F64), *args, **kwargs).shape
    g = rand(*shape, seed=seed)
    y_ref, g_ref = run(theirs, x, g, F64, *args, **kwargs)
    y_base, g_base = run(theirs, x, g, BF, *args, **kwargs)
    y_ours, g_ours = run(ours, x, g, BF, *args, **kwargs)
    check_rule(y_ours, y_base, y_ref, f"{what} output")
    assert set(g_ours) == set(g_ref)
    for name in g_ref:
        check_rule(g_ours[name], g_base[name], g_ref[name], f"{what} d{name}")


@pytest.fixture
def no_fallback():
    """Fails the test if any module falls back to PyTorch."""
    knn._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    bad = [str(w.message) for w in caught if issubclass(w.category, knn.FallbackWarning)]
    assert not bad, bad


def test_linear_matches_torch(no_fallback):
    for bias, shape in ((True, (3, 37, 72)), (False, (41, 200))):
        theirs = randomize(torch.nn.Linear(shape[-1], 53, bias=bias), 1)
        ours = knn.Linear(shape[-1], 53, bias=bias)
        compare(ours, theirs, rand(*shape, seed=2), 3, f"Linear bias={bias}")


def test_layernorm_matches_torch(no_fallback):
    theirs = randomize(torch.nn.LayerNorm(776), 4)  # a multiple of 8, no power of two
    compare(knn.LayerNorm(776), theirs, rand(3, 13, 776, seed=5, scale=2.0), 6, "LayerNorm")


def test_layernorm_fused_residual():
    ln = randomize(knn.LayerNorm(1000), 7).to(BF)
    x, r = rand(37, 1000, seed=8).to(BF), rand(37, 1000, seed=9).to(BF)
    y, h = ln(x, r)
    h_ref = x.double() + r.double()
    y_ref = F.layer_norm(h_ref, (1000,), ln.weight.double(), ln.bias.double(), ln.eps)
    y_base = F.layer_norm(x + r, (1000,), ln.weight, ln.bias, ln.eps)
    check_rule(y, y_base, y_ref, "LayerNorm(x, residual)")
    assert torch.equal(h, x + r)  # one bf16 rounding of the exact sum, as PyTorch's add


def test_fallbacks_are_torch_exactly_and_warn_once():
    knn._WARNED.clear()
    x = rand(5, 100, seed=10).float()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lin = randomize(knn.Linear(100, 7), 11)
        assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))
        lin(x)
        ln = randomize(knn.LayerNorm(100), 12).to(BF)  # 100: below the kernel's 768
        xb = x.to(BF)
        assert torch.equal(ln(xb), F.layer_norm(xb, (100,), ln.weight, ln.bias, ln.eps))
    msgs = [str(w.message) for w in caught if issubclass(w.category, knn.FallbackWarning)]
    assert len(msgs) == 2, msgs
    assert "Linear" in msgs[0] and "torch.float32" in msgs[0] and "bfloat16" in msgs[0]
    assert "LayerNorm" in msgs[1] and "hidden size 100" in msgs[1] and "768" in msgs[1]


def test_rmsnorm_state_dict_and_kernel_call(monkeypatch):
    theirs = randomize(torch.nn.RMSNorm(96, eps=1e-6), 13)
    ours = knn.RMSNorm(96, eps=1e-6)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    x = rand(4, 9, 96, seed=14).to(BF)
    # the kernel is called with (x, residual, weight, eps), the layernorm's order
    calls = []
    real = ops.call

    def spy(name, *args):
        calls.append((name, tuple(getattr(a, "shape", a) for a in args)))
        return real(name, *args)

    monkeypatch.setattr(ops, "call", spy)
    y2, h = ours.to(BF)(x, x)
    assert calls == [("rmsnorm", (x.shape, x.shape, (96,), 1e-6))]
    assert torch.equal(h, x + x)  # 2x: exact in bf16
    ref = theirs.double()(x.double() + x.double())
    base = theirs.to(BF)(x + x)
    assert (y2.double() - ref).norm() <= 2 * (base.double() - ref).norm() + 1e-5 * ref.norm()


def test_rmsnorm_without_residual_passes_none_and_no_zero_gradient(monkeypatch):
    """RMSNorm(x) alone: the op gets residual None (no tensor of zeros to read) and its backward gets no
    gradient for the unused h (None, not zeros); values and gradients as torch.nn.RMSNorm's in float64
    by the rule (2x the plain bf16 computation's error + a floor)."""
    theirs = randomize(torch.nn.RMSNorm(96, eps=1e-6), 15)
    ours = knn.RMSNorm(96, eps=1e-6)
    ours.load_state_dict(theirs.state_dict())
    ours = ours.to(BF)
    x = rand(5, 7, 96, seed=16).to(BF)
    dy = rand(5, 7, 96, seed=17).to(BF)
    calls = []
    real = ops.call

    def spy(name, *args):
        calls.append((name, tuple(None if a is None else getattr(a, "shape", a) for a in args)))
        return real(name, *args)

    monkeypatch.setattr(ops, "call", spy)
    xg = x.clone().requires_grad_()
    y = ours(xg)
    y.backward(dy)
    # The op without a residual at all (rmsnorm_y: no zeros to read, no copy of x as a second output).
    assert calls[0] == ("rmsnorm_y", (x.shape, (96,), 1e-6))
    assert calls[1][0] == "rmsnorm_backward" and calls[1][1][3] is None, calls
    x64 = x.double().requires_grad_()
    w64 = theirs.weight.detach().double().requires_grad_()
    y64 = F.rms_norm(x64, (96,), w64, 1e-6)
    y64.backward(dy.double())
    xb = x.clone().requires_grad_()
    wb = theirs.weight.detach().to(BF).requires_grad_()
    yb = F.rms_norm(xb, (96,), wb, 1e-6)
    yb.backward(dy)
    for got, ref, base in ((y, y64, yb), (xg.grad, x64.grad, xb.grad), (ours.weight.grad, w64.grad, wb.grad)):
        err = (got.double() - ref.detach()).norm()
        assert err <= 2 * (base.double() - ref.detach()).norm() + 1e-3 * ref.norm(), (err, got.shape)


class RefMLP(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(d, f, bias=False), torch.nn.Linear(d, f, bias=False)
        self.down_proj = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def test_swiglu_matches_torch(no_fallback):
    theirs = randomize(RefMLP(72, 136), 15)
    compare(knn.SwiGLU(72, 136), theirs, rand(2, 19, 72, seed=16, scale=2.0), 17, "SwiGLU")


def rope_ref(q, positions, base=10000.0):
    """HF's rotate_half form with the tables in q's dtype (float64: exact angles)."""
    d = q.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=F64) / d)
    ang = positions.to(F64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(q.dtype), torch.cat([ang.sin()] * 2, -1).to(q.dtype)
    return q * cos + knn.rotate_half(q) * sin


def test_rotary_embedding(no_fallback):
    rope = knn.RotaryEmbedding(48)  # a multiple of 16, no power of two
    assert list(rope.state_dict()) == []  # inv_freq is not persistent, as Hugging Face's
    q = rand(2, 3, 19, 48, seed=18, scale=3.0)
    g = rand(2, 3, 19, 48, seed=19)
    for offset in (0, 1000):
        pos = torch.arange(offset, offset + 19)
        outs = {}
        for name, dt, fn in (("ref", F64, lambda t: rope_ref(t, pos)), ("base", BF, lambda t: rope_ref(t, pos)),
                             ("ours", BF, lambda t: rope(t, offset=offset))):
            t = q.to(dt).detach().clone().requires_grad_()
            y = fn(t)
            y.backward(g.to(dt))
            outs[name] = (y.detach(), t.grad)
        check_rule(outs["ours"][0], outs["base"][0], outs["ref"][0], f"rotary offset {offset}")
        check_rule(outs["ours"][1], outs["base"][1], outs["ref"][1], f"rotary dq offset {offset}")
    assert torch.equal(rope(q.to(BF), positions=torch.arange(5, 24)), rope(q.to(BF), offset=5))


class RefAttention(torch.nn.Module):
    """Llama's attention in plain PyTorch (SDPA), the reference of knn.Attention."""

    def __init__(self, d, h, hkv, hd, causal=True):
        super().__init__()
        self.h, self.hkv, self.hd, self.causal = h, hkv, hd, causal
        self.q_proj, self.k_proj = torch.nn.Linear(d, h * hd, bias=False), torch.nn.Linear(d, hkv * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, hkv * hd, bias=False)
        self.o_proj = torch.nn.Linear(h * hd, d, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.hkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.hkv, self.hd).transpose(1, 2)
        pos = torch.arange(n)
        q, k = rope_ref(q, pos), rope_ref(k, pos)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.hkv != self.h)
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))


@pytest.mark.parametrize("heads,kv_heads,head_dim,causal", [(4, 4, 32, True), (6, 2, 64, True), (3, 1, 96, False)])
def test_attention_matches_torch(no_fallback, heads, kv_heads, head_dim, causal):
    d = 80
    theirs = randomize(RefAttention(d, heads, kv_heads, head_dim, causal), 20)
    ours = knn.Attention(d, heads, kv_heads, head_dim, causal=causal)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    compare(ours, theirs, rand(2, 37, d, seed=21, scale=2.0), 22, f"Attention {heads}/{kv_heads}x{head_dim}")


def test_attention_kv_cache_decoding(no_fallback):
    d, n = 80, 29
    theirs = randomize(RefAttention(d, 6, 2, 32), 23)
    ours = knn.Attention(d, 6, 2, 32)
    ours.load_state_dict(theirs.state_dict())
    x = rand(2, n, d, seed=24, scale=2.0)
    ref = theirs.to(F64)(x)
    base = copy.deepcopy(theirs).to(BF)(x.to(BF))
    ours = ours.to(BF)
    cache = ours.new_cache(2, 40)
    calls = []
    real = kittens.attention

    def spy(q, k, v, **kw):
        calls.append((q.shape[2], k.shape[2], kw.get("causal_align")))
        return real(q, k, v, **kw)

    kittens.attention = spy
    try:
        with torch.no_grad():
            parts = [ours(x[:, :20].to(BF), cache)] + [ours(x[:, i: i + 1].to(BF), cache) for i in range(20, n)]
    finally:
        kittens.attention = real
    assert cache.length == n
    assert calls[0] == (20, 20, "bottom_right") and calls[-1] == (1, n, "bottom_right")
    check_rule(torch.cat(parts, 1), base, ref, "Attention with a KV cache")
    with pytest.raises(ValueError, match="exceed max_len = 40"):
        ours(x[:, :12].to(BF), cache)


def test_attention_fallback_head_dim():
    """A head dim the kernel lacks (48): SDPA, with the warning naming the head dim."""
    knn._WARNED.clear()
    q, k, v = (rand(1, 2, 9, 48, seed=s).to(BF) for s in (25, 26, 27))
    with pytest.warns(knn.FallbackWarning, match="head dim 48"):
        o = knn.attention(q, k, v, causal=True)
    assert torch.equal(o, F.scaled_dot_product_attention(q, k, v, is_causal=True))
