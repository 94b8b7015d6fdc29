"""kittens' kernels as PyTorch operators on CPU tensors (the CPU interpreter): ``torch.library.opcheck``
for every op, every gradient against float64 autograd by FlashAttention's rule (our error at most twice
the plain bf16 computation's, plus a floor) at odd shapes and strided / transposed views, no silently
dropped gradient, and ``torch.compile(fullgraph=True)`` over a small transformer block.

torch is required in CI (scripts/test-python.sh installs it and sets KITTENS_REQUIRE_TORCH=1): there a
missing torch fails this file instead of skipping it.
"""

import math
import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch  # a missing torch is an error in CI, never a skip
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

import kittens  # noqa: E402
import kittens.ops as ops  # noqa: E402

FLOOR = 1e-5
BF = torch.bfloat16


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float32) * 2 - 1).to(BF)


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_rule(ours, base, ref, what=""):
    """FlashAttention's rule: our error against the float64 reference at most twice the plain bf16
    computation's, plus a floor."""
    assert ours is not None, f"{what}: no gradient"
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs {tuple(ref.shape)}"
    assert torch.isfinite(ours.double()).all(), what
    e, b = rel(ours, ref), rel(base, ref)
    assert e <= 2 * b + FLOOR, f"{what}: ours {e:.3e} vs bf16 {b:.3e}"


