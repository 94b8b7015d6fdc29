"""``kittens.ops.rmsnorm`` and ``kittens.ops.layernorm`` (forward and backward) on an H100/H200 with rows
in a row stride (issue 33, "any strides a model passes"): ``x[:, :D]`` of a wider tensor and rows of a
3-D slice, read in place by the kernels (the views reach ``kittens._dispatch`` with their own addresses
and strides, no copy), values and gradients against float64 by the test rule (our error at most twice
the plain bf16 computation's plus a floor), at rows that fill no block and D not a power of two.

Skips without a CUDA device of compute capability 9.0 (CI has none). Written without a GPU: not yet run.
The CPU half is test_norm_strides_cpu.py.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kittens.ops as ops  # noqa: E402
from kittens import _dispatch  # noqa: E402

from gpu_rule import BF, rand, rule  # noqa: E402




def view(kind, rows, d, seed):
    """A ``(..., d)`` view in a row stride: a slice of wider rows, or rows of a 3-D slice."""
    if kind == "slice":
        return rand(rows, d + 256, scale=4, seed=seed)[:, :d]
    return rand(rows, 3, d, scale=4, seed=seed)[:, 1, :]  # row stride 3d, as one of a fused projection


class Seen:
    """The strides and addresses the dispatch functions are handed."""

    def __init__(self, monkeypatch, *names):
        self.calls = []
        for name in names:
            real = getattr(_dispatch, name)

            def spy(*args, _real=real, _name=name, **kw):
                ts = [a for a in args if isinstance(a, torch.Tensor)]
                self.calls.append((_name, [(t.data_ptr(), t.stride()) for t in ts]))
                return _real(*args, **kw)

            monkeypatch.setattr(_dispatch, name, spy)

    def saw(self, name, t):
        return any(n == name and (t.data_ptr(), t.stride()) in ts for n, ts in self.calls)


CASES = [("slice", 37, 1000), ("slice", 4133, 3080), ("fused", 19, 768), ("fused", 5, 8192)]


@pytest.mark.parametrize("kind,rows,d", CASES)
def test_rmsnorm_on_strided_rows(monkeypatch, kind, rows, d):
    seen = Seen(monkeypatch, "rmsnorm", "rmsnorm_backward")
    eps = 1e-6
    x, r, w = view(kind, rows, d, 1), view(kind, rows, d, 2), rand(d, seed=3)
    dy, dh = view(kind, rows, d, 4), view(kind, rows, d, 5)
    xs = [t.detach().requires_grad_() for t in (x, r, w)]
    y, h = ops.rmsnorm(xs[0], xs[1], xs[2], eps)
    torch.autograd.backward((y, h), (dy, dh))
    assert seen.saw("rmsnorm", x) and seen.saw("rmsnorm", r), "the views must reach the kernel in place"
    # (The output gradients reach the backward as autograd hands them over: not asserted.)
    ref = [t.double().requires_grad_() for t in (x, r, w)]
    h64 = ref[0] + ref[1]
    y64 = h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + eps) * ref[2]
    torch.autograd.backward((y64, h64), (dy.double(), dh.double()))
    pl = [t.detach().clone().requires_grad_() for t in (x, r, w)]
    hp = pl[0] + pl[1]
    yp = F.rms_norm(hp, (d,), pl[2], eps)
    torch.autograd.backward((yp, hp), (dy, dh))
    rule(y, y64.detach(), yp)
    rule(h, h64.detach(), hp)
    for i in range(3):
        rule(xs[i].grad, ref[i].grad, pl[i].grad, floor=1e-3 * max(1.0, ref[i].grad.abs().max().item()))


@pytest.mark.parametrize("kind,rows,d", CASES)
def test_layernorm_on_strided_rows(monkeypatch, kind, rows, d):
    seen = Seen(monkeypatch, "layernorm", "layernorm_backward_h")
    eps = 1e-5
    x, r = view(kind, rows, d, 6), view(kind, rows, d, 7)
    w, b = rand(d, seed=8), rand(d, seed=9)
    g = torch.stack([view(kind, rows, d, 10), view(kind, rows, d, 11)])
    xs = [t.detach().requires_grad_() for t in (x, r, w, b)]
    out = ops.layernorm(xs[0], xs[1], xs[2], xs[3], 0.0, 0, 0, eps)
    out.backward(g)
    assert seen.saw("layernorm", x) and seen.saw("layernorm", r), "the views must reach the kernel in place"
    # The backward reads the output's own h plane (not x and residual again), in place.
    assert seen.saw("layernorm_backward_h", out[1])
    ref = [t.double().requires_grad_() for t in (x, r, w, b)]
    h64 = ref[0] + ref[1]
    y64 = F.layer_norm(h64, (d,), ref[2], ref[3], eps)
    torch.autograd.backward((y64, h64), (g[0].double(), g[1].double()))
    pl = [t.detach().clone().requires_grad_() for t in (x, r, w, b)]
    hp = pl[0] + pl[1]
    yp = F.layer_norm(hp, (d,), pl[2], pl[3], eps)
    torch.autograd.backward((yp, hp), (g[0], g[1]))
    rule(out[0], y64.detach(), yp)
    rule(out[1], h64.detach(), hp)
    for i in range(4):
        rule(xs[i].grad, ref[i].grad, pl[i].grad, floor=1e-3 * max(1.0, ref[i].grad.abs().max().item()))


@pytest.mark.parametrize("kind,rows,f", [("packed", 37, 1000), ("split", 19, 2824), ("packed", 4133, 1376)])
def test_swiglu_on_strided_rows(monkeypatch, kind, rows, f):
    seen = Seen(monkeypatch, "swiglu", "swiglu_backward")
    if kind == "packed":  # the halves of a fused gate-and-up projection, sliced out of wider rows
        fused = rand(rows, 2 * f + 256, scale=4, seed=20)[:, : 2 * f]
        gate, up = fused[:, :f], fused[:, f:]
    else:
        gate, up = view("slice", rows, f, 21), view("fused", rows, f, 22)
    dy = view("slice", rows, f, 23)
    xs = [t.detach().requires_grad_() for t in (gate, up)]
    y = ops.swiglu(xs[0], xs[1])
    y.backward(dy)
    assert seen.saw("swiglu", gate) and seen.saw("swiglu", up), "the views must reach the kernel in place"
    assert seen.saw("swiglu_backward", gate) and seen.saw("swiglu_backward", up)
    ref = [t.double().requires_grad_() for t in (gate, up)]
    y64 = F.silu(ref[0]) * ref[1]
    y64.backward(dy.double())
    pl = [t.detach().clone().requires_grad_() for t in (gate, up)]
    yp = F.silu(pl[0]) * pl[1]
    yp.backward(dy)
    rule(y, y64.detach(), yp)
    for i in range(2):
        rule(xs[i].grad, ref[i].grad, pl[i].grad, floor=1e-3 * max(1.0, ref[i].grad.abs().max().item()))


def rope64(q, cos, sin, interleaved):
    """The rotation in float64 (q (B, H, N, D); tables (N, D/2))."""
    c, s = cos.double(), sin.double()
    if interleaved:
        x0, x1 = q[..., 0::2], q[..., 1::2]
        return torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).flatten(-2)
    half = q.shape[-1] // 2
    x0, x1 = q[..., :half], q[..., half:]
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1)


@pytest.mark.parametrize("b,h,n,d", [(2, 8, 257, 128), (1, 5, 33, 64), (2, 3, 77, 96)])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_on_q_of_a_fused_projection(monkeypatch, b, h, n, d, interleaved):
    seen = Seen(monkeypatch, "rotary")
    qkv = rand(b, n, 3 * h, d, scale=4, seed=30)
    q = qkv[:, :, :h].transpose(1, 2)  # (B, H, N, D) in place: heads D apart, positions 3·H·D apart
    cos, sin = (t.to(BF).cuda() for t in ops.rotary_tables(n, d))
    qs = q.detach().requires_grad_()
    y = ops.rotary(qs, cos, sin, interleaved)
    g = rand(b, h, n, d, seed=31)
    y.backward(g)
    assert seen.saw("rotary", q), "q must reach the kernel in place"
    ref = q.double().requires_grad_()
    y64 = rope64(ref, cos, sin, interleaved)
    y64.backward(g.double())
    pl = q.detach().clone().requires_grad_()
    yp = rope64(pl, cos.to(BF), sin.to(BF), interleaved).to(BF)  # bf16 inputs, one rounding
    rule(y, y64.detach(), yp)
    rule(qs.grad, ref.grad, torch.autograd.grad(rope64(pl, cos, sin, interleaved), pl, g.double())[0].to(BF))
