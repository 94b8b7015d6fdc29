"""kittens' torch.library ops on CUDA tensors (Hopper, sm_90a): ``torch.library.opcheck`` for every op,
gradients against float64 autograd by FlashAttention's rule at odd shapes and mixed / strided layouts,
the layernorm kernel's dropout mask against :func:`kittens.ops.dropout_keep` on the GPU, and
``torch.compile(fullgraph=True)`` (inductor, and ``dynamic=True`` over two sequence lengths) over a
transformer block of kittens ops against eager.

Skips without a CUDA device of compute capability 9.0 (CI has none); the CPU half is test_torch_ops.py.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(
        f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True
    )

import kittens  # noqa: E402
import kittens.ops as ops  # noqa: E402
from test_torch_ops import (  # noqa: E402
    BF,
    attention_ref,
    block,
    block_inputs,
    check_rule,
    layernorm_ref,
    rotary_ref,
)


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float32) * 2 - 1).to(BF).cuda()


def grads_of(fn, inputs, grad_outputs, dtype):
    xs = [t.detach().to(dtype).requires_grad_() for t in inputs]
    outs = fn(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gs = torch.autograd.grad(outs, xs, [g.to(dtype) for g in grad_outputs], allow_unused=True)
    return [o.detach() for o in outs], list(gs)


def test_opcheck_matmul_cuda():
    a = rand(129, 72, seed=1).requires_grad_()
    w = rand(264, 72, seed=2).requires_grad_()
    torch.library.opcheck(torch.ops.kittens.matmul.default, (a, w.t()))
    b = rand(72, 100, seed=3).requires_grad_()
    torch.library.opcheck(torch.ops.kittens.matmul.default, (a, b))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal,bottom_right,scale", [(False, False, None), (True, True, 0.3), (True, False, None)])
def test_opcheck_attention_cuda(d, causal, bottom_right, scale):
    q = rand(1, 200, 4, d, seed=4).transpose(1, 2).requires_grad_()  # HF: q a transposed view
    k = rand(1, 2, 333, d, seed=5).requires_grad_()  # k, v dense (B, H_kv, N, D)
    v = rand(1, 2, 333, d, seed=6).requires_grad_()
    torch.library.opcheck(torch.ops.kittens.attention.default, (q, k, v, causal, scale, bottom_right, True))


def test_opcheck_attention_backward_cuda():
    q, k, v = rand(1, 4, 150, 64, seed=7), rand(1, 2, 190, 64, seed=8), rand(1, 2, 190, 64, seed=9)
    with torch.no_grad():
        out, lse = torch.ops.kittens.attention(q, k, v, True, None, True, False)
    do = rand(1, 4, 150, 64, seed=10)
    torch.library.opcheck(torch.ops.kittens.attention_backward.default, (do, q, k, v, out, lse, True, None, True))


def test_opcheck_layernorm_cuda():
    x, r = rand(37, 1032, seed=11).requires_grad_(), rand(37, 1032, seed=12).requires_grad_()
    w, b = rand(1032, seed=13).requires_grad_(), rand(1032, seed=14).requires_grad_()
    torch.library.opcheck(torch.ops.kittens.layernorm.default, (x, r, w, b, 0.1, ops.seed_arg(2**63 + 9), 5, 1e-5))
    g = rand(2, 37, 1032, seed=15)
    torch.library.opcheck(torch.ops.kittens.layernorm_backward.default,
                          (g, x.detach(), r.detach(), w.detach(), b.detach(), 0.1, 3, 0, 1e-5))


@pytest.mark.parametrize("interleaved", [False, True])
def test_opcheck_rotary_cuda(interleaved):
    q = rand(2, 77, 3, 64, seed=20).transpose(1, 2).requires_grad_()
    cos, sin = kittens.rotary_tables(77, 64, like=q)
    torch.library.opcheck(torch.ops.kittens.rotary.default, (q, cos, sin, interleaved))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal,br,scale", [(True, False, None), (True, True, 0.2), (False, False, 0.5)])
@pytest.mark.parametrize("return_lse", [False, True])
def test_attention_gradients_cuda(d, causal, br, scale, return_lse):
    q = rand(2, 301, 4, d, seed=30).transpose(1, 2)  # q (B, N, H, D) seen as (B, H, N, D)
    k = rand(2, 2, 257, d, seed=31)  # dense (B, H_kv, N_kv, D)
    v = rand(2, 2, 2 * 257, d, seed=32)[:, :, ::2]  # a strided slice
    do = rand(2, 4, 301, d, seed=33)
    dlse = rand(2, 4, 301, seed=34).float()
    align = "bottom_right" if br else "top_left"

    def ours_fn(q, k, v):
        r = kittens.attention(q, k, v, causal=causal, scale=scale, causal_align=align, return_lse=return_lse)
        return r if return_lse else (r,)

    def ref_fn(q, k, v):
        o, lse = attention_ref(q, k, v, causal, scale, br)
        return (o, torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)) if return_lse else (o,)

    gouts = (do, dlse) if return_lse else (do,)
    outs, g = grads_of(ours_fn, (q, k, v), gouts, BF)
    ref_outs, gr = grads_of(ref_fn, (q, k, v), gouts, torch.float64)
    base_outs, gb = grads_of(ref_fn, (q, k, v), gouts, BF)
    check_rule(outs[0], base_outs[0], ref_outs[0], "out")
    for x, y, z, name in zip(g, gb, gr, "qkv"):
        check_rule(x, y, z, f"d{name}")


def test_matmul_and_rotary_gradients_cuda():
    a, w, dc = rand(300, 136, seed=40), rand(200, 136, seed=41), rand(300, 200, seed=42)
    (o,), g = grads_of(lambda a, w: kittens.matmul(a, w.t()), (a, w), (dc,), BF)
    (r,), gr = grads_of(lambda a, w: a @ w.t(), (a, w), (dc,), torch.float64)
    (bo,), gb = grads_of(lambda a, w: a @ w.t(), (a, w), (dc,), BF)
    check_rule(o, bo, r, "matmul")
    for x, y, z, name in zip(g, gb, gr, "ab"):
        check_rule(x, y, z, f"d{name}")
    q = rand(2, 33, 3, 64, seed=43).transpose(1, 2)
    cos, sin = kittens.rotary_tables(33, 64, like=q)
    do = rand(2, 3, 33, 64, seed=44)
    (o,), g = grads_of(lambda q, c, s: kittens.rotary(q, c, s), (q, cos, sin), (do,), BF)
    (r,), gr = grads_of(lambda q, c, s: rotary_ref(q, c, s), (q, cos, sin), (do,), torch.float64)
    (bo,), gb = grads_of(lambda q, c, s: rotary_ref(q, c, s), (q, cos, sin), (do,), BF)
    check_rule(o, bo, r, "rotary")
    for x, y, z, name in zip(g, gb, gr, ("q", "cos", "sin")):
        check_rule(x, y, z, f"d{name}")


def test_layernorm_mask_and_gradients_cuda():
    rows, d, p, seed = 45, 1032, 0.2, 2**63 + 11
    ones, zeros = torch.ones(rows, d, dtype=BF, device="cuda"), torch.zeros(rows, d, dtype=BF, device="cuda")
    with torch.no_grad():
        _, h = kittens.layernorm(ones, zeros, ones[0], zeros[0], p, seed, offset=7)
    keep = ops.dropout_keep(rows, d, p, seed, 7, "cuda")
    assert torch.equal(h != 0, keep)
    x, r = rand(rows, d, seed=50), rand(rows, d, seed=51)
    w, b = (1 + rand(d, seed=52).float() * 0.5).to(BF), rand(d, seed=53)
    dy, dh = rand(rows, d, seed=54), rand(rows, d, seed=55)
    keep = ops.dropout_keep(rows, d, p, 3, 0, "cuda")
    outs, g = grads_of(lambda *t: kittens.layernorm(*t, p, 3), (x, r, w, b), (dy, dh), BF)
    ref_outs, gr = grads_of(lambda *t: layernorm_ref(*t, keep, p), (x, r, w, b), (dy, dh), torch.float64)
    base_outs, gb = grads_of(lambda *t: layernorm_ref(*t, keep, p), (x, r, w, b), (dy, dh), BF)
    for o, bo, ro, name in zip(outs, base_outs, ref_outs, ("y", "h")):
        check_rule(o, bo, ro, name)
    for x_, y_, z_, name in zip(g, gb, gr, ("x", "residual", "weight", "bias")):
        check_rule(x_, y_, z_, f"d{name}")


def run_block(f, params, tables):
    ps = [t.detach().clone().requires_grad_() for t in params]
    out, h = f(*ps, *tables)
    (out.float().square().sum() + h.float().sum()).backward()
    return [out.detach(), h.detach()] + [p.grad for p in ps]


def test_compile_fullgraph_block_cuda():
    torch._dynamo.reset()
    params, tables = block_inputs(200, 90, hd=64, device="cuda")
    eager = run_block(block, params, tables)
    got = run_block(torch.compile(block, fullgraph=True), params, tables)
    for a, b in zip(got, eager):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_compile_dynamic_two_lengths_cuda():
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    for n, seed in ((130, 100), (257, 110)):
        params, tables = block_inputs(n, seed, hd=64, device="cuda")
        eager = run_block(block, params, tables)
        got = run_block(compiled, params, tables)
        for a, b in zip(got, eager):
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
