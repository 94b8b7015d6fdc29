"""``kittens::layernorm_backward`` on CUDA: the registry kernel ``layernorm_bwd`` through
``kittens._dispatch`` (one prepared call of two launches) under ``kittens.ops.layernorm``'s autograd, on an
H100/H200. Gradients of x, residual, weight and bias against float64 autograd by the test rule (our error
at most twice the plain bf16 computation's plus a floor), at rows that fill no block and hidden sizes that
are not powers of two (rows over 4096 with dropout: the composite), with and without dropout (the mask drawn again on the device from seed and offset;
the reference draws it with :func:`kittens.ops.dropout_keep`, the same Philox stream).

Skips without a CUDA device of compute capability 9.0 (CI has none). Written without a GPU: not yet run.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kittens.ops as ops  # noqa: E402
from kittens import _dispatch  # noqa: E402

BF = torch.bfloat16
SEED, OFFSET = 0x1234_5678_9ABC, 7


def rand(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).to(BF).cuda()


def rule(what, ours, ref64, plain):
    floor = 1e-3 * max(1.0, ref64.abs().max().item())
    e_ours = (ours.double() - ref64).abs().max().item()
    e_plain = (plain.double() - ref64).abs().max().item()
    assert e_ours <= 2 * e_plain + floor, (what, e_ours, e_plain, floor)


def forward(x, r, w, b, keep, p, eps):
    """``(y, h)`` in the tensors' own dtype: h = r + x * keep / (1 - p), y = LayerNorm(h) * w + b."""
    h = r + x * keep.to(x.dtype) * (1.0 / (1.0 - p)) if p > 0 else r + x
    return F.layer_norm(h, (h.shape[-1],), w, b, eps), h


KEYS = ("layernorm_bwd", "layernorm_bwd_h")  # the x form's handles, and the h form's (the autograd's on CUDA)


def ran_the_kernel(shape):
    return any(k[0] in KEYS and tuple(k[1]) == tuple(shape) for k in _dispatch._HANDLES)


@pytest.mark.parametrize("rows,d", [(37, 1000), (37, 768), (4133, 3080), (3, 4096), (3, 8192), (301, 5128)])
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_layernorm_gradients_against_float64(rows, d, p):
    eps = 1e-5
    x, r = rand(rows, d, scale=4, seed=1), rand(rows, d, scale=4, seed=2)
    w, b = rand(d, scale=2, seed=3), rand(d, seed=4)
    grad = torch.stack([rand(rows, d, seed=5), rand(rows, d, seed=6)])
    ins = [t.clone().requires_grad_() for t in (x, r, w, b)]
    for key in [k for k in _dispatch._HANDLES if k[0] in KEYS]:
        del _dispatch._HANDLES[key]  # so that ran_the_kernel sees this call (the cache key has no p)
    out = ops.layernorm(*ins, p, SEED, OFFSET, eps)
    out.backward(grad)
    # Rows over 4096 with dropout take the PyTorch composite on CUDA (the kernel would spill there).
    assert ran_the_kernel((rows, d)) == (p == 0.0 or d <= ops._LAYERNORM_BWD_MAX_D)
    keep = ops.dropout_keep(rows, d, p, SEED, OFFSET, x.device)
    ref = [t.double().requires_grad_() for t in (x, r, w, b)]
    y64, h64 = forward(*ref, keep, p, eps)
    (y64 * grad[0].double() + h64 * grad[1].double()).sum().backward()
    pl = [t.clone().requires_grad_() for t in (x, r, w, b)]
    yp, hp = forward(*pl, keep, p, eps)
    (yp.float() * grad[0].float() + hp.float() * grad[1].float()).sum().backward()
    rule("out", out[0], y64.detach(), yp)
    for name, o, r64, q in zip(("dx", "dresidual", "dweight", "dbias"), ins, ref, pl):
        assert o.grad is not None and o.grad.dtype == BF, name
        rule(name, o.grad, r64.grad, q.grad)


