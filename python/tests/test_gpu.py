"""kittens.matmul on CUDA torch tensors against torch.matmul (cuBLAS) on the same tensors.

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


def test_cuda_graph_capture_and_replay():
    a, w = randn(1024, 512, seed=5), randn(768, 512, seed=6)
    out = torch.empty(1024, 768, device="cuda", dtype=torch.bfloat16)
    kittens.matmul(a, w.T, out=out)  # warm-up: compiles or loads the kernel outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kittens.matmul(a, w.T, out=out)
    a.copy_(randn(1024, 512, seed=7))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_rule(out, torch.matmul(a, w.T), a.double() @ w.double().T)


def test_cuda_errors():
    a, w = randn(64, 64, seed=8), randn(64, 64, seed=9)
    with pytest.raises(ValueError, match="different devices"):
        kittens.matmul(a, w.cpu().T)
    with pytest.raises(ValueError, match="multiples of 8"):
        kittens.matmul(randn(64, 60, seed=10), randn(64, 60, seed=11).T)
    with pytest.raises(ValueError, match="b must be the transpose"):
        kittens.matmul(a, w)
    q = randn(1, 2, 64, 64, seed=12)
    with pytest.raises(RuntimeError, match="no CUDA kernel yet"):
        kittens.attention(q, q, q)


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
