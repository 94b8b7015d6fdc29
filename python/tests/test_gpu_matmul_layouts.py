"""kittens.matmul on CUDA with its operands in either major order and as slices of bigger matrices
(leading-dimension strides), each read in place by the GEMM kernel (A stored (K, M) through wgmma's
transpose-A bit, B (K, N) through its transpose-B bit, the strides in the TMA maps), and the backward's
dA = dC·Bᵀ and dB = Aᵀ·dC reading ``b.T`` and ``a.T`` in place. Against float64 by FlashAttention's
rule (our error at most twice cuBLAS's bf16 result's, plus a floor), at shapes that are no multiple of
the block; "in place" is asserted by the prepared problem (the layout flags and strides the kernel was
built for) and by the copy paths never being taken.

Runs on a Hopper GPU (sm_90a) with torch; anywhere else the whole file is skipped with the reason.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch: the GPU tests need an H100", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"{torch.cuda.get_device_name()} is not compute capability 9.0 (sm_90a)", allow_module_level=True)

import kittens  # noqa: E402
from kittens import _dispatch  # noqa: E402

FLOOR = 1e-5
BF = torch.bfloat16


def randn(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(BF)


def view(rows, cols, form, seed):
    """(rows, cols) stored as ``row``, ``t`` (transpose of a dense (cols, rows)), ``slice`` (rows 40
    elements longer, from column 8: 16-byte aligned) or ``tslice`` (the transpose of such a slice)."""
    if form == "row":
        return randn(rows, cols, seed=seed)
    if form == "t":
        return randn(cols, rows, seed=seed).t()
    if form == "slice":
        return randn(rows + 3, cols + 40, seed=seed)[2 : rows + 2, 8 : cols + 8]
    return randn(cols + 3, rows + 40, seed=seed)[2 : cols + 2, 8 : rows + 8].t()


FORMS = ["row", "t", "slice", "tslice"]


@pytest.fixture
def no_copies(monkeypatch):
    """Fails any call that would copy an operand, and records the problems prepared."""
    prepared = []
    real = _dispatch._core._prepare

    def spy(key, entry, problem, tensors, device, free=(), extra=None):
        prepared.append(dict(problem))
        return real(key, entry, problem, tensors, device, free, extra)

    def copy(*_):
        raise AssertionError("an operand was copied")

    monkeypatch.setattr(_dispatch._core, "_prepare", spy)
    monkeypatch.setattr(_dispatch._gemm, "_matmul_padded", copy)
    monkeypatch.setattr(_dispatch._gemm, "_matmul_copied", copy)
    _dispatch._HANDLES.clear()
    return prepared


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def check_rule(ours, base, ref, what):
    assert torch.isfinite(ours.double()).all(), what
    e, b = rel(ours, ref), rel(base, ref)
    assert e <= 2 * b + FLOOR, f"{what}: ours {e:.3e} vs cuBLAS bf16 {b:.3e}"


# (M, K, N): partial blocks everywhere; a decode-sized M (64-row blocks, split-K into a strided C);
# 3000-ish (clusters of two where B's rows straddle 128-byte lines); a large square.
SHAPES = [(200, 328, 136), (16, 4104, 1032), (2984, 3000, 2992), (4096, 4096, 4096)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("a_form", FORMS)
@pytest.mark.parametrize("b_form", FORMS)
def test_every_layout_in_place(m, k, n, a_form, b_form, no_copies):
    a, b = view(m, k, a_form, seed=m + k), view(k, n, b_form, seed=n)
    c = kittens.matmul(a, b)
    torch.cuda.synchronize()
    (problem,) = no_copies
    assert problem["a_km"] == (a_form in ("t", "tslice")), problem
    assert problem["b_kn"] == (b_form in ("row", "slice")), problem
    assert ("ld" in problem) == ("slice" in (a_form, b_form) or "tslice" in (a_form, b_form)), problem
    ref = a.double() @ b.double()
    check_rule(c, a @ b, ref, f"{m}x{k}x{n} a {a_form} b {b_form}")


@pytest.mark.parametrize("m,k,n", SHAPES[:3])
@pytest.mark.parametrize("a_form,b_form", [("row", "t"), ("row", "row"), ("t", "slice"), ("slice", "tslice")])
def test_backward_in_place(m, k, n, a_form, b_form, no_copies):
    a0, b0 = view(m, k, a_form, seed=1), view(k, n, b_form, seed=2)
    dc = randn(m, n, seed=3)

    def grads(fn, dtype):
        a = a0.detach().to(dtype).requires_grad_()
        b = b0.detach().to(dtype).requires_grad_()
        out = fn(a, b)
        return (out.detach(),) + torch.autograd.grad(out, (a, b), dc.to(dtype))

    a = a0.detach().requires_grad_()
    b = b0.detach().requires_grad_()
    out = kittens.matmul(a, b)
    ga, gb = torch.autograd.grad(out, (a, b), dc)
    torch.cuda.synchronize()
    # The forward, dA = dC·Bᵀ (b.T: B stored as b is), dB = Aᵀ·dC (a.T: A stored transposed of a).
    assert len(no_copies) == 3, no_copies
    assert no_copies[2]["a_km"] == (a_form in ("row", "slice")), no_copies[2]
    r, ra, rb = grads(torch.matmul, torch.float64)
    bo, ba, bb = grads(torch.matmul, BF)
    what = f"{m}x{k}x{n} a {a_form} b {b_form}"
    check_rule(out, bo, r, what + " out")
    check_rule(ga, ba, ra, what + " da")
    check_rule(gb, bb, rb, what + " db")


def test_rows_tma_cannot_address_take_the_documented_copy():
    """lda 330 (660 bytes, no multiple of 16): the padded copy, still correct."""
    a = randn(200, 330, seed=4)[:, :328]
    b = randn(328, 136, seed=5)
    c = kittens.matmul(a, b)
    check_rule(c, a @ b, a.double() @ b.double(), "lda 330")


@pytest.mark.parametrize("m,k,n", [(200, 328, 136), (16, 4104, 1032)])
def test_out_slice_written_in_place(m, k, n, no_copies):
    """out a column block of a bigger matrix (rows n + 40 apart; split-K's reduction at 16 rows): the
    kernel's C carries ``ldc`` and writes only out's elements."""
    a, b = view(m, k, "t", seed=6), view(k, n, "row", seed=7)
    big = torch.full((m + 2, n + 40), float("nan"), device="cuda", dtype=BF)
    out = big[1 : m + 1, 8 : n + 8]
    assert kittens.matmul(a, b, out=out) is out
    torch.cuda.synchronize()
    (problem,) = no_copies
    assert problem["ld"] == (m, n, n + 40), problem
    check_rule(out, a @ b, a.double() @ b.double(), f"{m}x{k}x{n} out slice")
    rest = big.clone()
    rest[1 : m + 1, 8 : n + 8] = 0
    assert torch.isnan(rest).sum().item() == big.numel() - m * n
