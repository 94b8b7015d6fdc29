"""kittens.matmul and kittens.attention on CUDA torch tensors against torch.matmul (cuBLAS) and
F.scaled_dot_product_attention on the same tensors.

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
Comparison rule (FlashAttention's): bit-identical to torch.matmul, or our error against a float64
reference at most twice torch's bf16 error plus a small floor.
"""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(
        f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True
    )

import kittens  # noqa: E402

FLOOR = 1e-5


def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def check_rule(ours, theirs, ref):
    """Bit-identical, or within the rule; returns a description."""
    if torch.equal(ours, theirs):
        return "bit-identical"
    e_ours, e_theirs = rel(ours, ref), rel(theirs, ref)
    assert torch.isfinite(ours).all()
    assert e_ours <= 2 * e_theirs + FLOOR, f"ours {e_ours:.3e} vs torch {e_theirs:.3e}"
    return f"rule: {e_ours:.2e} <= 2 x {e_theirs:.2e}"


@pytest.mark.parametrize(
    "m,n,k",
    [(4096, 4096, 4096), (1000, 1032, 520), (129, 264, 72), (128, 256, 64), (1, 8, 8), (256, 8, 8192)],
)
def test_matmul_matches_torch(m, n, k):
    a, w = randn(m, k, seed=m + n), randn(n, k, seed=k)
    ours = kittens.matmul(a, w.T)
    assert ours.device == a.device and ours.dtype == torch.bfloat16 and ours.shape == (m, n)
    theirs = torch.matmul(a, w.T)
    ref = a.double() @ w.double().T
    print(f"{m}x{n}x{k}: {check_rule(ours, theirs, ref)}")


def test_out_is_written_in_place():
    a, w = randn(512, 256, seed=1), randn(384, 256, seed=2)
    out = torch.full((512, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert kittens.matmul(a, w.T, out=out) is out
    check_rule(out, torch.matmul(a, w.T), a.double() @ w.double().T)


def test_runs_on_a_non_default_stream_in_order():
    """Inputs written on a side stream and read by kittens on it, with no synchronisation between: the
    result is right only if the launch went to that stream, after the writes."""
    a, w = randn(2048, 2048, seed=3), randn(2048, 2048, seed=4)
    a2 = torch.empty_like(a)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # keep the stream busy so a launch elsewhere would overtake the copy
            a2.copy_(a * 2)
        c = kittens.matmul(a2, w.T)
        ref = torch.matmul(a2, w.T)
    s.synchronize()
    check_rule(c, ref, (a * 2).double() @ w.double().T)


# K = 1000: rows off 128-byte lines, read in place by thread-block clusters of two (a launch with the
# cluster attribute inside the capture).
@pytest.mark.parametrize("k", [512, 1000])
def test_cuda_graph_capture_and_replay(k):
    a, w = randn(1024, k, seed=5), randn(768, k, seed=6)
    out = torch.empty(1024, 768, device="cuda", dtype=torch.bfloat16)
    kittens.matmul(a, w.T, out=out)  # warm-up: compiles or loads the kernel outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kittens.matmul(a, w.T, out=out)
    a.copy_(randn(1024, k, seed=7))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_rule(out, torch.matmul(a, w.T), a.double() @ w.double().T)


def test_cuda_errors():
    a, w = randn(64, 64, seed=8), randn(64, 64, seed=9)
    with pytest.raises(ValueError, match="different devices"):
        kittens.matmul(a, w.cpu().T)
    with pytest.raises(ValueError, match="b must have one dimension contiguous"):
        kittens.matmul(a, w[:, ::2])


@pytest.mark.parametrize(
    "m,n,k", [(64, 60, 60), (1, 1, 1), (77, 99, 13), (3000, 1000, 777), (16, 4096, 4104), (1000, 1032, 1000)]
)
def test_any_shape(m, n, k):
    """N or K no multiple of 8 goes through padded copies, small M takes 64-row blocks, rows off
    128-byte lines (K = 1000) thread-block clusters: every shape is computed, not refused."""
    a, w = randn(m, k, seed=m + 1), randn(n, k, seed=n + 2)
    out = kittens.matmul(a, w.T)
    check_rule(out, torch.matmul(a, w.T), a.double() @ w.double().T)


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (16, 6144, 4096), (77, 99, 13)])
def test_b_row_major(m, n, k):
    """b as a row-major (K, N) tensor (a.T of nothing, a plain weight stored K x N): read in place
    with wgmma's transposed B."""
    a, b = randn(m, k, seed=m + 3), randn(k, n, seed=n + 4)
    check_rule(kittens.matmul(a, b), torch.matmul(a, b), a.double() @ b.double())


