"""Issue 33's "the fake kernels refuse the same inputs as the real ones", on CPU tensors: each bad input
below is refused by the op itself (the CPU interpreter path) and by its fake implementation under
FakeTensorMode (what torch.compile traces with), with the same exception type and a message naming the
argument; and ``torch.library.opcheck`` on the ops test_torch_ops.py does not cover (rmsnorm, swiglu
and their backwards, rmsnorm_y).

torch is required in CI (scripts/test-python.sh sets KITTENS_REQUIRE_TORCH=1).
"""

import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch  # a missing torch is an error in CI, never a skip
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import kittens  # noqa: E402
import kittens.ops  # noqa: E402,F401  (registers torch.ops.kittens)

BF = torch.bfloat16
F32 = torch.float32
K = torch.ops.kittens


def rand(*shape, dtype=BF, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype)


def tables(n, d):
    return kittens.rotary_tables(n, d, like=rand(1, 1, n, d))


# (op, arguments, exception type, words the message must hold)
BAD = {
    "rmsnorm x float32": (K.rmsnorm, lambda: (rand(3, 768, dtype=F32), None, rand(768), 1e-6), TypeError, "x"),
    "rmsnorm weight float32": (K.rmsnorm, lambda: (rand(3, 768), None, rand(768, dtype=F32), 1e-6), TypeError,
                               "weight"),
    "rmsnorm weight shape": (K.rmsnorm, lambda: (rand(3, 768), None, rand(700), 1e-6), ValueError, "weight"),
    "rmsnorm residual shape": (K.rmsnorm, lambda: (rand(3, 768), rand(2, 768), rand(768), 1e-6), ValueError,
                               "residual"),
    "rmsnorm_y x float32": (K.rmsnorm_y, lambda: (rand(3, 768, dtype=F32), rand(768), 1e-6), TypeError, "x"),
    "rmsnorm_y weight shape": (K.rmsnorm_y, lambda: (rand(3, 768), rand(700), 1e-6), ValueError, "weight"),
    "rmsnorm_backward grad float32": (K.rmsnorm_backward, lambda: (rand(3, 768, dtype=F32), rand(3, 768),
                                                                   rand(768), None, 1e-6), TypeError, "grad"),
    "rmsnorm_backward grad_h shape": (K.rmsnorm_backward, lambda: (rand(3, 768), rand(3, 768), rand(768),
                                                                   rand(3, 760), 1e-6), ValueError, "grad_h"),
    "swiglu gate float32": (K.swiglu, lambda: (rand(3, 80, dtype=F32), rand(3, 80)), TypeError, "gate"),
    "swiglu up shape": (K.swiglu, lambda: (rand(3, 80), rand(3, 72)), ValueError, "up"),
    "swiglu_backward gate float32": (K.swiglu_backward, lambda: (rand(3, 80), rand(3, 80, dtype=F32),
                                                                 rand(3, 80)), TypeError, "gate"),
    "swiglu_backward up shape": (K.swiglu_backward, lambda: (rand(3, 80), rand(3, 80), rand(3, 72)), ValueError,
                                 "up"),
    "attention head dim 33": (K.attention, lambda: (rand(1, 2, 5, 33), rand(1, 2, 5, 33), rand(1, 2, 5, 33),
                                                    False, None, False, True), ValueError, "head dim"),
    "attention GQA 3 over 2": (K.attention, lambda: (rand(1, 3, 5, 32), rand(1, 2, 5, 32), rand(1, 2, 5, 32),
                                                     False, None, False, True), ValueError, "heads"),
    "attention scale -1": (K.attention, lambda: (rand(1, 2, 5, 32), rand(1, 2, 5, 32), rand(1, 2, 5, 32),
                                                 False, -1.0, False, True), ValueError, "scale"),
    "attention head dim strided": (K.attention, lambda: (rand(1, 2, 5, 64)[..., ::2], rand(1, 2, 5, 32),
                                                         rand(1, 2, 5, 32), False, None, False, True),
                                   ValueError, "head dim"),
    "attention bottom-right without causal": (K.attention, lambda: (rand(1, 2, 5, 32), rand(1, 2, 7, 32),
                                                                    rand(1, 2, 7, 32), False, None, True, True),
                                              ValueError, "causal"),
    "rotary head dim 30": (K.rotary, lambda: (rand(1, 2, 5, 30), *tables(5, 30), False), ValueError,
                           "head dimension"),
    "rotary q float32": (K.rotary, lambda: (rand(1, 2, 5, 32, dtype=F32), *tables(5, 32), False), TypeError, "q"),
    "layernorm p 1": (K.layernorm, lambda: (rand(3, 768), rand(3, 768), rand(768), rand(768), 1.0, 0, 0, 1e-5),
                      ValueError, "dropout p"),
    "layernorm x float32": (K.layernorm, lambda: (rand(3, 768, dtype=F32), rand(3, 768), rand(768), rand(768),
                                                  0.0, 0, 0, 1e-5), TypeError, "x"),
    "matmul inner sizes": (K.matmul, lambda: (rand(5, 8), rand(7, 6)), (ValueError, RuntimeError), "a @ b"),
}


