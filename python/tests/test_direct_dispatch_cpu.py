"""The kittens ops' direct autograd kernel (kittens._opcall._direct_autograd): a dispatched call with nothing
traced and no gradient to record (a compiled graph's call) runs the op's body without custom_op's layers;
a call with a gradient to record, or seen through FakeTensor, still takes custom_op's own path. CPU
tensors (the interpreter), odd shapes, against float64 references.

torch is required in CI (KITTENS_REQUIRE_TORCH=1).
"""

import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

import kittens.ops as ops  # noqa: E402

BF = torch.bfloat16


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float32) * 2 - 1).to(BF)


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


@pytest.fixture
def backend_calls(monkeypatch):
    """Counts the calls that reach custom_op's backend wrapper of kittens::matmul (its slow path)."""
    calls = []
    fns = ops.matmul._backend_fns
    (key, real), = fns.items()

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setitem(fns, key, counted)
    return calls


def test_untraced_no_grad_call_runs_the_body_directly(backend_calls):
    a, b = rand(37, 29, seed=1), rand(29, 45, seed=2)
    with torch.no_grad():
        c = torch.ops.kittens.matmul.default(a, b)
    assert backend_calls == []
    ref = a.double() @ b.double()
    assert c.shape == (37, 45) and c.dtype == BF
    assert rel(c, ref) <= 2 * rel((a.float() @ b.float()).to(BF), ref) + 1e-5
    # Inputs that require grad, grad mode off: still nothing to record.
    with torch.no_grad():
        c2 = torch.ops.kittens.matmul.default(a.requires_grad_(), b)
    assert backend_calls == [] and c2.grad_fn is None and torch.equal(c, c2)


def test_a_call_with_a_gradient_to_record_keeps_custom_ops_path(backend_calls):
    a, b = rand(19, 23, seed=3).requires_grad_(), rand(23, 17, seed=4).requires_grad_()
    c = torch.ops.kittens.matmul.default(a, b)
    assert len(backend_calls) == 1 and c.grad_fn is not None
    g = rand(19, 17, seed=5)
    c.backward(g)
    ad, bd, gd = a.detach().double(), b.detach().double(), g.double()
    assert rel(a.grad, gd @ bd.t()) < 2e-2 and rel(b.grad, ad.t() @ gd) < 2e-2


def test_fake_tensor_calls_reach_the_fake(backend_calls):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode() as mode, torch.no_grad():
        a = mode.from_tensor(rand(11, 13, seed=6))
        b = mode.from_tensor(rand(13, 7, seed=7))
        c = torch.ops.kittens.matmul.default(a, b)
    assert isinstance(c, FakeTensor) and c.shape == (11, 7) and backend_calls == []
    # The fake's refusal, not the body's: a K mismatch is named at trace time.
    with FakeTensorMode() as mode, torch.no_grad(), pytest.raises(ValueError, match="b needs K = 13"):
        torch.ops.kittens.matmul.default(mode.from_tensor(rand(11, 13, seed=8)),
                                         mode.from_tensor(rand(12, 7, seed=9)))


def test_tuple_outputs_and_default_arguments():
    """matmul_backward: two outputs, trailing arguments equal to their defaults (the dispatcher may drop
    them before the kernel), a gradient not asked for as an empty tensor."""
    g, a, b = rand(21, 15, seed=10), rand(21, 9, seed=11), rand(9, 15, seed=12)
    with torch.no_grad():
        da, db = torch.ops.kittens.matmul_backward.default(g, a, b)
        da2, db2 = torch.ops.kittens.matmul_backward.default(g, a, b, False, True)
    gd, ad, bd = g.double(), a.double(), b.double()
    assert rel(da, gd @ bd.t()) < 2e-2 and rel(db, ad.t() @ gd) < 2e-2
    assert da2.numel() == 0 and torch.equal(db, db2)


def test_a_compiled_graph_calls_the_body_directly(backend_calls):
    """torch.compile (AOTAutograd, graphs run as traced): tracing reaches the fake; the compiled forward and
    backward then call the ops with grad mode off, which take the direct kernel (custom_op's backend
    wrapper is never reached); values and gradients those of the eager call."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def f(a, b):
        return torch.ops.kittens.matmul.default(a, b).float().square().sum()

    compiled = torch.compile(f, backend=aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm)),
                             fullgraph=True)
    a, b = rand(33, 24, seed=13), rand(24, 40, seed=14)
    # The first run: tracing, and on some torch versions a dispatch mode of AOTAutograd's that inspects
    # the custom ops' outputs once (custom_op's path, rightly).
    compiled(a.clone().requires_grad_(), b.clone().requires_grad_()).backward()
    backend_calls.clear()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    loss = compiled(ac, bc)
    loss.backward()
    assert backend_calls == []
    ae, be = a.clone().requires_grad_(), b.clone().requires_grad_()
    f(ae, be).backward()
    assert len(backend_calls) == 1  # the eager call with a gradient to record: custom_op's path
    assert torch.allclose(loss, f(a, b), rtol=1e-3)
    assert torch.allclose(ac.grad.float(), ae.grad.float(), rtol=2e-2, atol=1e-2)
    assert torch.allclose(bc.grad.float(), be.grad.float(), rtol=2e-2, atol=1e-2)


def test_the_kernel_is_on_the_ops_with_autograd_that_mutate_nothing():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in ("matmul", "matmul_backward", "attention", "rmsnorm", "swiglu", "linear_cross_entropy_forward"):
        assert has(f"kittens::{name}", "AutogradCPU") and has(f"kittens::{name}", "AutogradCUDA"), name
    # cross_entropy_ writes its logits in place: custom_op's path alone (version counters).
    assert ops.cross_entropy_._opoverload._schema.is_mutable
    assert not has("kittens::cross_entropy_", "AutogradCPU")
