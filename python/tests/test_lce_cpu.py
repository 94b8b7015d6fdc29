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


def test_an_incoming_gradient_outside_bf16_by_the_rule():
    """The backward scales the saved gradients by the incoming one rounded to bf16 (ops._lce_grad): a
    gradient of 1/3 (not a bf16 value) still meets the rule against float64 autograd of the same graph."""
    hb, wb, y = case(37, 72, 1000, seed=11)
    third = lambda f: (lambda a, b: f(a, b) / 3)  # noqa: E731
    ours = grads(third(lambda a, b: kittens.linear_cross_entropy(a, b, y, chunk_rows=16)), hb, wb)
    ref = grads(third(lambda a, b: F.cross_entropy(a @ b.T, y)), hb.double(), wb.double())
    base = grads(third(lambda a, b: F.cross_entropy(a @ b.T, y)), hb, wb)
    for name, o, r, b in zip(("loss", "d_hidden", "d_weight"), ours, ref, base):
        e, eb = rel(o, r), rel(b, r)
        assert math.isfinite(e) and e <= 2 * eb + FLOOR, f"{name}: ours {e:.3e}, bf16 torch {eb:.3e}"


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


@pytest.mark.parametrize("n,h,v,chunk", [
    (37, 64, 32000, 16),     # Llama 2's vocabulary, three chunks and a short one
    (21, 40, 128256, None),  # Llama 3's, one chunk (the default at few rows)
    (29, 40, 3001, 8),       # odd V: the chunks' rows at a pitch of 3008, read in vectors
])
def test_real_vocabularies_by_the_rule(n, h, v, chunk):
    hb, wb, y = case(n, h, v, seed=v + 1)
    hb, wb = (hb.float() * 2).bfloat16(), wb  # logits of ~±16: softmax probabilities far below bf16's epsilon
    ours = grads(lambda a, b: kittens.linear_cross_entropy(a, b, y, chunk_rows=chunk), hb, wb)
    ref = grads(lambda a, b: F.cross_entropy(a @ b.T, y), hb.double(), wb.double())
    base = grads(lambda a, b: F.cross_entropy(a @ b.T, y), hb, wb)
    for name, o, r, b in zip(("loss", "d_hidden", "d_weight"), ours, ref, base):
        e, eb = rel(o, r), rel(b, r)
        assert math.isfinite(e) and e <= 2 * eb + FLOOR, f"{name}: ours {e:.3e}, bf16 torch {eb:.3e}"


def test_default_chunk_is_a_sixteenth_with_a_row_floor():
    from kittens.loss import CHUNK_SHARE, MIN_CHUNK_ROWS, default_chunk_rows, pitch_of

    assert (CHUNK_SHARE, MIN_CHUNK_ROWS) == (16, 1024)
    # 16384 rows (Llama 1B at batch 4 x 4096): 1/16 is 1024 rows, whatever H and V.
    assert default_chunk_rows(16384, 2048, 128256) == default_chunk_rows(16384, 4096, 32000) == 1024
    # Below 16384 rows the floor (Liger's rows / ceil(V / H) would be 8192 / 32 = 256 at Llama 3 8B's shape).
    assert default_chunk_rows(8192, 4096, 128256) == default_chunk_rows(4096, 768, 50257) == 1024
    # 1/16 rounded up to 64 rows: 40000 / 16 = 2500 -> 2560.
    assert default_chunk_rows(40000, 2048, 128256) == 2560
    # Never more rows than the input has (rounded to 8).
    assert default_chunk_rows(37, 64, 32000) == 40
    assert pitch_of(50257) == 50264 and pitch_of(32000) == 32000


class _Largest(torch.utils._python_dispatch.TorchDispatchMode):
    """The largest tensor (in elements) any operator makes while the mode is on."""

    def __init__(self):
        super().__init__()
        self.largest, self.what = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.what = t.numel(), str(func)
        return out


def test_no_intermediate_near_the_logits_size():
    """The memory claim: beyond the inputs and the two gradients, nothing bigger than one chunk of logits
    (chunk x pitch) is made; the unfused computation makes several tensors of all the logits."""
    n, h, v, chunk = 300, 16, 1003, 64
    hb, wb, y = case(n, h, v, seed=4)
    h_, w_ = hb.clone().requires_grad_(), wb.clone().requires_grad_()
    mode = _Largest()
    with mode:
        kittens.linear_cross_entropy(h_, w_, y, chunk_rows=chunk).backward()
    pitch = -(-v // 8) * 8
    allowed = max(chunk * pitch, v * h, n * h)  # a chunk of logits, the weight's and hidden's own sizes
    assert mode.largest <= allowed, (mode.largest, mode.what, allowed)
    assert allowed * 4 < n * v
    unfused = _Largest()
    with unfused:
        F.cross_entropy(hb.clone().requires_grad_() @ wb.T, y).backward()
    assert unfused.largest >= n * v


def test_compiled_loss_is_one_op_with_eager_values():
    """Under torch.compile the loss is one call of kittens::linear_cross_entropy_forward (its chunk loop
    is not unrolled into the graph); the loss and gradients equal the eager call's."""
    hb, wb, y = case(37, 72, 1000, seed=12)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(a, b):
        return kittens.linear_cross_entropy(a, b, y, chunk_rows=16)

    torch._dynamo.reset()
    got = grads(torch.compile(fn, backend=backend, fullgraph=True), hb, wb)
    want = grads(fn, hb, wb)
    for name, a, b in zip(("loss", "d_hidden", "d_weight"), got, want):
        assert torch.equal(a, b), name
    targets = [str(nd.target) for gm in graphs for nd in gm.graph.nodes if nd.op == "call_function"]
    assert sum("linear_cross_entropy_forward" in t for t in targets) == 1, targets
    assert not any("addmm" in t or "matmul" in t for t in targets), targets


def test_bench_lce_parts_runs_on_the_cpu():
    """``python -m kittens.bench lce --lce-chunks`` (kittens.bench_lce_parts) end to end at a tiny shape
    with a wall-clock timer: every import it makes resolves and every part is timed."""
    import argparse
    import time

    from kittens import bench_lce_parts

    def timer(torch, fns, copies, warmup, iters):
        out = {}
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn(0)
            out[k] = (time.perf_counter() - t0) * 1e3
        return out

    args = argparse.Namespace(lce_shapes=[(40, 16, 203)], lce_chunks="default,16", iters=10, warmup=0)
    rows = bench_lce_parts.lce_parts(torch, kittens, args, device="cpu", timer=timer)
    assert [r["chunk_rows"] for r in rows] == [40, 16] and [r["chunks"] for r in rows] == [1, 3]
    for r in rows:
        assert r["fused_ms"] > 0 and r["unfused_ms"] > 0 and r["parts_sum_ms"] > 0, r
        assert all(r[f"{k}_ms"] > 0 for k in ("logits_gemm", "ce_kernel", "d_hidden_gemm", "d_weight_addmm",
                                               "logits_gemm_torch", "d_hidden_gemm_torch", "labels_prep",
                                               "scale_grads", "op_alone", "fused_torch_gemm")), r
    bench_lce_parts.print_parts(rows)


def test_no_rows_gives_zero_loss_and_gradients():
    _, wb, _ = case(1, 16, 50, seed=2)
    h = torch.zeros(0, 16, dtype=torch.bfloat16, requires_grad=True)
    w = wb.clone().requires_grad_()
    loss = kittens.linear_cross_entropy(h, w, torch.zeros(0, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0 and h.grad.shape == (0, 16) and torch.equal(w.grad, torch.zeros_like(wb))