@pytest.mark.parametrize("p", [0.0, 0.25])
def test_the_kernel_matches_the_cpu_composite(p):
    """The CUDA kernel and the CPU composite (both float32 inside) on the same inputs, dropped elements
    of dx exactly where the mask drops them."""
    rows, d, eps = 45, 1000, 1e-5
    x, r, w, b = rand(rows, d, scale=4, seed=7), rand(rows, d, scale=4, seed=8), rand(d, seed=9), rand(d, seed=10)
    grad = torch.stack([rand(rows, d, seed=11), rand(rows, d, seed=12)])
    gpu = torch.ops.kittens.layernorm_backward(grad, x, r, w, b, p, SEED, OFFSET, eps)
    cpu = torch.ops.kittens.layernorm_backward(grad.cpu(), x.cpu(), r.cpu(), w.cpu(), b.cpu(), p, SEED,
                                               OFFSET, eps)
    for name, g, c in zip(("dx", "dresidual", "dweight", "dbias"), gpu, cpu):
        assert g.shape == c.shape and g.dtype == c.dtype, name
        scale = c.float().abs().max().item()
        assert (g.cpu().float() - c.float()).abs().max().item() <= 2 ** -7 * scale, name
    if p > 0:
        dropped = ~ops.dropout_keep(rows, d, p, SEED, OFFSET, x.device)
        assert dropped.any()
        assert (gpu[0][dropped] == 0).all()
        assert (gpu[1][dropped] != 0).any()


@pytest.mark.parametrize("p", [0.0, 0.25])
@pytest.mark.parametrize("rows,d", [(45, 1000), (7, 8192)])
def test_the_h_form_matches_the_cpu_composite(p, rows, d):
    """``layernorm_backward_h`` (the kernel from the forward's h) and its CPU composite on the same h:
    without dropout dx is not returned (it is dresidual), with dropout it is zero exactly where the mask
    drops; rows over 4096 with dropout take the composite on CUDA too."""
    eps = 1e-5
    x, r, w, b = rand(rows, d, scale=4, seed=7), rand(rows, d, scale=4, seed=8), rand(d, seed=9), rand(d, seed=10)
    h = ops.layernorm(x, r, w, b, p, SEED, OFFSET, eps)[1]
    grad = torch.stack([rand(rows, d, seed=11), rand(rows, d, seed=12)])
    gpu = torch.ops.kittens.layernorm_backward_h(grad, h, w, b, p, SEED, OFFSET, eps)
    cpu = torch.ops.kittens.layernorm_backward_h(grad.cpu(), h.cpu(), w.cpu(), b.cpu(), p, SEED, OFFSET, eps)
    for name, g, c in zip(("dx", "dresidual", "dweight", "dbias"), gpu, cpu):
        assert g.shape == c.shape and g.dtype == c.dtype, name
        if c.numel():
            scale = c.float().abs().max().item()
            assert (g.cpu().float() - c.float()).abs().max().item() <= 2 ** -7 * scale, name
    assert (gpu[0].numel() == 0) == (p == 0.0)
    if p > 0:
        dropped = ~ops.dropout_keep(rows, d, p, SEED, OFFSET, x.device)
        assert dropped.any()
        assert (gpu[0][dropped] == 0).all()
        assert (gpu[1][dropped] != 0).any()


def test_bad_inputs_name_the_argument():
    x, r, w, b = rand(4, 1000), rand(4, 1000), rand(1000), rand(1000)
    grad = torch.stack([rand(4, 1000), rand(4, 1000)])
    with pytest.raises(TypeError, match="residual has dtype torch.float32"):
        torch.ops.kittens.layernorm_backward(grad, x, r.float(), w, b, 0.0, 0, 0, 1e-5)


def test_a_transposed_x_gets_the_right_gradients():
    """x whose last dimension is not contiguous (a transpose): the op reads a dense copy
    (``_dispatch.rows_in_place``), so the gradients are LayerNorm's, against float64 by the test rule."""
    rows, d, eps = 37, 1000, 1e-5
    xt = rand(d, rows, scale=4, seed=13).t()
    assert xt.stride(-1) != 1
    r, w, b = rand(rows, d, scale=4, seed=14), rand(d, scale=2, seed=15), rand(d, seed=16)
    grad = torch.stack([rand(rows, d, seed=17), rand(rows, d, seed=18)])
    got = torch.ops.kittens.layernorm_backward(grad, xt, r, w, b, 0.0, 0, 0, eps)
    keep = torch.ones(rows, d, dtype=torch.bool, device=xt.device)
    ref = [t.double().requires_grad_() for t in (xt, r, w, b)]
    y64, h64 = forward(*ref, keep, 0.0, eps)
    (y64 * grad[0].double() + h64 * grad[1].double()).sum().backward()
    pl = [t.clone().requires_grad_() for t in (xt, r, w, b)]
    yp, hp = forward(*pl, keep, 0.0, eps)
    (yp.float() * grad[0].float() + hp.float() * grad[1].float()).sum().backward()
    for name, g, r64, q in zip(("dx", "dresidual", "dweight", "dbias"), got, ref, pl):
        assert g.shape == r64.shape and g.dtype == BF, name
        rule(name, g, r64.grad, q.grad)
