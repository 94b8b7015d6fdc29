"""kittens.matmul reading its operands in place in either major order and with leading-dimension
strides (slices of bigger matrices), and its backward (dA = dC·Bᵀ, dB = Aᵀ·dC) reading ``b.T`` and
``a.T`` in place: on the CPU interpreter against float64 by FlashAttention's rule (our error at most
twice the plain bf16 computation's, plus a floor), at odd shapes. "No copy" is asserted on what the
extension module receives: each operand's own address and strides.
"""

import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch  # a missing torch is an error in CI, never a skip
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

import kittens  # noqa: E402
from kittens import _kittens  # noqa: E402

FLOOR = 1e-5
BF = torch.bfloat16
M, K, N = 37, 45, 29


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float32) * 2 - 1).to(BF)


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()


def check_rule(ours, base, ref, what):
    assert ours is not None and ours.shape == ref.shape, what
    e, b = rel(ours, ref), rel(base, ref)
    assert e <= 2 * b + FLOOR, f"{what}: ours {e:.3e} vs bf16 {b:.3e}"
    assert e > 0, f"{what}: bf16 output rounding must show"


def view(rows, cols, form, seed):
    """A (rows, cols) bf16 operand stored as ``form`` says: ``row`` (dense row-major), ``t`` (the
    transpose of a dense (cols, rows) array), ``slice`` (rows 11 elements apart inside a wider
    matrix, from its 3rd column), ``tslice`` (the transpose of such a slice)."""
    if form == "row":
        return rand(rows, cols, seed=seed)
    if form == "t":
        return rand(cols, rows, seed=seed).t()
    if form == "slice":
        return rand(rows + 2, cols + 11, seed=seed)[1 : rows + 1, 3 : cols + 3]
    assert form == "tslice"
    return rand(cols + 2, rows + 11, seed=seed)[1 : cols + 1, 3 : rows + 3].t()


FORMS = ["row", "t", "slice", "tslice"]


class Calls:
    """Records what the extension module's matmul receives (address, shape, strides of a and b)."""

    def __init__(self, monkeypatch):
        self.seen = []
        real = _kittens.matmul

        def spy(a, b, out):
            if out is not None:
                self.seen.append((a, b))
            return real(a, b, out)

        monkeypatch.setattr(_kittens, "matmul", spy)


def same(arg, t):
    """The call's array is `t` itself: its address, shape and strides (no copy made on the way)."""
    ptr, shape, strides = arg[0], arg[1], arg[2]
    return ptr == t.data_ptr() and list(shape) == list(t.shape) and list(strides) == list(t.stride())


@pytest.mark.parametrize("a_form", FORMS)
@pytest.mark.parametrize("b_form", FORMS)
def test_every_layout_is_read_in_place(a_form, b_form, monkeypatch):
    a, b = view(M, K, a_form, seed=1), view(K, N, b_form, seed=2)
    calls = Calls(monkeypatch)
    c = kittens.matmul(a, b)
    assert len(calls.seen) == 1 and same(calls.seen[0][0], a) and same(calls.seen[0][1], b)
    ref = a.double() @ b.double()
    check_rule(c, (a @ b), ref, f"a {a_form} b {b_form}")


@pytest.mark.parametrize("a_form,b_form", [("row", "t"), ("t", "row"), ("slice", "tslice"), ("tslice", "slice")])
def test_backward_reads_a_t_and_b_t_in_place(a_form, b_form, monkeypatch):
    a0, b0 = view(M, K, a_form, seed=3), view(K, N, b_form, seed=4)
    dc = rand(M, N, seed=5)

    def grads(dtype, fn):
        a = a0.detach().to(dtype).requires_grad_() if dtype != BF else a0.detach().requires_grad_()
        b = b0.detach().to(dtype).requires_grad_() if dtype != BF else b0.detach().requires_grad_()
        out = fn(a, b)
        ga, gb = torch.autograd.grad(out, (a, b), dc.to(dtype))
        return a, b, out.detach(), ga, gb

    calls = Calls(monkeypatch)
    a, b, o, ga, gb = grads(BF, kittens.matmul)
    # The forward, then dA = dC·Bᵀ and dB = Aᵀ·dC, each reading the saved a or b itself (transposed).
    assert len(calls.seen) == 3, calls.seen
    (fa, fb), (_, da_b), (db_a, _) = calls.seen
    assert same(fa, a) and same(fb, b)
    assert same(da_b, b.t()), "dA = dC·Bᵀ must read b in place"
    assert same(db_a, a.t()), "dB = Aᵀ·dC must read a in place"
    _, _, r, ra, rb = grads(torch.float64, torch.matmul)
    _, _, bo, ba, bb = grads(BF, torch.matmul)
    check_rule(o, bo, r, "out")
    check_rule(ga, ba, ra, "da")
    check_rule(gb, bb, rb, "db")


def test_an_expanded_gradient_is_taken():
    """dC with zero strides (the gradient of a sum): no layout to read, made dense first."""
    a = rand(M, K, seed=6).requires_grad_()
    b = rand(K, N, seed=7).t().contiguous().t().requires_grad_()
    kittens.matmul(a, b).sum().backward()
    ones = torch.ones(M, N, dtype=torch.float64)
    check_rule(a.grad, torch.ones(M, N, dtype=BF) @ b.detach().t(), ones @ b.detach().double().t(), "da")
    check_rule(b.grad, a.detach().t() @ torch.ones(M, N, dtype=BF), a.detach().double().t() @ ones, "db")


def test_neither_dimension_contiguous_is_refused_by_name():
    a = rand(M, 2 * K, seed=8)[:, ::2]
    with pytest.raises(ValueError, match=r"a must have one dimension contiguous.*strides \[90, 2\]"):
        kittens.matmul(a, rand(K, N, seed=9))
    with pytest.raises(ValueError, match="b must have one dimension contiguous"):
        kittens.matmul(rand(M, K, seed=10), rand(K, 2 * N, seed=9)[:, ::2])


def test_out_may_be_a_slice_of_a_bigger_matrix():
    """out row-major with rows 40 elements apart (e.g. a column block of a fused buffer): written in
    place, the rest of the bigger matrix untouched; strides with no contiguous row are refused."""
    a, b = view(M, K, "t", seed=11), view(K, N, "slice", seed=12)
    big = torch.full((M + 3, N + 40), float("nan"), dtype=BF)
    out = big[1 : M + 1, 8 : N + 8]
    assert kittens.matmul(a, b, out=out) is out
    check_rule(out, a @ b, a.double() @ b.double(), "out slice")
    rest = big.clone()
    rest[1 : M + 1, 8 : N + 8] = 0
    assert torch.isnan(rest).sum() == big.numel() - M * N, "only out's elements are written"
    with pytest.raises(ValueError, match="out must be row-major with rows at least"):
        kittens.matmul(a, b, out=big[:, ::2][:M, :N])
