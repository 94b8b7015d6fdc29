"""kittens.linear_cross_entropy on the CPU (the ``cross_entropy`` registry kernel and the GEMM on the
interpreter) against float64 by FlashAttention's rule (our error at most twice
the plain bf16 PyTorch computation's — ``F.cross_entropy(h @ w.T, y)`` in bf16 — plus a floor), for the loss
and both gradients, at shapes no multiple of a tile, with ignored rows, several chunks (and a last short
one), label smoothing, ``reduction="sum"`` and ``num_items_in_batch``; the per-chunk op's in-place gradient;
bad labels give a non-finite loss; bad arguments raise naming them.

torch is required in CI (KITTENS_REQUIRE_TORCH=1): there a missing torch fails this file, never skips it.
"""

import math
import os

import pytest

if os.environ.get("KITTENS_REQUIRE_TORCH") == "1" or os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.nn.functional as F  # noqa: E402

import kittens  # noqa: E402
import kittens.nn as knn  # noqa: E402
import kittens.ops as ops  # noqa: E402

FLOOR = 1e-5


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def case(n, h, v, seed, ignored=(3, 10)):
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(n, h, generator=g, dtype=torch.float64) * 2
    w = torch.randn(v, h, generator=g, dtype=torch.float64) * 0.5
    y = torch.randint(0, v, (n,), generator=g)
    for i in ignored:
        if i < n:
            y[i] = -100
    return hid.bfloat16(), w.bfloat16(), y


def grads(fn, hb, wb):
    h = hb.detach().clone().requires_grad_()
    w = wb.detach().clone().requires_grad_()
    loss = fn(h, w)
    loss.backward()
    return loss.detach(), h.grad, w.grad


@pytest.mark.parametrize("n,h,v,chunk,smoothing,reduction", [
    (37, 72, 1000, 16, 0.0, "mean"),
    (37, 72, 1000, None, 0.1, "mean"),
    (29, 40, 3001, 8, 0.0, "sum"),
])
def test_loss_and_grads_by_the_rule(n, h, v, chunk, smoothing, reduction):
    hb, wb, y = case(n, h, v, seed=n + v)
    ours = grads(lambda a, b: kittens.linear_cross_entropy(a, b, y, chunk_rows=chunk, label_smoothing=smoothing,
                                                           reduction=reduction), hb, wb)
    ref = grads(lambda a, b: F.cross_entropy(a @ b.T, y, label_smoothing=smoothing, reduction=reduction),
                hb.double(), wb.double())
    base = grads(lambda a, b: F.cross_entropy(a @ b.T, y, label_smoothing=smoothing, reduction=reduction), hb, wb)
    for name, o, r, b in zip(("loss", "d_hidden", "d_weight"), ours, ref, base):
        e, eb = rel(o, r), rel(b, r)
        assert math.isfinite(e) and e <= 2 * eb + FLOOR, f"{name}: ours {e:.3e}, bf16 torch {eb:.3e}"
        assert e > 0, name


def test_num_items_in_batch_and_module():
    hb, wb, y = case(37, 72, 1000, seed=5)
    a = kittens.linear_cross_entropy(hb, wb, y, num_items_in_batch=100)
    b = kittens.linear_cross_entropy(hb, wb, y, reduction="sum") / 100
    assert torch.allclose(a, b, rtol=1e-6), (a, b)
    m = knn.LinearCrossEntropy(chunk_rows=16)
    assert torch.allclose(m(hb, wb, y), kittens.linear_cross_entropy(hb, wb, y, chunk_rows=16))
    # (B, T, H) hidden states and (B, T) labels: the same as flattened.
    c = kittens.linear_cross_entropy(hb[:36].reshape(4, 9, 72), wb, y[:36].reshape(4, 9))
    d = kittens.linear_cross_entropy(hb[:36], wb, y[:36])
    assert torch.equal(c, d)


def test_the_chunk_op_writes_the_gradient_in_place():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(5, 300, generator=g) * 8).bfloat16()
    labels = torch.tensor([7.0, -1.0, 299.0, 0.0, 12.0])
    scale = torch.tensor([0.25])
    x64 = x.double()
    logits = x.clone()
    loss = ops.cross_entropy_(logits, labels, scale)
    ref_loss = F.cross_entropy(x64, labels.long().clamp_min(0), reduction="none")
    ref_loss[1] = 0
    assert torch.allclose(loss.double(), ref_loss, rtol=1e-5)
    p = torch.softmax(x64, -1)
    p[torch.arange(5), labels.long().clamp_min(0)] -= 1
    p[1] = 0
    assert rel(logits, p * 0.25) < 2 ** -8


def test_bad_labels_are_not_silent():
    hb, wb, y = case(9, 16, 50, seed=1)
    y[2] = 50  # past the vocabulary
    assert not math.isfinite(kittens.linear_cross_entropy(hb, wb, y).item())
    y[2] = -5  # negative but not ignore_index
    assert not math.isfinite(kittens.linear_cross_entropy(hb, wb, y).item())


def test_bad_arguments_raise_naming_them():
    hb, wb, y = case(9, 16, 50, seed=1)
    with pytest.raises(ValueError, match="reduction 'none'"):
        kittens.linear_cross_entropy(hb, wb, y, reduction="none")
    with pytest.raises(ValueError, match="label_smoothing = 1.5"):
        kittens.linear_cross_entropy(hb, wb, y, label_smoothing=1.5)
    with pytest.raises(ValueError, match="labels"):
        kittens.linear_cross_entropy(hb, wb, y[:5])
    with pytest.raises(TypeError, match="integer"):
        kittens.linear_cross_entropy(hb, wb, y.float())
    with pytest.raises(ValueError, match="weight"):
        kittens.linear_cross_entropy(hb, wb[:, :8], y)


def test_backward_scales_by_the_incoming_gradient_once():
    hb, wb, y = case(37, 72, 1000, seed=9)
    _, h1, w1 = grads(lambda a, b: kittens.linear_cross_entropy(a, b, y), hb, wb)
    _, h3, w3 = grads(lambda a, b: 3 * kittens.linear_cross_entropy(a, b, y), hb, wb)
    assert torch.allclose(h3.float(), 3 * h1.float(), rtol=1e-2) and torch.allclose(w3.float(), 3 * w1.float(), rtol=1e-2)
    h = hb.detach().clone().requires_grad_()
    loss = kittens.linear_cross_entropy(h, wb, y)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
