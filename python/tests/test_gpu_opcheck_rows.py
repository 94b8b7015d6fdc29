"""The CUDA half of test_fake_refusals_cpu.py (Hopper, sm_90a): ``torch.library.opcheck`` of rmsnorm,
swiglu, their backwards and the loss ops on CUDA tensors (test_gpu_torch_ops.py covers the others), and
the fakes refusing what the CUDA ops refuse, with the same exception type and the argument named.

Skips without a CUDA device of compute capability 9.0 (CI has none).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(
        f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True
    )

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import kittens  # noqa: E402
import kittens.ops  # noqa: E402,F401

BF, F32, K = torch.bfloat16, torch.float32, torch.ops.kittens


def rand(*shape, dtype=BF, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype).cuda()


def test_opcheck_rows_and_loss_ops_cuda():
    x, r, w = rand(3, 776, seed=1), rand(3, 776, seed=2), rand(776, seed=3)
    torch.library.opcheck(K.rmsnorm.default, (x.requires_grad_(), r.requires_grad_(), w.requires_grad_(), 1e-6))
    torch.library.opcheck(K.rmsnorm_backward.default, (rand(3, 776, seed=6), rand(3, 776, seed=7), w.detach(),
                                                       rand(3, 776, seed=8), 1e-6))
    gate, up = rand(5, 88, seed=9).requires_grad_(), rand(5, 88, seed=10).requires_grad_()
    torch.library.opcheck(K.swiglu.default, (gate, up))
    torch.library.opcheck(K.swiglu_backward.default, (rand(5, 88, seed=11), gate.detach(), up.detach()))
    logits = rand(5, 304, seed=12) * 2
    labels = torch.tensor([3.0, -1.0, 303.0, 0.0, 17.0], device="cuda")
    scale = torch.tensor([0.2], device="cuda")
    torch.library.opcheck(K.cross_entropy_.default, (logits, labels, scale, 0.1))
    h, wt = rand(7, 64, seed=13).requires_grad_(), (rand(304, 64, seed=14) * 0.1).requires_grad_()
    lab = torch.tensor([1, 2, -100, 303, 0, 5, 7], device="cuda")
    torch.library.opcheck(K.linear_cross_entropy_forward.default, (h, wt, lab, scale, -100, 0.0, 4, True, True))


BAD = {
    "rmsnorm weight shape": (K.rmsnorm, lambda: (rand(3, 768), None, rand(700), 1e-6), ValueError, "weight"),
    "swiglu up shape": (K.swiglu, lambda: (rand(3, 80), rand(3, 72)), ValueError, "up"),
    "swiglu gate float32": (K.swiglu, lambda: (rand(3, 80, dtype=F32), rand(3, 80)), TypeError, "gate"),
    "attention head dim 160": (K.attention, lambda: (rand(1, 2, 5, 160), rand(1, 2, 5, 160), rand(1, 2, 5, 160),
                                                     False, None, False, True), ValueError, "head dim"),
    "attention scale -1": (K.attention, lambda: (rand(1, 2, 5, 64), rand(1, 2, 5, 64), rand(1, 2, 5, 64),
                                                 False, -1.0, False, True), ValueError, "scale"),
    "rotary head dim 30": (K.rotary, lambda: (rand(1, 2, 5, 30), *kittens.rotary_tables(5, 30, like=rand(1, 1, 5, 30)),
                                              False), ValueError, "head dimension"),
    "layernorm p 1": (K.layernorm, lambda: (rand(3, 768), rand(3, 768), rand(768), rand(768), 1.0, 0, 0, 1e-5),
                      ValueError, "dropout p"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_fake_refuses_what_the_cuda_op_refuses(case):
    op, make, exc, words = BAD[case]
    with pytest.raises(exc, match=words):
        op(*make())
    with pytest.raises(exc, match=words):
        with FakeTensorMode() as mode:
            op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in make()])
