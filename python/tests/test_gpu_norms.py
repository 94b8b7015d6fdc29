"""``kittens.ops.rmsnorm`` and ``kittens.ops.swiglu`` (the registry kernels ``rmsnorm``, ``rmsnorm_bwd``,
``swiglu``, ``swiglu_bwd`` through ``kittens._dispatch``) on an H100/H200: values and gradients against
float64 by the test rule (our error at most twice the plain bf16 computation's plus a floor), at rows
that fill no block and hidden sizes that are not powers of two; SwiGLU's packed form (the halves of one
(..., 2F) tensor) equal to the split one.

Skips without a CUDA device of compute capability 9.0 (CI has none). Written without a GPU: not yet run.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kittens.ops as ops  # noqa: E402

from gpu_rule import BF, rand, rule  # noqa: E402




def rms64(h, w, eps):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("rows,d", [(37, 1000), (5, 768), (4133, 3080), (3, 5128), (2, 8192)])
@pytest.mark.parametrize("with_residual", [True, False])
def test_rmsnorm_values_and_gradients(rows, d, with_residual):
    eps = 1e-6
    x, r, w = rand(rows, d, scale=4, seed=1), rand(rows, d, scale=4, seed=2), rand(d, seed=3)
    dy, dh = rand(rows, d, seed=4), rand(rows, d, seed=5)
    xs = [t.clone().requires_grad_() for t in (x, r, w)]
    y, h = ops.rmsnorm(xs[0], xs[1] if with_residual else None, xs[2], eps)
    (y.float() * dy.float() + h.float() * dh.float()).sum().backward()
    # float64 reference and the plain bf16 computation (PyTorch's eager RMSNorm in bf16) with autograd.
    ref = [t.double().requires_grad_() for t in (x, r, w)]
    h64 = ref[0] + ref[1] if with_residual else ref[0]
    y64 = rms64(h64, ref[2], eps)
    (y64 * dy.double() + h64 * dh.double()).sum().backward()
    pl = [t.clone().requires_grad_() for t in (x, r, w)]
    hp = pl[0] + pl[1] if with_residual else pl[0]
    yp = F.rms_norm(hp, (d,), pl[2], eps)
    (yp.float() * dy.float() + hp.float() * dh.float()).sum().backward()
    rule(y, y64.detach(), yp)
    rule(h, h64.detach(), hp)
    for i in (0, 2) + ((1,) if with_residual else ()):
        rule(xs[i].grad, ref[i].grad, pl[i].grad, floor=1e-3 * max(1.0, ref[i].grad.abs().max().item()))


@pytest.mark.parametrize("rows,f", [(37, 1000), (5, 2816), (3, 11008), (2, 14344)])
def test_swiglu_values_and_gradients(rows, f):
    gate, up, dy = rand(rows, f, scale=6, seed=6), rand(rows, f, scale=4, seed=7), rand(rows, f, seed=8)
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    out = ops.swiglu(g, u)
    out.backward(dy)
    g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
    o64 = F.silu(g64) * u64
    o64.backward(dy.double())
    gp, up_ = gate.clone().requires_grad_(), up.clone().requires_grad_()
    op = F.silu(gp) * up_
    op.backward(dy)
    rule(out, o64.detach(), op)
    rule(g.grad, g64.grad, gp.grad)
    rule(u.grad, u64.grad, up_.grad)


def test_swiglu_packed_is_the_split_one():
    rows, f = 77, 1000
    x = rand(rows, 2 * f, scale=6, seed=9)
    gate, up = x[:, :f], x[:, f:]
    assert kittens_packed(gate, up)
    assert torch.equal(ops.swiglu(gate, up), ops.swiglu(gate.contiguous(), up.contiguous()))


def kittens_packed(gate, up):
    from kittens import _dispatch

    return _dispatch._packed(gate, up)