def test_empty_problems():
    a = torch.empty(16, 0, device="cuda", dtype=torch.bfloat16)
    w = torch.empty(8, 0, device="cuda", dtype=torch.bfloat16)
    z = kittens.matmul(a, w.T)  # an empty sum: zeros, written on the current stream
    assert z.shape == (16, 8) and z.device == a.device and not z.float().abs().sum().item()


def test_verbose_reports_the_compile():
    code = (
        "import torch, kittens; kittens.set_verbose(True); "
        "a = torch.ones(128, 64, device='cuda', dtype=torch.bfloat16); kittens.matmul(a, a[:64].T); "
        "torch.cuda.synchronize()"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "kittens: gemm_bf16" in r.stderr and "NVRTC" in r.stderr, r.stderr
    print(r.stderr.strip())


# --- attention ---------------------------------------------------------------------------------------

F = torch.nn.functional


def qkv(b, h, hk, n, d, layout, seed):
    """Random bf16 q (B, H, N, D) and k, v (B, H_kv, N, D), dense in (B, H, N, D) order ("bhsd") or
    (B, N, H, D) buffers seen through .transpose(1, 2) ("bshd")."""

    def make(heads, s):
        if layout == "bshd":
            return randn(b, n, heads, d, seed=s).transpose(1, 2)
        return randn(b, heads, n, d, seed=s)

    return make(h, seed), make(hk, seed + 1), make(hk, seed + 2)


def attention_f64(q, k, v, causal):
    """softmax(q·kᵀ/√d)·v in float64, k/v heads shared by groups of query heads, top-left causal mask."""
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def sdpa(q, k, v, causal):
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)


ATTN_SHAPES = [
    # (B, H, H_kv, N, D, causal, layout)
    (2, 8, 8, 1024, 128, False, "bhsd"),
    (2, 8, 8, 1024, 128, True, "bshd"),
    (1, 4, 4, 4096, 64, False, "bshd"),
    (1, 4, 4, 4096, 64, True, "bhsd"),
    (1, 16, 4, 1063, 128, True, "bshd"),
    (1, 8, 2, 1063, 64, False, "bhsd"),
    (2, 6, 1, 77, 64, True, "bshd"),
    (1, 8, 2, 77, 128, False, "bhsd"),
    (1, 4, 4, 1, 64, True, "bhsd"),
    (3, 2, 2, 200, 128, True, "bhsd"),
]


@pytest.mark.parametrize("b,h,hk,n,d,causal,layout", ATTN_SHAPES)
def test_attention_matches_sdpa(b, h, hk, n, d, causal, layout):
    q, k, v = qkv(b, h, hk, n, d, layout, seed=n * 7 + d + h)
    ours = kittens.attention(q, k, v, causal=causal)
    assert ours.device == q.device and ours.dtype == torch.bfloat16 and ours.shape == q.shape
    # The output takes q's memory order.
    assert ours.stride() == q.stride() or n == 1, (ours.stride(), q.stride())
    theirs = sdpa(q, k, v, causal)
    ref = attention_f64(q, k, v, causal)
    print(f"B{b} H{h}/{hk} N{n} D{d} causal={causal} {layout}: {check_rule(ours, theirs, ref)}")


def attention_lse_f64(q, k, v, causal, align):
    """(O, lse) in float64 at N queries and N_kv keys, causal aligned top-left (j <= i) or bottom-right
    (j <= i + N_kv - N); rows that keep no key: O = 0, lse = -inf."""
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    n, nk = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        off = 0 if align == "top_left" else nk - n
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + off, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


def lse_f32(q, k, causal, align):
    """The log-sum-exp the plain way in float32 (torch.logsumexp of f32 scores): the baseline."""
    g = q.shape[1] // k.shape[1]
    q, k = q.float(), k.float().repeat_interleave(g, 1)
    n, nk = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        off = 0 if align == "top_left" else nk - n
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + off, float("-inf"))
    return torch.logsumexp(s, -1)