def _call_fake(op, args):
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        return op(*fake)


@pytest.mark.parametrize("case", list(BAD))
def test_fake_refuses_what_the_op_refuses(case):
    op, make, exc, words = BAD[case]
    with pytest.raises(exc, match=words) as real:
        op(*make())
    with pytest.raises(exc, match=words) as fake:
        _call_fake(op, make())
    # The same kind of error, not merely some error.
    assert isinstance(fake.value, type(real.value)) or isinstance(real.value, type(fake.value)), (real, fake)


def test_fakes_take_what_the_ops_take():
    """The good neighbours of the bad inputs above run on both (a fake that refuses them would break a
    graph that runs eagerly)."""
    good = [
        (K.rmsnorm, (rand(3, 768), rand(3, 768), rand(768), 1e-6)),
        (K.rmsnorm_backward, (rand(3, 768), rand(3, 768), rand(768), rand(3, 768), 1e-6)),
        (K.rmsnorm_y, (rand(3, 768), rand(768), 1e-6)),
        (K.swiglu, (rand(3, 80), rand(3, 80))),
        (K.swiglu_backward, (rand(3, 80), rand(3, 80), rand(3, 80))),
        (K.attention, (rand(1, 2, 5, 64)[..., :32], rand(1, 1, 7, 32), rand(1, 7, 1, 32).transpose(1, 2), True,
                       0.3, True, True)),
        (K.rotary, (rand(1, 5, 2, 32).transpose(1, 2), *tables(5, 32), True)),
        (K.layernorm, (rand(3, 768), rand(3, 768), rand(768), rand(768), 0.5, 1, 0, 1e-5)),
    ]
    for op, args in good:
        real = op(*args)
        fake = _call_fake(op, args)
        reals = real if isinstance(real, tuple) else (real,)
        fakes = fake if isinstance(fake, tuple) else (fake,)
        for r, f in zip(reals, fakes):
            assert (tuple(r.shape), r.dtype) == (tuple(f.shape), f.dtype), op


def test_opcheck_rmsnorm_and_swiglu():
    x, r, w = rand(3, 776, seed=1), rand(3, 776, seed=2), rand(776, seed=3)
    torch.library.opcheck(K.rmsnorm.default, (x.requires_grad_(), r.requires_grad_(), w.requires_grad_(), 1e-6))
    torch.library.opcheck(K.rmsnorm.default, (rand(2, 768, seed=4), None, rand(768, seed=5), 1e-6))
    torch.library.opcheck(K.rmsnorm_y.default, (rand(3, 776, seed=12).requires_grad_(), w, 1e-6))
    # rmsnorm_y is rmsnorm's first output, gradients included
    xy, wy = rand(3, 776, seed=13).requires_grad_(), rand(776, seed=14).requires_grad_()
    gy = rand(3, 776, seed=15)
    K.rmsnorm_y(xy, wy, 1e-6).backward(gy)
    x2, w2 = xy.detach().clone().requires_grad_(), wy.detach().clone().requires_grad_()
    y2 = K.rmsnorm(x2, None, w2, 1e-6)[0]
    y2.backward(gy)
    assert torch.equal(K.rmsnorm_y(xy, wy, 1e-6), y2)
    assert torch.equal(xy.grad, x2.grad) and torch.equal(wy.grad, w2.grad)
    g, h = rand(3, 776, seed=6), rand(3, 776, seed=7)
    torch.library.opcheck(K.rmsnorm_backward.default, (g, h, w.detach(), rand(3, 776, seed=8), 1e-6))
    gate, up = rand(5, 88, seed=9).requires_grad_(), rand(5, 88, seed=10).requires_grad_()
    torch.library.opcheck(K.swiglu.default, (gate, up))
    torch.library.opcheck(K.swiglu_backward.default, (rand(5, 88, seed=11), gate.detach(), up.detach()))