def grads_of(fn, inputs, grad_outputs, dtype):
    """Gradients of fn at `inputs` cast to dtype (leaves), for the given output gradients."""
    xs = [t.detach().to(dtype).requires_grad_() for t in inputs]
    outs = fn(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gs = torch.autograd.grad(outs, xs, [g.to(dtype) for g in grad_outputs], allow_unused=True)
    return [o.detach() for o in outs], list(gs)


# ---------------------------------------------------------------------------------------------- references


def attention_ref(q, k, v, causal=False, scale=None, bottom_right=False):
    """(out, lse) of attention in q's dtype with autograd; GQA; rows that keep no key give 0 and -inf."""
    b, h, n, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=1)
    v = v.repeat_interleave(h // hk, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    keep = torch.ones(n, nk, dtype=torch.bool, device=q.device)
    if causal:
        shift = nk - n if bottom_right else 0
        at = lambda m: torch.arange(m, device=q.device)  # noqa: E731
        keep = at(nk)[None, :] <= at(n)[:, None] + shift
    empty = ~keep.any(dim=-1, keepdim=True)
    s = torch.where(empty, torch.zeros_like(s), s.masked_fill(~keep, float("-inf")))
    lse = torch.logsumexp(s.float(), dim=-1).to(s.dtype)
    p = torch.exp(s - lse.unsqueeze(-1)) * (~empty)
    out = torch.matmul(p.to(v.dtype), v)
    return out, torch.where(empty.squeeze(-1), torch.full_like(lse, float("-inf")), lse)


def rotary_ref(q, cos, sin, interleaved=False):
    if interleaved:
        x0, x1 = q[..., 0::2], q[..., 1::2]
    else:
        x0, x1 = q.chunk(2, dim=-1)
    y0, y1 = x0 * cos - x1 * sin, x1 * cos + x0 * sin
    if interleaved:
        return torch.stack([y0, y1], dim=-1).flatten(-2)
    return torch.cat([y0, y1], dim=-1)


def layernorm_ref(x, residual, weight, bias, keep, p, eps=1e-5):
    """(normed, h) with the kernel's mask `keep` (float32 h for bf16 inputs, like the kernel)."""
    xs = x * keep.to(x.dtype) / (1 - p) if keep is not None else x
    h = residual + xs
    y = torch.nn.functional.layer_norm(h, (h.shape[-1],), weight, bias, eps)
    return y, h


# ------------------------------------------------------------------------------------------------ opcheck


def _opcheck(op, args, kwargs=None):
    torch.library.opcheck(op, args, kwargs or {})


def test_opcheck_matmul():
    a = rand(13, 40, seed=1).requires_grad_()
    w = rand(24, 40, seed=2).requires_grad_()
    _opcheck(torch.ops.kittens.matmul.default, (a, w.t()))
    b = rand(40, 24, seed=3).requires_grad_()
    _opcheck(torch.ops.kittens.matmul.default, (a, b))


@pytest.mark.parametrize("causal,bottom_right,scale", [(False, False, None), (True, True, 0.3)])
def test_opcheck_attention(causal, bottom_right, scale):
    q = rand(1, 2, 11, 32, seed=4).requires_grad_()
    k = rand(1, 1, 13, 32, seed=5).requires_grad_()
    v = rand(1, 13, 1, 32, seed=6).transpose(1, 2).requires_grad_()  # another layout than q's
    _opcheck(torch.ops.kittens.attention.default, (q, k, v, causal, scale, bottom_right, True))


def test_opcheck_attention_backward():
    q, k, v = rand(1, 2, 9, 32, seed=7), rand(1, 1, 12, 32, seed=8), rand(1, 1, 12, 32, seed=9)
    with torch.no_grad():
        out, lse = torch.ops.kittens.attention(q, k, v, True, None, True, False)
    do = rand(1, 2, 9, 32, seed=10)
    _opcheck(torch.ops.kittens.attention_backward.default, (do, q, k, v, out, lse, True, None, True))


def test_opcheck_layernorm():
    x, r = rand(3, 776, seed=11).requires_grad_(), rand(3, 776, seed=12).requires_grad_()
    w, b = rand(776, seed=13).requires_grad_(), rand(776, seed=14).requires_grad_()
    _opcheck(torch.ops.kittens.layernorm.default, (x, r, w, b, 0.25, ops.seed_arg(2**64 - 5), 3, 1e-5))


def test_opcheck_layernorm_backward():
    x, r, w, b = rand(2, 768, seed=15), rand(2, 768, seed=16), rand(768, seed=17), rand(768, seed=18)
    g = rand(2, 2, 768, seed=19)
    _opcheck(torch.ops.kittens.layernorm_backward.default, (g, x, r, w, b, 0.1, 5, 0, 1e-5))


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_opcheck_layernorm_backward_h(p):
    h, w, b = rand(2, 768, seed=15), rand(768, seed=17), rand(768, seed=18)
    g = rand(2, 2, 768, seed=19)
    _opcheck(torch.ops.kittens.layernorm_backward_h.default, (g, h, w, b, p, 5, 0, 1e-5))


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_layernorm_backward_h_against_float64(p):
    """The backward from the forward's h: dresidual (and dx = keep·dresidual with dropout; without, dx is
    not returned: it is dresidual) against float64 autograd of layernorm on the same h, dweight and dbias
    too; with dropout the mask is the forward's (a flipped bit moves dx by a whole dh/(1 - p))."""
    rows, d, seed, offset, eps = 37, 776, 11, 5, 1e-5
    x, r = rand(rows, d, seed=60), rand(rows, d, seed=61)
    w, b = (1 + rand(d, seed=62).float() * 0.5).to(BF), rand(d, seed=63)
    g = rand(2, rows, d, seed=64)
    with torch.no_grad():
        _, h = kittens.layernorm(x, r, w, b, p, seed, offset=offset)
    dx, dres, dw, db = torch.ops.kittens.layernorm_backward_h(g, h, w, b, p, seed, offset, eps)
    leaves = [t.double().requires_grad_() for t in (h, w, b)]
    y64 = torch.nn.functional.layer_norm(leaves[0], (d,), leaves[1], leaves[2], eps)
    ref = torch.autograd.grad((y64, leaves[0]), leaves, (g[0].double(), g[1].double()))
    keep = ops.dropout_keep(rows, d, p, seed, offset).double() / (1 - p) if p > 0 else None

    def rel(a, ref_):
        return ((a.double() - ref_).norm() / ref_.norm()).item()

    assert rel(dres, ref[0]) < 1e-2
    assert rel(dw, ref[1]) < 1e-2 and rel(db, ref[2]) < 1e-2
    if p > 0:
        assert rel(dx, ref[0] * keep) < 1e-2
    else:
        assert dx.numel() == 0


@pytest.mark.parametrize("interleaved", [False, True])
def test_opcheck_rotary(interleaved):
    q = rand(1, 7, 2, 32, seed=20).transpose(1, 2).requires_grad_()
    cos, sin = kittens.rotary_tables(7, 32, like=q)
    _opcheck(torch.ops.kittens.rotary.default, (q, cos, sin, interleaved))


# --------------------------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("b_form", ["w.T", "row-major"])
def test_matmul_backward(b_form):
    a = rand(37, 50, seed=21)
    w = rand(29, 50, seed=22)
    dc = rand(37, 29, seed=23)

    def ours_fn(a, w):
        return kittens.matmul(a, w.t() if b_form == "w.T" else w)

    def ref_fn(a, w):
        return a @ (w.t() if b_form == "w.T" else w)

    if b_form == "row-major":
        w = rand(50, 29, seed=22)
    (o,), g = grads_of(ours_fn, (a, w), (dc,), BF)
    (r,), gr = grads_of(ref_fn, (a, w), (dc,), torch.float64)
    (bo,), gb = grads_of(ref_fn, (a, w), (dc,), BF)
    check_rule(o, bo, r, "out")
    for x, y, z, name in zip(g, gb, gr, ("a", "b")):
        check_rule(x, y, z, f"d{name}")


def test_matmul_backward_through_a_linear_layer():
    """The linear-layer form ``x @ weight.T`` with a leaf weight: weight.grad arrives, contiguous."""
    x = rand(5, 16, seed=24).requires_grad_()
    weight = rand(8, 16, seed=25).requires_grad_()
    kittens.matmul(x, weight.t()).float().square().sum().backward()
    assert x.grad is not None and weight.grad is not None and weight.grad.shape == (8, 16)


ATTN_CASES = [
    # (B, H, H_kv, N, N_kv, D), causal, bottom_right, scale, layouts of q, k, v
    ((1, 2, 1, 37, 37, 32), True, False, None, ("bshd", "bhsd", "bhsd")),  # HF: q transposed, k/v dense
    ((1, 2, 2, 19, 29, 64), True, True, None, ("bhsd", "bshd", "bhsd")),  # bottom-right, N < N_kv
    ((2, 2, 1, 23, 17, 32), True, True, 0.21, ("bshd", "bshd", "bshd")),  # bottom-right, N > N_kv
    ((1, 4, 2, 13, 21, 32), False, False, 0.5, ("bhsd", "bhsd", "odd")),  # any scale, strided v
]


def make(shape, layout, seed):
    b, h, n, d = shape
    if layout == "bshd":
        return rand(b, n, h, d, seed=seed).transpose(1, 2)
    if layout == "odd":  # a strided slice: every other row of a taller buffer
        return rand(b, h, 2 * n, d, seed=seed)[:, :, ::2]
    return rand(b, h, n, d, seed=seed)


@pytest.mark.parametrize("case", ATTN_CASES, ids=lambda c: "-".join(map(str, c[0])) + f"-{c[1]}{c[2]}{c[3]}")
@pytest.mark.parametrize("return_lse", [False, True])
def test_attention_gradients(case, return_lse):
    (b, h, hk, n, nk, d), causal, br, scale, lays = case
    q = make((b, h, n, d), lays[0], 30)
    k = make((b, hk, nk, d), lays[1], 31)
    v = make((b, hk, nk, d), lays[2], 32)
    do = rand(b, h, n, d, seed=33)
    dlse = rand(b, h, n, seed=34).float()
    align = "bottom_right" if br else "top_left"

    def ours_fn(q, k, v):
        r = kittens.attention(q, k, v, causal=causal, scale=scale, causal_align=align, return_lse=return_lse)
        return r if return_lse else (r,)

    def ref_fn(q, k, v):
        o, lse = attention_ref(q, k, v, causal, scale, br)
        return (o, torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)) if return_lse else (o,)

    gouts = (do, dlse) if return_lse else (do,)
    outs, g = grads_of(ours_fn, (q, k, v), gouts, BF)
    if lays[0] == "bshd":
        assert outs[0].stride() == q.stride()  # the output takes q's layout
    ref_outs, gr = grads_of(ref_fn, (q, k, v), gouts, torch.float64)
    base_outs, gb = grads_of(ref_fn, (q, k, v), gouts, BF)
    check_rule(outs[0], base_outs[0], ref_outs[0], "out")
    if return_lse:
        lse = outs[1]
        assert lse.dtype == torch.float32 and lse.shape == (b, h, n)
        finite = torch.isfinite(ref_outs[1]) & (ref_outs[1] != 0)
        assert torch.equal(torch.isinf(lse), ~torch.isfinite(attention_ref(q.double(), k.double(), v.double(),
                                                                            causal, scale, br)[1]))
        assert rel(lse[finite], ref_outs[1][finite]) <= 2 * rel(base_outs[1][finite], ref_outs[1][finite]) + 1e-4
    for x, y, z, name in zip(g, gb, gr, "qkv"):
        check_rule(x, y, z, f"d{name}")