@pytest.mark.parametrize(
    "n,nk,d,causal,align,layout",
    [
        (1, 4096, 128, False, "top_left", "bshd"),  # decoding against a cache
        (1, 1063, 64, True, "bottom_right", "bhsd"),
        (300, 1000, 128, True, "bottom_right", "bshd"),
        (1000, 300, 64, True, "bottom_right", "bhsd"),  # rows 0..699 keep no key
        (1000, 300, 128, True, "top_left", "bshd"),
        (777, 2048, 64, False, "top_left", "bhsd"),
        (2048, 2048, 128, True, "top_left", "bshd"),
        # Decoding against long caches: 16 query blocks on the GPU's SMs, so the key split runs (the
        # kernel's parts, then the merge) and must meet the same rule.
        (1, 32768, 128, False, "top_left", "bhsd"),
        (16, 8191, 128, True, "bottom_right", "bshd"),
    ],
)
def test_attention_lse_and_lengths_on_cuda(n, nk, d, causal, align, layout):
    q = qkv(2, 8, 2, n, d, layout, seed=n + nk + d)[0]
    k, v = qkv(2, 8, 2, nk, d, layout, seed=n * 3 + nk)[1:]
    ours, lse = kittens.attention(q, k, v, causal=causal, return_lse=True, causal_align=align)
    assert lse.dtype == torch.float32 and lse.shape == (2, 8, n) and lse.device == q.device
    ref, lse64 = attention_lse_f64(q, k, v, causal, align)
    empty = torch.isneginf(lse64)
    assert torch.equal(torch.isneginf(lse), empty), "-inf exactly for the rows that keep no key"
    assert not ours.float()[empty].any(), "rows that keep no key are zero"
    fin = ~empty
    e_ours = (lse.double() - lse64)[fin].abs().max().item()
    e_base = (lse_f32(q, k, causal, align).double() - lse64)[fin].abs().max().item()
    scale = max(1.0, lse64[fin].abs().max().item())
    assert e_ours <= 2 * e_base + 2**-12 * scale, f"lse error {e_ours:.3e} vs f32 baseline {e_base:.3e}"
    # O by the rule against SDPA with the same boolean mask (on the rows that keep a key).
    keep = None
    if causal:
        off = 0 if align == "top_left" else nk - n
        i = torch.arange(n, device=q.device)[:, None]
        keep = torch.arange(nk, device=q.device)[None, :] <= i + off
    g = q.shape[1] // k.shape[1]
    theirs = F.scaled_dot_product_attention(
        q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=keep
    )
    rows = fin[..., None].expand_as(ours)
    print(f"N{n} Nkv{nk} D{d} {align if causal else 'full'}: lse {e_ours:.2e} (f32 {e_base:.2e}), "
          f"O {check_rule(ours[rows], theirs[rows], ref[rows])}")
    # return_lse=False: the same output bits (through the op the kernel writes the lse either way).
    assert torch.equal(kittens.attention(q, k, v, causal=causal, causal_align=align), ours)


def test_attention_with_large_logits():
    """Inputs scaled by 8 (exact in bf16): logits of tens, where an unstable softmax overflows."""
    q, k, v = qkv(1, 4, 2, 333, 128, "bshd", seed=21)
    q, k = q * 8, k * 8
    for causal in (False, True):
        ours = kittens.attention(q, k, v, causal=causal)
        print(check_rule(ours, sdpa(q, k, v, causal), attention_f64(q, k, v, causal)))


def test_attention_out_is_written_in_place():
    q, k, v = qkv(1, 4, 4, 300, 64, "bhsd", seed=31)
    out = torch.full_like(q, float("nan"))
    assert kittens.attention(q, k, v, causal=True, out=out) is out
    check_rule(out, sdpa(q, k, v, True), attention_f64(q, k, v, True))


