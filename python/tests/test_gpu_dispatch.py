"""The one CUDA path (``kittens._dispatch``: prepared calls of ``_kittens.prepare``) on an H100/H200:
each op against float64 by the test rule and against PyTorch's own op, the handle table (one per
configuration and layout, reused otherwise), the padded and copied GEMM forms, the key-split decode,
errors naming the argument, and capture of a loop of calls in a CUDA graph.

Skips without a CUDA device of compute capability 9.0 (CI has none); run on the GPU and committed.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kittens  # noqa: E402
from kittens import _dispatch  # noqa: E402

from gpu_rule import BF, rand, rule  # noqa: E402




@pytest.mark.parametrize("m,n,k", [(1000, 776, 1032), (256, 256, 256), (77, 1000, 1024), (5, 13, 7), (300, 24, 40)])
@pytest.mark.parametrize("form", ["wt", "kn"])
def test_matmul(m, n, k, form):
    a = rand(m, k, seed=1)
    w = rand(n, k, seed=2)
    b = w.t() if form == "wt" else w.t().contiguous()
    out = kittens.matmul(a, b)
    ref = a.double() @ b.double()
    rule(out, ref, a @ b)
    assert out.shape == (m, n) and out.is_contiguous()


def test_matmul_misaligned_view_and_empty():
    big = rand(65, 264, seed=3)
    w = rand(128, 256, seed=4)
    a = big[:, 8:264]  # row stride 264 for 256 columns: read in place (a leading dimension)
    rule(kittens.matmul(a, w.t()), a.double() @ w.t().double(), a @ w.t())
    a = big[:, 1:257]  # the same off a 16-byte boundary: TMA cannot address it, the documented copy
    rule(kittens.matmul(a, w.t()), a.double() @ w.t().double(), a @ w.t())
    with pytest.raises(ValueError, match="one dimension contiguous"):
        kittens.matmul(big[:64, ::2][:, :128].t(), w.t()[:64])  # neither dimension contiguous
    a = big.reshape(-1)[1:1 + 64 * 256].view(64, 256)  # dense, base off alignment
    out = kittens.matmul(a, w.t())
    rule(out, a.double() @ w.t().double(), a @ w.t())
    e = kittens.matmul(rand(4, 0, seed=5), rand(0, 8, seed=6))
    assert e.shape == (4, 8) and (e == 0).all()


def test_handles_are_one_per_configuration():
    a, w = rand(128, 256, seed=7), rand(64, 256, seed=8)
    kittens.matmul(a, w.t())
    n = len(_dispatch._HANDLES)
    for _ in range(3):
        kittens.matmul(rand(128, 256, seed=9), w.t())
    assert len(_dispatch._HANDLES) == n
    kittens.matmul(rand(136, 256, seed=9), w.t())
    assert len(_dispatch._HANDLES) == n + 1


def attn_ref(q, k, v, causal, bottom_right=False):
    qd, kd, vd = (t.double() for t in (q, k, v))
    h, hk = q.shape[1], k.shape[1]
    kd = kd.repeat_interleave(h // hk, 1)
    vd = vd.repeat_interleave(h // hk, 1)
    s = qd @ kd.transpose(-1, -2) / q.shape[-1] ** 0.5
    n, nk = q.shape[2], k.shape[2]
    if causal:
        off = nk - n if bottom_right else 0
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + off, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ vd, lse


@pytest.mark.parametrize("b,h,hk,n,nk,d,causal,layout", [
    (2, 6, 2, 333, 333, 64, True, "bhsd"),
    (1, 8, 8, 200, 517, 128, False, "bshd"),
    (1, 32, 8, 1, 4096, 128, False, "bhsd"),   # decode: the planner's key split and merge
    (3, 4, 1, 1, 2000, 64, True, "bshd"),
])
def test_attention(b, h, hk, n, nk, d, causal, layout):
    def mk(heads, seq, seed):
        if layout == "bshd":
            return rand(b, seq, heads, d, scale=3.0, seed=seed).transpose(1, 2)
        return rand(b, heads, seq, d, scale=3.0, seed=seed)

    q, k, v = mk(h, n, 10), mk(hk, nk, 11), mk(hk, nk, 12)
    br = causal and n != nk
    out, lse = kittens.attention(q, k, v, causal=causal, return_lse=True,
                                 causal_align="bottom_right" if br else "top_left")
    ref, ref_lse = attn_ref(q, k, v, causal, br)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=causal and not br, enable_gqa=True) \
        if not br else attn_ref(q.float(), k.float(), v.float(), causal, br)[0].to(BF)
    rule(out, ref, plain)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2
    if n > 1:  # one query row: both layouts are the same memory
        assert out.stride() == (torch.empty_like(q).stride() if layout == "bhsd" else q.stride())


def test_layernorm_and_dropout_seed_per_call():
    x, r = rand(3, 37, 1000, seed=20), rand(3, 37, 1000, seed=21)
    w, bias = rand(1000, seed=22), rand(1000, seed=23)
    y, h = kittens.layernorm(x, r, w, bias, p=0.0)
    h64 = r.double() + x.double()
    ref = F.layer_norm(h64, (1000,), w.double(), bias.double(), 1e-5)
    rule(y, ref, F.layer_norm((r + x).float(), (1000,), w.float(), bias.float()).to(BF))
    assert (h.double() - h64).abs().max() < 0.05
    # The seed and counter are per-launch values of one prepared call: different masks, same handle.
    n = len(_dispatch._HANDLES)
    _, h1 = kittens.layernorm(x, r, w, bias, p=0.5, seed=1)
    _, h2 = kittens.layernorm(x, r, w, bias, p=0.5, seed=2)
    _, h3 = kittens.layernorm(x, r, w, bias, p=0.5, seed=1)
    assert len(_dispatch._HANDLES) == n + 1
    assert torch.equal(h1, h3) and not torch.equal(h1, h2)
    keep = kittens.ops.dropout_keep(111, 1000, 0.5, 1, 0, device="cuda").reshape(3, 37, 1000)
    assert torch.equal(h1, torch.where(keep, r + (x.float() * 2).to(BF), r))


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary(layout, interleaved):
    b, h, n, d = 2, 5, 77, 128
    q = rand(b, h, n, d, seed=30) if layout == "bhsd" else rand(b, n, h, d, seed=30).transpose(1, 2)
    cos, sin = kittens.ops.rotary_tables(n, d, device="cuda")
    out = kittens.rotary(q, cos, sin, interleaved=interleaved)
    qd = q.double()
    x0, x1 = (qd[..., 0::2], qd[..., 1::2]) if interleaved else (qd[..., : d // 2], qd[..., d // 2:])
    c, s = cos.double(), sin.double()
    y0, y1 = x0 * c - x1 * s, x1 * c + x0 * s
    ref = torch.stack([y0, y1], -1).flatten(-2) if interleaved else torch.cat([y0, y1], -1)
    assert (out.double() - ref).abs().max().item() < 0.02
    assert out.stride() == q.stride()


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="a has dtype"):
        kittens.matmul(torch.ones(8, 8, device="cuda"), rand(8, 8, seed=1))
    with pytest.raises(ValueError, match=r"a @ b"):
        kittens.matmul(rand(8, 16, seed=1), rand(8, 8, seed=2))
    q = rand(1, 2, 64, 80, seed=3)  # 96 is a head dim the forward takes since issue 36
    with pytest.raises(ValueError, match="head dim 80"):
        kittens.attention(q, q, q)


def test_calls_capture_in_a_cuda_graph():
    a, w = rand(256, 512, seed=40), rand(384, 512, seed=41)
    q = rand(2, 8, 128, 64, seed=42)
    x, r = rand(64, 1024, seed=43), rand(64, 1024, seed=44)
    lw, lb = rand(1024, seed=45), rand(1024, seed=46)

    def step():
        c = kittens.matmul(a, w.t())
        o = kittens.attention(q, q, q, causal=True)
        y, _ = kittens.layernorm(x, r, lw, lb)
        return c, o, y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        eager = step()  # warm-up: prepares every call
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = step()
    g.replay()
    torch.cuda.synchronize()
    for e, c in zip(eager, captured):
        assert torch.equal(e, c)


@pytest.mark.parametrize("b,h,hk,n,nk,d", [(2, 8, 2, 300, 300, 64), (1, 32, 8, 1, 4096, 128)])
def test_attention_without_lse_is_the_same_output(b, h, hk, n, nk, d):
    """An eager call that wants no log-sum-exp runs the kernel without that output: the same values."""
    q, k, v = rand(b, h, n, d, seed=50), rand(b, hk, nk, d, seed=51), rand(b, hk, nk, d, seed=52)
    with_lse, _ = kittens.attention(q, k, v, return_lse=True)
    n_keys = len(_dispatch._HANDLES)
    alone = kittens.attention(q, k, v)
    assert len(_dispatch._HANDLES) == n_keys + 1  # its own prepared call
    assert torch.equal(alone, with_lse)
