"""Attention on CUDA (Hopper, sm_90a) with q, k, v, out, grad_out each in its own strides, read in place
by the strided kernels (``kittens_kernels::attn_strides``): forward and backward against float64
autograd by FlashAttention's rule at odd lengths, the kernels handed the caller's own addresses (no
copy), the return_lse gradient, and the refusals of strides the kernels cannot take, naming the tensor
and the stride.

Skips without a CUDA device of compute capability 9.0 (CI has none); the CPU half is
test_attn_strides_cpu.py.
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
import kittens.ops  # noqa: E402,F401
import kittens._dispatch._attn as attn_dispatch  # noqa: E402
from strided_attn import check_against_float64, views  # noqa: E402
from test_torch_ops import BF, attention_ref, check_rule  # noqa: E402


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float32) * 2 - 1).to(BF).cuda()


CASES = [
    # kind, (B, H, H_kv, N, N_kv, D), causal, bottom_right
    ("fused", (2, 4, 2, 333, 333, 64), True, False),
    ("fused", (1, 8, 8, 517, 517, 128), False, False),
    ("hf", (2, 8, 2, 257, 257, 128), True, False),
    ("hf", (1, 4, 1, 77, 1031, 64), True, True),
    ("padded", (2, 4, 2, 300, 211, 64), False, False),
]


class Launches:
    """Records the addresses each prepared call hands its kernels (the caller's tensors first)."""

    def __init__(self, monkeypatch):
        self.ptrs = []
        # The attention dispatch binds `_launch` in its own module (kittens/_dispatch/_attn.py):
        # patching the package's name would record nothing.
        real = attn_dispatch._launch

        def spy(rec, ptrs, *a, **kw):
            self.ptrs.append(tuple(ptrs))
            return real(rec, ptrs, *a, **kw)

        monkeypatch.setattr(attn_dispatch, "_launch", spy)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-" + "-".join(map(str, c[1])) + f"-{c[2]}{c[3]}")
@pytest.mark.parametrize("return_lse", [False, True])
def test_strided_attention_matches_float64_in_place(case, return_lse, monkeypatch):
    kind, (b, h, hk, n, nk, d), causal, br = case
    q, k, v = views(rand, kind, b, h, hk, n, nk, d, seed=3)
    assert not q.is_contiguous()
    do = rand(b, h, n, d, seed=9)
    dlse = rand(b, h, n, seed=10).float()
    align = "bottom_right" if br else "top_left"
    launches = Launches(monkeypatch)
    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
    r = kittens.attention(qq, kk, vv, causal=causal, causal_align=align, return_lse=return_lse)
    o, lse = r if return_lse else (r, None)
    loss = (o.float() * do.float()).sum() + ((lse.masked_fill(torch.isinf(lse), 0) * dlse).sum() if return_lse else 0)
    loss.backward()
    # The forward and the backward read the caller's q, k, v (and out, grad_out) where they lie.
    # One backward run: the lse's gradient is folded into its preprocessing (D = rowsum(dO∘O) − dlse).
    fwd, bwd = launches.ptrs
    assert fwd[:3] == (q.data_ptr(), k.data_ptr(), v.data_ptr())
    assert bwd[:4] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
    grads = (qq.grad, kk.grad, vv.grad)
    check_against_float64(o, grads, q, k, v, do, dlse, causal, br, return_lse)


def test_out_given_in_its_own_strides_is_written_in_place():
    q, k, v = views(rand, "hf", 1, 4, 2, 129, 129, 64, seed=20)
    buf = torch.full((1, 129, 4, 64 + 16), 7.0, dtype=BF, device="cuda")
    out = buf[..., :64].transpose(1, 2)
    r = kittens.attention(q, k, v, causal=True, out=out)
    assert r.data_ptr() == out.data_ptr()
    assert torch.all(buf[..., 64:] == 7.0)  # the gaps untouched
    ref, _ = attention_ref(q.double(), k.double(), v.double(), True)
    base, _ = attention_ref(q, k, v, True)
    check_rule(out, base, ref, "out")


def test_strides_the_kernels_cannot_take_are_refused_by_name():
    k = rand(1, 2, 64, 64, seed=30)
    # The head dim not contiguous.
    q = rand(1, 2, 64, 64, seed=31).transpose(2, 3)
    with pytest.raises(ValueError, match=r"q strides .*head dim \(last\) must be contiguous"):
        kittens.attention(q, k, k)
    # A head stride of 68 elements (136 bytes): not a multiple of 16 bytes, which TMA needs.
    q = rand(1, 64, 2, 68, seed=32)[..., :64].transpose(1, 2)
    with pytest.raises(ValueError, match=r"q strides \(8704, 68, 136, 1\).*head stride 68 .*multiple of 8"):
        kittens.attention(q, k, k)
    # The backward op refuses it the same way, naming grad_out.
    q = rand(1, 2, 64, 64, seed=33).requires_grad_()
    o, lse = kittens.attention(q, k, k, return_lse=True, deterministic=True)
    bad = rand(1, 64, 2, 68, seed=34)[..., :64].transpose(1, 2)
    with pytest.raises(ValueError, match=r"grad_out strides .*head stride 68"):
        kittens.ops.attention_backward(bad, q.detach(), k, k, o.detach(), lse.detach())
    # Through autograd the output gradient's layout is autograd's, not the caller's: one the kernels
    # cannot read is made dense first (commit 277ed568), so the gradient is the dense one's, bit for bit
    # (the deterministic form).
    o.backward(bad, retain_graph=True)
    from_bad, q.grad = q.grad, None
    o.backward(bad.contiguous())
    assert torch.equal(from_bad, q.grad)