def test_attention_runs_on_a_non_default_stream_in_order():
    """q written on a side stream and read by kittens on it with no synchronisation between: right only
    if the launch went to that stream, after the writes."""
    q, k, v = qkv(4, 16, 16, 2048, 128, "bshd", seed=41)
    q2 = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # keep the stream busy so a launch elsewhere would overtake the copy
            q2.copy_(q * 2)
        ours = kittens.attention(q2, k, v, causal=True)
        theirs = sdpa(q2, k, v, True)
    s.synchronize()
    check_rule(ours, theirs, attention_f64(q * 2, k, v, True))


def test_attention_cuda_graph_capture_and_replay():
    q, k, v = qkv(2, 4, 4, 512, 64, "bhsd", seed=51)
    out = torch.empty_like(q)
    kittens.attention(q, k, v, out=out)  # warm-up: compiles or loads the kernel outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kittens.attention(q, k, v, out=out)
    q.copy_(qkv(2, 4, 4, 512, 64, "bhsd", seed=52)[0])
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_rule(out, sdpa(q, k, v, False), attention_f64(q, k, v, False))


def test_attention_decoding_split_in_a_cuda_graph():
    """Decoding takes the key split (two launches, their partials in stream-ordered scratch); a
    captured call replays it on new inputs."""
    q = qkv(1, 8, 8, 1, 128, "bhsd", seed=71)[0]
    k, v = qkv(1, 8, 8, 16384, 128, "bhsd", seed=72)[1:]
    out = torch.empty_like(q)
    kittens.attention(q, k, v, out=out)  # warm-up: compiles or loads both kernels
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kittens.attention(q, k, v, out=out)
    q.copy_(qkv(1, 8, 8, 1, 128, "bhsd", seed=73)[0])
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_rule(out, sdpa(q, k, v, False), attention_f64(q, k, v, False))


def test_attention_cuda_limits_are_value_errors():
    q, k, v = qkv(1, 2, 2, 64, 96, "bhsd", seed=61)
    with pytest.raises(ValueError, match="head dim 96.*64, 128, 192 or 256"):
        kittens.attention(q, k, v)
    q, k, v = qkv(1, 2, 2, 64, 64, "bhsd", seed=62)
    # Any positive scale is the kernel's own (baked into its configuration), with out= too; a negative
    # one is refused naming it.
    o = torch.empty_like(q)
    kittens.attention(q, k, v, scale=0.5, out=o)
    check_rule(o, F.scaled_dot_product_attention(q, k, v, scale=0.5),
               F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.5))
    with pytest.raises(ValueError, match="scale"):
        kittens.attention(q, k, v, scale=-0.5, out=torch.empty_like(q))
    k2, v2 = randn(1, 2, 0, 64, seed=63), randn(1, 2, 0, 64, seed=64)
    with pytest.raises(ValueError, match="no keys"):
        kittens.attention(q, k2, v2)
    with pytest.raises(ValueError, match="causal_align"):
        kittens.attention(q, k, v, causal=True, causal_align="bottom-right")
    with pytest.raises(ValueError, match="different devices"):
        kittens.attention(q, k.cpu(), v)
    # Strided views (every other row) with out= are read and written in place (the strided kernels).
    qs, ks, vs = q[:, :, ::2], k[:, :, ::2], v[:, :, ::2]
    o = torch.empty_like(qs)
    assert kittens.attention(qs, ks, vs, out=o) is o
    check_rule(o, sdpa(qs, ks, vs, False), attention_f64(qs, ks, vs, False))


def test_attention_any_scale_and_strided_views_through_the_op():
    """torch.ops.kittens.attention: any scale and strided views (read in place by the strided kernels)
    match SDPA on the same tensors by the rule."""
    q, k, v = qkv(1, 2, 2, 128, 64, "bhsd", seed=65)
    ours = kittens.attention(q, k, v, scale=0.5)
    theirs = F.scaled_dot_product_attention(q, k, v, scale=0.5)
    ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * 0.5, -1) @ v.double()
    check_rule(ours, theirs, ref)
    qs, ks, vs = q[:, :, ::2], k[:, :, ::2], v.transpose(1, 2).contiguous().transpose(1, 2)[:, :, ::2]
    check_rule(kittens.attention(qs, ks, vs), sdpa(qs, ks, vs, False), attention_f64(qs, ks, vs, False))