def test_attention_hf_llama_pattern():
    """A Hugging Face Llama's attention call: q a transposed view of (B, N, H, D), k and v dense
    (B, H_kv, N, D) (from its KV cache), grouped-query heads, the output in q's layout."""
    q = rand(1, 10, 4, 64, seed=40).transpose(1, 2).requires_grad_()
    k = rand(1, 2, 10, 64, seed=41).requires_grad_()
    v = rand(1, 2, 10, 64, seed=42).requires_grad_()
    o = kittens.attention(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1), is_causal=True)
    assert rel(o, ref) < 1e-2
    o.float().sum().backward()
    assert all(t.grad is not None for t in (q, k, v))


def test_dropout_mask_matches_the_kernel():
    """ops.dropout_keep (integer torch ops) draws the layernorm kernel's Philox mask bit for bit: with
    x = 1 and residual = 0 the kernel's h is the mask scaled by 1/(1 - p)."""
    rows, d, p = 3, 768, 0.3
    for seed, offset in ((7, 0), (2**64 - 3, 2**40 + 5)):
        x, r = torch.ones(rows, d, dtype=BF), torch.zeros(rows, d, dtype=BF)
        w, b = torch.ones(d, dtype=BF), torch.zeros(d, dtype=BF)
        with torch.no_grad():
            _, h = kittens.layernorm(x, r, w, b, p, seed, offset=offset)
        keep = ops.dropout_keep(rows, d, p, seed, offset)
        assert torch.equal(h != 0, keep)
        assert 0.6 < keep.float().mean().item() < 0.8


