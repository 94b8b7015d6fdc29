"""kittens on torch CPU tensors: outputs of torch's kind, and autograd through the kernels.

Needs torch (scripts/test-python.sh installs it; in CI a missing torch fails, see conftest.py). The ops,
their gradients and torch.compile are tested in test_torch_ops.py.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU suite runs without it)")

import kittens  # noqa: E402
from test_cpu import attention_ref  # noqa: E402


def rand(*shape, gen):
    return (torch.rand(*shape, generator=gen, dtype=torch.float32) * 2 - 1).to(torch.bfloat16)


def rel_err(out, ref):
    out = out.to(torch.float64).numpy()
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_matmul_on_torch_cpu_tensors():
    g = torch.Generator().manual_seed(0)
    a, w = rand(45, 70, gen=g), rand(33, 70, gen=g)
    c = kittens.matmul(a, w.T)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and c.device.type == "cpu"
    ref = a.to(torch.float64).numpy() @ w.to(torch.float64).numpy().T
    assert rel_err(c, ref) < 1e-2
    out = torch.full((45, 33), float("nan"), dtype=torch.bfloat16)
    assert kittens.matmul(a, w.T, out=out) is out and torch.equal(out, c)
    # b row-major (K, N): read in place as well.
    assert rel_err(kittens.matmul(a, w.T.contiguous()), ref) < 1e-2
    # Every other row of w (b = w[::2].T: rows 140 elements apart) is read in place too.
    assert rel_err(kittens.matmul(a, w.T[:, ::2]), ref[:, ::2]) < 1e-2
    with pytest.raises(ValueError, match="a must have one dimension contiguous"):
        kittens.matmul(a[:, ::2], w.T[:35])


@pytest.mark.parametrize("causal", [False, True])
def test_attention_on_torch_cpu_tensors_both_layouts(causal):
    g = torch.Generator().manual_seed(1)
    q = rand(2, 40, 4, 64, gen=g).transpose(1, 2)  # (B, N, H, D) seen as (B, H, N, D)
    k = rand(2, 40, 2, 64, gen=g).transpose(1, 2)
    v = rand(2, 40, 2, 64, gen=g).transpose(1, 2)
    o = kittens.attention(q, k, v, causal=causal)
    assert o.stride() == q.stride()
    ref = attention_ref(*(x.to(torch.float32).numpy() for x in (q, k, v)), causal)
    assert rel_err(o, ref) < 1e-2
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(2, 1), v.float().repeat_interleave(2, 1), is_causal=causal
    )
    assert rel_err(sdpa.to(torch.bfloat16), ref) < 1e-2


def test_attention_backward_on_the_cpu_interpreter():
    """Autograd through kittens.attention on CPU tensors: the backward runs on the CPU interpreter and
    matches float64 autograd by the rule (twice torch's bf16 error plus a floor) at an odd length."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (rand(1, 2, 37, 32, gen=g).requires_grad_() for _ in range(3))
    do = rand(1, 2, 37, 32, gen=g)
    o = kittens.attention(q, k, v, causal=True)
    assert o.requires_grad
    o.backward(do)

    def grads(dtype):
        qq, kk, vv = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        oo = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
        return torch.autograd.grad(oo, (qq, kk, vv), do.to(dtype))

    ref, base = grads(torch.float64), grads(torch.bfloat16)
    for x, y, r in zip((q.grad, k.grad, v.grad), base, ref):
        r = r.numpy()
        assert rel_err(x, r) <= 2 * rel_err(y, r) + 1e-5
    with torch.no_grad():
        assert not kittens.attention(q, k, v).requires_grad


def test_attention_backward_form_is_checked():
    """The backward's launch form (``form=`` or ``KITTENS_ATTN_BWD``) is "two" or "atomic"; anything else
    is a ValueError naming the choices, on any device. On CPU both forms are the interpreter's."""
    g = torch.Generator().manual_seed(4)
    q = rand(1, 2, 19, 32, gen=g)
    lse = torch.zeros(1, 2, 19)
    with pytest.raises(ValueError, match="'two' or 'atomic'"):
        kittens._attention_backward(q, q, q, q, q, lse, False, form="three")
    a = kittens._attention_backward(q, q, q, q, q, lse, True, form="atomic")
    b = kittens._attention_backward(q, q, q, q, q, lse, True, form="two")
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_matmul_backward_runs_through_the_gemm():
    """kittens.matmul has a backward (dA = dC·Bᵀ and dB = Aᵀ·dC through the GEMM; test_torch_ops.py
    checks its values against float64)."""
    g = torch.Generator().manual_seed(3)
    a, w = rand(8, 16, gen=g).requires_grad_(), rand(8, 16, gen=g).requires_grad_()
    kittens.matmul(a, w.T).float().sum().backward()
    assert a.grad is not None and w.grad is not None
    ref = torch.ones(8, 8, dtype=torch.float64) @ w.detach().double()
    assert rel_err(a.grad, ref.numpy()) < 1e-2


def test_matmul_backward_op_is_the_two_products():
    """kittens::matmul_backward (one dispatch for dA and dB, the traced backward's) against the two matmul
    calls it stands for, bit for bit; an unrequested gradient is empty; a double backward (create_graph)
    still reaches the differentiable matmul; opcheck on the op."""
    g = torch.Generator().manual_seed(5)
    grad, a, w = rand(9, 24, gen=g), rand(9, 40, gen=g), rand(24, 40, gen=g)
    da, db = torch.ops.kittens.matmul_backward(grad, a, w.T, True, True)
    assert torch.equal(da, kittens.matmul(grad, w)) and torch.equal(db, kittens.matmul(a.T, grad))
    da, db = torch.ops.kittens.matmul_backward(grad, a, w.T, False, True)
    assert da.numel() == 0 and torch.equal(db, kittens.matmul(a.T, grad))
    torch.library.opcheck(torch.ops.kittens.matmul_backward.default, (grad, a, w.T, True, False))
    x = a.detach().requires_grad_()
    (gx,) = torch.autograd.grad(kittens.matmul(x, w.T).float().square().sum(), x, create_graph=True)
    assert gx.requires_grad
    gx.float().sum().backward()
    assert x.grad is not None