def test_opcheck_loss_ops():
    """The per-chunk cross-entropy (in place over the logits) and the fused linear + cross-entropy op."""
    g = torch.Generator().manual_seed(0)
    logits = (torch.rand(5, 300, generator=g) * 4 - 2).to(BF)
    labels = torch.tensor([3.0, -1.0, 299.0, 0.0, 17.0])  # -1: an ignored row
    scale = torch.tensor([0.2])
    torch.library.opcheck(K.cross_entropy_.default, (logits, labels, scale, 0.1))
    h = (torch.rand(7, 64, generator=g) * 2 - 1).to(BF).requires_grad_()
    w = (torch.rand(300, 64, generator=g) * 0.2 - 0.1).to(BF).requires_grad_()
    lab = torch.tensor([1, 2, -100, 299, 0, 5, 7])
    torch.library.opcheck(K.linear_cross_entropy_forward.default, (h, w, lab, scale, -100, 0.0, 4, True, True))


def test_alibi_slopes_requiring_grad_raise():
    """Issue 33's "no silent gradient drop": the attention backward has no gradient for ALiBi's slopes, so
    slopes that require grad are refused by name (they were dropped: their .grad stayed None); detached
    slopes run."""
    q, k, v = (rand(1, 2, 5, 32, seed=s).requires_grad_() for s in (20, 21, 22))
    slopes = torch.tensor([0.5, 0.25], requires_grad=True)
    with pytest.raises(RuntimeError, match="alibi_slopes"):
        kittens.attention(q, k, v, causal=True, alibi_slopes=slopes)
    compiled = torch.compile(lambda q, k, v, s: kittens.attention(q, k, v, causal=True, alibi_slopes=s),
                             fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="alibi_slopes"):
        compiled(q, k, v, slopes)
    o = kittens.attention(q, k, v, causal=True, alibi_slopes=slopes.detach())
    o.float().sum().backward()
    assert all(t.grad is not None for t in (q, k, v))


def test_cuda_fake_refuses_the_strides_the_cuda_op_refuses():
    """The CUDA op reads q, k, v in their own strides only with the head dim contiguous and every other stride
    a multiple of 8 elements (its TMA tensor maps; ``kittens._dispatch._attn.attn_strides``, which the real op
    runs before it prepares anything, unless q, k, v are dense in one layout). Its fake, on fake CUDA tensors
    (what torch.compile traces a CUDA graph with; no GPU needed), refuses the same views with the same error,
    and takes their aligned neighbours."""
    from kittens._dispatch._attn import attn_strides

    # (q's width before the slice to 32 columns, what the message names): a row stride of 36 or 44 elements
    # (its head stride, 8 rows, a multiple of 8).
    for width, what in ((36, "sequence stride 36"), (44, "sequence stride 44")):
        with FakeTensorMode():
            q = torch.empty(1, 2, 8, width, device="cuda", dtype=BF)[..., :32]
            k = torch.empty(1, 2, 7, 32, device="cuda", dtype=BF)
            shape, stride = tuple(q.shape), tuple(q.stride())
            with pytest.raises(ValueError, match=what) as fake:
                K.attention(q, k, k, False, None, False, True)
        with pytest.raises(ValueError) as real:
            attn_strides("q", shape, stride)
        assert str(fake.value) == str(real.value)
    # A head dim that is not contiguous, on k.
    with FakeTensorMode():
        q = torch.empty(1, 2, 5, 32, device="cuda", dtype=BF)
        k = torch.empty(1, 2, 7, 64, device="cuda", dtype=BF)[..., ::2]
        with pytest.raises(ValueError, match="k strides.*head dim"):
            K.attention(q, k, q, False, None, False, True)
    # Aligned views (row strides of 40 and 96 elements) and dense tensors in two layouts are taken.
    with FakeTensorMode():
        q = torch.empty(1, 2, 5, 40, device="cuda", dtype=BF)[..., :32]
        k = torch.empty(1, 7, 2, 48, device="cuda", dtype=BF)[..., :32].transpose(1, 2)
        v = torch.empty(1, 2, 7, 32, device="cuda", dtype=BF)
        o, lse = K.attention(q, k, v, True, 0.3, True, True)
        assert tuple(o.shape) == (1, 2, 5, 32) and tuple(lse.shape) == (1, 2, 5)