@pytest.mark.parametrize("p", [0.0, 0.15])
def test_layernorm_gradients(p):
    shape, d, seed = (2, 3), 776, 123
    x, r = rand(*shape, d, seed=50), rand(*shape, d, seed=51)
    w = (1 + rand(d, seed=52).float() * 0.5).to(BF)
    bias = rand(d, seed=53)
    dy, dh = rand(*shape, d, seed=54), rand(*shape, d, seed=55)
    keep = ops.dropout_keep(6, d, p, seed, 0).reshape(*shape, d) if p > 0 else None

    def ours_fn(x, r, w, bias):
        return kittens.layernorm(x, r, w, bias, p, seed)

    def ref_fn(x, r, w, bias):
        return layernorm_ref(x, r, w, bias, keep, p)

    outs, g = grads_of(ours_fn, (x, r, w, bias), (dy, dh), BF)
    ref_outs, gr = grads_of(ref_fn, (x, r, w, bias), (dy, dh), torch.float64)
    base_outs, gb = grads_of(ref_fn, (x, r, w, bias), (dy, dh), BF)
    for o, bo, ro, name in zip(outs, base_outs, ref_outs, ("y", "h")):
        check_rule(o, bo, ro, name)
    for x_, y_, z_, name in zip(g, gb, gr, ("x", "residual", "weight", "bias")):
        check_rule(x_, y_, z_, f"d{name}")


def test_layernorm_and_rotary_drop_no_gradient():
    """The issue's report: weight.grad and residual.grad stayed None. Every input gets its gradient."""
    x, r = rand(2, 768, seed=60).requires_grad_(), rand(2, 768, seed=61).requires_grad_()
    w, b = rand(768, seed=62).requires_grad_(), rand(768, seed=63).requires_grad_()
    y, h = kittens.layernorm(x, r, w, b, 0.1, 3)
    assert y.grad_fn is not None and h.grad_fn is not None
    (y.float().sum() + h.float().square().sum()).backward()
    assert all(t.grad is not None for t in (x, r, w, b))
    q = rand(1, 2, 5, 32, seed=64).requires_grad_()
    o = kittens.rotary(q)
    assert o.grad_fn is not None
    o.float().sum().backward()
    assert q.grad is not None


