"""Attention on torch CPU tensors with q, k, v, out each in its own strides, read in place by the strided
program on the CPU interpreter (``kittens_kernels::attn_strides``): forward and gradients against
float64 autograd by FlashAttention's rule at odd lengths (q, k, v sliced out of a fused projection; a
Hugging Face call with q transposed and k, v dense; rows padded past the head dim), the interpreter
handed the caller's own addresses (no copy), ``out=`` written in place with its gaps untouched, the
``return_lse`` gradient folded into the one backward run, and the refusal of strides the kernel cannot
take, naming the tensor and the stride. The CUDA half is test_gpu_attn_strides.py.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU suite runs without it)")

import kittens  # noqa: E402
from kittens import _kittens  # noqa: E402
from strided_attn import check_against_float64, views  # noqa: E402
from test_torch_ops import BF, attention_ref, check_rule, rand  # noqa: E402


CASES = [
    # kind, (B, H, H_kv, N, N_kv, D), causal, bottom_right
    ("fused", (1, 4, 2, 37, 37, 32), True, False),
    ("hf", (2, 2, 1, 19, 41, 64), True, True),
    ("padded", (1, 2, 2, 33, 27, 32), False, False),
]


class Calls:
    """Records the addresses the interpreter's entry points are handed (q, k, v first)."""

    def __init__(self, monkeypatch):
        self.fwd, self.bwd = [], []
        fwd, bwd = _kittens.attention, _kittens.attention_backward_cpu

        def spy_fwd(q, k, v, out, *a, **kw):
            if out is not None:  # the run (the first call only checks)
                self.fwd.append((q[0], k[0], v[0], out[0]))
            return fwd(q, k, v, out, *a, **kw)

        def spy_bwd(*a, **kw):
            self.bwd.append(a)
            return bwd(*a, **kw)

        monkeypatch.setattr(_kittens, "attention", spy_fwd)
        monkeypatch.setattr(_kittens, "attention_backward_cpu", spy_bwd)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-" + "-".join(map(str, c[1])) + f"-{c[2]}{c[3]}")
@pytest.mark.parametrize("return_lse", [False, True])
def test_strided_attention_matches_float64_in_place(case, return_lse, monkeypatch):
    kind, (b, h, hk, n, nk, d), causal, br = case
    q, k, v = views(rand, kind, b, h, hk, n, nk, d, seed=3)
    assert not q.is_contiguous()
    do = rand(b, h, n, d, seed=9)
    dlse = rand(b, h, n, seed=10).float()
    align = "bottom_right" if br else "top_left"
    calls = Calls(monkeypatch)
    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
    r = kittens.attention(qq, kk, vv, causal=causal, causal_align=align, return_lse=return_lse)
    o, lse = r if return_lse else (r, None)
    assert calls.fwd == [(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())]  # read in place
    loss = (o.float() * do.float()).sum()
    if return_lse:
        loss = loss + (lse.masked_fill(torch.isinf(lse), 0) * dlse).sum()
    loss.backward()
    assert len(calls.bwd) == 1  # the lse's gradient rides in the one backward run
    grads = (qq.grad, kk.grad, vv.grad)
    check_against_float64(o, grads, q, k, v, do, dlse, causal, br, return_lse)


def test_out_given_in_its_own_strides_is_written_in_place():
    q, k, v = views(rand, "fused", 1, 2, 1, 29, 29, 32, seed=20)
    buf = torch.full((1, 29, 2, 32 + 16), 7.0, dtype=BF)
    out = buf[..., :32].transpose(1, 2)
    assert kittens.attention(q, k, v, causal=True, out=out) is out
    assert torch.all(buf[..., 32:] == 7.0)  # the gaps untouched
    ref, _ = attention_ref(q.double(), k.double(), v.double(), True)
    base, _ = attention_ref(q, k, v, True)
    check_rule(out, base, ref, "out")


def test_strides_the_kernel_cannot_take_are_refused_by_name():
    k = rand(1, 2, 40, 32, seed=30)
    q = rand(1, 2, 32, 40, seed=31).transpose(2, 3)  # the head dim not contiguous
    with pytest.raises(ValueError, match=r"q strides \[2560, 1280, 1, 40\].*head dim \(last\) must be contiguous"):
        kittens.attention(q, k, k)
    # An output whose heads share their rows (stride 0) would be written twice at once.
    q = rand(1, 2, 40, 32, seed=32)
    out = torch.empty(1, 1, 40, 32, dtype=BF).expand(1, 2, 40, 32)
    with pytest.raises(ValueError, match=r"out: strides \[0, 0, 32\].*overlap"):
        kittens.attention(q, k, k, out=out)