def test_attention_backward_runs():
    """The forward on the GPU, then its backward (test_gpu_backward.py checks the gradients)."""
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 128, 64, "bhsd", seed=71))
    o = kittens.attention(q, k, v, causal=True)  # the forward runs on the GPU
    check_rule(o.detach(), sdpa(q, k, v, True).detach(), attention_f64(q.detach(), k.detach(), v.detach(), True))
    o.float().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))


def test_verbose_reports_the_attention_compile():
    code = (
        "import torch, kittens; kittens.set_verbose(True); "
        "q = torch.ones(1, 2, 128, 64, device='cuda', dtype=torch.bfloat16); kittens.attention(q, q, q); "
        "torch.cuda.synchronize()"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "kittens: attn" in r.stderr and "NVRTC" in r.stderr, r.stderr
    print(r.stderr.strip())


# ------------------------------------------------------------------------------ layernorm and rotary


# 7 and 133 rows: no multiple of the 4 one-wave rows of a block at D <= 1024 (768, 776).
@pytest.mark.parametrize("shape,p", [((3, 37, 2048), 0.0), ((5, 776), 0.25), ((2, 9, 4104), 0.1), ((1, 3, 8192), 0.5),
                                     ((7, 768), 0.0), ((133, 768), 0.1), ((67, 3080), 0.0)])
def test_layernorm_cuda_matches_cpu_interpreter_and_float64(shape, p):
    d = shape[-1]
    x, r = randn(*shape, seed=d), randn(*shape, seed=d + 1)
    w, b = randn(d, seed=2), randn(d, seed=3)
    seed, offset = 0xDEADBEEF01234567, 3 << 32 | 9
    y, h = kittens.layernorm(x, r, w, b, p=p, seed=seed, offset=offset)
    assert y.device == x.device and y.shape == shape and h.shape == shape
    yc, hc = kittens.layernorm(x.cpu(), r.cpu(), w.cpu(), b.cpu(), p=p, seed=seed, offset=offset)
    # The same Philox bits and the same per-op rounding: the residual is bit-identical.
    assert torch.equal(h.cpu(), hc)
    hd = hc.double()
    mu = hd.mean(-1, keepdim=True)
    yd = (hd - mu) / torch.sqrt(((hd - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w.cpu().double() + b.cpu().double()
    assert rel(y.cpu(), yd) < 1e-2
    assert (y.cpu().double() - yc.double()).abs().max() <= 2**-7 * yd.abs().max()
    if p == 0:
        e = torch.nn.functional.layer_norm(r + x, (d,), w, b, 1e-5)
        print(f"layernorm {shape}: ours {rel(y.cpu(), yd):.2e}, torch {rel(e.cpu(), yd):.2e}")


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("bshd", [False, True])
@pytest.mark.parametrize("d", [128, 32, 96])  # heads along the rows (power-of-two D) or positions
def test_rotary_cuda_matches_cpu_interpreter(interleaved, bshd, d):
    b, h, n = 2, 3, 77
    q = randn(b, n, h, d, seed=5).transpose(1, 2) if bshd else randn(b, h, n, d, seed=5)
    ang = torch.rand(n, d // 2, device="cuda", dtype=torch.float64, generator=torch.Generator(device="cuda").manual_seed(1)) * 6.28
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    o = kittens.rotary(q, cos, sin, interleaved=interleaved)
    oc = kittens.rotary(q.cpu(), cos.cpu(), sin.cpu(), interleaved=interleaved)
    assert o.stride() == q.stride()
    assert torch.equal(o.cpu(), oc)
    q2 = q.clone()
    kittens.rotary(q2, cos, sin, interleaved=interleaved, inplace=True)
    assert torch.equal(q2, o)


def test_rotary_cuda_computes_tables_on_the_device():
    q = randn(2, 4, 300, 128, seed=8)
    o = kittens.rotary(q, base=50000.0)
    cos, sin = kittens.rotary_tables(300, 128, 50000.0, like=q)
    assert cos.device == q.device and cos.dtype == torch.bfloat16
    assert torch.equal(o, kittens.rotary(q, cos, sin))
    assert torch.equal(o.cpu(), kittens.rotary(q.cpu(), base=50000.0))
    pos = torch.arange(100, 104, device="cuda")
    part = kittens.rotary(q[:, :, 100:104].contiguous(), base=50000.0, positions=pos)
    assert torch.equal(part, o[:, :, 100:104])