def test_out_and_inplace_under_autograd_raise():
    a = rand(4, 8, seed=70).requires_grad_()
    w = rand(6, 8, seed=71)
    with pytest.raises(RuntimeError, match="autograd"):
        kittens.matmul(a, w.t(), out=torch.empty(4, 6, dtype=BF))
    q = rand(1, 2, 5, 32, seed=72).requires_grad_()
    with pytest.raises(RuntimeError, match="autograd"):
        kittens.rotary(q, inplace=True)
    with pytest.raises(RuntimeError, match="autograd"):
        kittens.attention(q, q, q, out=torch.empty(1, 2, 5, 32, dtype=BF))
    x = rand(2, 768, seed=73).requires_grad_()
    with pytest.raises(RuntimeError, match="autograd"):
        kittens.layernorm(x, x.detach(), x.detach()[0], x.detach()[0], out=torch.empty(2, 2, 768, dtype=BF))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_gradients(interleaved):
    """The backward is the same kernel with -sin (the inverse rotation): exact up to the bf16 rounding
    of each output; the tables' gradients too."""
    q = rand(2, 9, 3, 32, seed=80).transpose(1, 2)  # (B, N, H, D) seen as (B, H, N, D)
    cos, sin = kittens.rotary_tables(9, 32, like=q)
    do = rand(2, 3, 9, 32, seed=81)

    def ours_fn(q, c, s):
        return kittens.rotary(q, c, s, interleaved)

    def ref_fn(q, c, s):
        return rotary_ref(q, c, s, interleaved)

    (o,), g = grads_of(ours_fn, (q, cos, sin), (do,), BF)
    assert o.stride() == q.stride()
    (r,), gr = grads_of(ref_fn, (q, cos, sin), (do,), torch.float64)
    (bo,), gb = grads_of(ref_fn, (q, cos, sin), (do,), BF)
    check_rule(o, bo, r, "out")
    for x, y, z, name in zip(g, gb, gr, ("q", "cos", "sin")):
        check_rule(x, y, z, f"d{name}")


# ----------------------------------------------------------------------------------------- torch.compile


def block(x, res, ln_w, ln_b, w_qkv, w_o, cos, sin):
    """A prenorm attention block from kittens ops only: layernorm, QKV projection, rotary, causal
    attention (q, k, v strided views of one projection), output projection."""
    n, dm = x.shape[-2], x.shape[-1]
    heads, hd = 2, w_o.shape[1] // 2
    y, h = kittens.layernorm(x, res, ln_w, ln_b)
    qkv = kittens.matmul(y.reshape(-1, dm), w_qkv.t()).reshape(1, n, 3, heads, hd)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    q, k = kittens.rotary(q, cos, sin), kittens.rotary(k, cos, sin)
    o = kittens.attention(q, k, v, causal=True)
    o = o.transpose(1, 2).reshape(n, heads * hd)
    return kittens.matmul(o, w_o.t()).reshape(1, n, dm), h


def block_inputs(n, seed, hd=32, device="cpu"):
    """The block's parameters (2 heads of head dim hd, model dim 768, the layernorm kernel's least) and
    rotary tables, on device."""
    dm = 768
    x, res = rand(1, n, dm, seed=seed), rand(1, n, dm, seed=seed + 1)
    ln_w, ln_b = (1 + rand(dm, seed=seed + 2).float() * 0.1).to(BF), rand(dm, seed=seed + 3)
    w_qkv = (rand(3 * 2 * hd, dm, seed=seed + 4).float() * 0.05).to(BF)
    w_o = (rand(dm, 2 * hd, seed=seed + 5).float() * 0.1).to(BF)
    params = [t.to(device) for t in (x, res, ln_w, ln_b, w_qkv, w_o)]
    cos, sin = kittens.rotary_tables(n, hd, like=params[0])
    return params, [cos, sin]


def run_block(f, params, tables):
    ps = [t.detach().clone().requires_grad_() for t in params]
    out, h = f(*ps, *tables)
    (out.float().square().sum() + h.float().sum()).backward()
    return [out.detach(), h.detach()] + [p.grad for p in ps]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_block_matches_eager(backend):
    torch._dynamo.reset()
    params, tables = block_inputs(7, 90)
    eager = run_block(block, params, tables)
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    got = run_block(compiled, params, tables)
    for a, b in zip(got, eager):
        assert a is not None and a.shape == b.shape
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_compile_dynamic_two_lengths():
    """dynamic=True over two sequence lengths: one graph each call, no graph break, matches eager."""
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="inductor")
    for n, seed in ((5, 100), (9, 110)):
        params, tables = block_inputs(n, seed)
        eager = run_block(block, params, tables)
        got = run_block(compiled, params, tables)
        for a, b in zip(got, eager):
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_compile_rotary_with_computed_tables():
    """kittens.rotary(q) without tables under torch.compile(fullgraph=True): the tables are computed in
    the graph (torch ops in float64, rounded once to bf16), equal to the numpy tables of eager."""
    torch._dynamo.reset()
    q = rand(1, 11, 2, 64, seed=120).transpose(1, 2)
    cos, sin = kittens.rotary_tables(11, 64, like=q)
    tc, ts = ops.rotary_tables(11, 64)
    assert torch.equal(tc, cos) and torch.equal(ts, sin)
    compiled = torch.compile(lambda q: kittens.rotary(q), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q), kittens.rotary(q))


class _OpNames(torch.utils._python_dispatch.TorchDispatchMode):
    """The names of the operators dispatched while active (a kittens custom op shows as kittens.<op>)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _eager_cases():
    x = rand(2, 5, 7, 64, seed=60)
    k, v = rand(2, 5, 9, 64, seed=61), rand(2, 5, 9, 64, seed=62)
    cos, sin = (t.to(BF) for t in ops.rotary_tables(7, 64))
    rows, w, b = rand(37, 768, seed=63), rand(768, seed=64), rand(768, seed=65)
    return {
        "matmul": ((rand(37, 72, seed=66), rand(72, 40, seed=67)), lambda o: o),
        "attention": ((x, k, v, True, None, True, True, None, None, False), lambda o: o[0].float().sum() + o[1].sum()),
        "layernorm": ((rows, rand(37, 768, seed=68), w, b, 0.25, 7, 3, 1e-5), lambda o: o),
        "rotary": ((x, cos, sin, False), lambda o: o),
        "rmsnorm": ((rows, rand(37, 768, seed=69), w, 1e-6), lambda o: o[0].float().sum() + o[1].float().sum()),
        "swiglu": ((rand(37, 80, seed=70), rand(37, 80, seed=71)), lambda o: o),
    }


@pytest.mark.parametrize("name", list(_eager_cases()))
def test_eager_calls_skip_the_dispatch_and_match_the_op(name):
    """kittens.ops.call in eager mode runs the op's body (no input needing grad) or its autograd.Function
    (one does) without the custom op's dispatch, with the same values and gradients as the op itself."""
    args, reduce = _eager_cases()[name]
    leaves = lambda: [a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]  # noqa: E731

    def run(fn):
        xs = leaves()
        with _OpNames() as seen:
            out = fn(*xs)
            loss = reduce(out)
            loss = loss.float().sum() if loss.dim() else loss
            loss.backward()
        grads = [a.grad for a in xs if isinstance(a, torch.Tensor)]
        outs = out if isinstance(out, tuple) else (out,)
        return [o.detach() for o in outs], grads, seen.names

    o1, g1, via_op = run(getattr(torch.ops.kittens, name))
    o2, g2, eager = run(lambda *xs: ops.call(name, *xs))
    assert any(n.startswith(f"kittens.{name}") for n in via_op), via_op[:5]
    assert not any(n.startswith("kittens.") for n in eager), [n for n in eager if n.startswith("kittens.")]
    for a, b in zip(o1, o2):
        assert torch.equal(a, b)
    assert len(g1) == len(g2) and all(g is not None for g in g2)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)
    with torch.no_grad(), _OpNames() as seen:
        again = ops.call(name, *args)
    assert not any(n.startswith("kittens.") for n in seen.names)
    for a, b in zip(o1, again if isinstance(again, tuple) else (again,)):
        assert torch.equal(a, b)
