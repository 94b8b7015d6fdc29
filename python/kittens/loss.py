"""Fused linear + cross-entropy: the loss of ``hidden @ weight.T`` against labels, and its gradients with
respect to ``hidden`` and ``weight``, without the full (rows x vocab) logits (Liger-Kernel's
``fused_linear_cross_entropy``, docs/references.md).

The rows are taken in chunks (:func:`default_chunk_rows`: 1/16 of the rows, at least 512). Per chunk: the
chunk's logits by a GEMM into one reused buffer whose rows are V rounded up to 8 apart (:func:`pitch_of`;
the kittens GEMM where it takes the shape: bf16, H and V multiples of 8; else PyTorch's), then the
``cross_entropy`` kernel (registry ``cross_entropy``: each row's log-sum-exp and loss, and ``scale *
(softmax - onehot)`` written over the chunk's logits in place), then ``d_hidden_chunk = dlogits @ weight``
(GEMM) and ``d_weight += dlogits.T @ hidden_chunk`` (PyTorch's ``addmm_``: the kittens GEMM reads no
transposed first operand and does not accumulate). The backward is computed in the forward pass, as Liger
does, so the memory beyond the inputs and the two gradients is one chunk of logits; the backward
multiplies the saved gradients by the incoming one. The whole loop is one op,
``kittens::linear_cross_entropy_forward`` (kittens/ops.py), so that ``torch.compile`` calls it rather than
tracing it. ``d_weight`` accumulates in the weight's dtype (bf16 for a bf16 model, as Liger).

On the CPU the per-chunk kernel runs on the interpreter (the registry program, ``_kittens.registry_program``)
and the GEMMs are kittens.matmul's (the interpreter too) for bf16.

Labels: ``ignore_index`` rows add nothing (loss and gradient 0); any other label outside ``[0, V)`` makes
the loss non-finite (never a silently different finite value; PyTorch raises a device assert there).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

_NO_MATCH = float(1 << 25)  # a label no column index equals (column indices are below 2^24)


# -- the per-chunk op ----------------------------------------------------------------------------------


_PROGRAMS = {}


def cross_entropy_eager(logits: Tensor, labels: Tensor, scale: Tensor, smoothing: float = 0.0) -> Tensor:
    """The per-row loss (float32 (R,)) of ``logits`` (R, V) (bf16 or float32) against ``labels`` (float32
    (R,): a class index, or negative for a row to ignore), writing ``scale * (softmax - (1-ε)·onehot -
    ε/V)`` over ``logits`` in place (zero for an ignored row). ``scale``: one float32 value. The registry
    kernel ``cross_entropy``: on CUDA through a prepared call, on the CPU on the interpreter."""
    if logits.is_cuda:
        from . import _dispatch

        return _dispatch.cross_entropy_(logits, labels, scale, float(smoothing))
    from . import _kittens

    if logits.dtype not in (torch.bfloat16, torch.float32) or logits.dim() != 2:
        raise TypeError(f"logits must be a bfloat16 or float32 (R, V) tensor, got {logits.dtype} "
                        f"{tuple(logits.shape)}")
    f32 = logits.dtype == torch.float32
    key = (float(smoothing), f32)
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS[key] = _kittens.registry_program(
            "cross_entropy", {"smoothing": float(smoothing), "f32_logits": f32})
    rows, v = logits.shape
    if rows == 0:
        return torch.zeros(0, dtype=torch.float32)
    pitch = logits.stride(0) if rows > 1 else v
    if logits.stride(1) != 1 and v > 1 or pitch < v:
        raise ValueError(f"logits strides {logits.stride()}: the columns must be adjacent (stride 1) and the "
                         f"rows at least V = {v} apart")
    span = (rows - 1) * pitch + v  # the rows and the gaps between them, as the kernel declares them
    flat = logits.detach().as_strided((span,), (1,))
    out = prog.interpret({
        "logits": flat.float().numpy(), "labels": labels.detach().float().reshape(rows, 1).numpy(),
        "cols": torch.arange(v, dtype=torch.float32).numpy(), "scale": scale.detach().float().reshape(1).numpy(),
    }, {"rows": rows, "vocab": v, "pitch": pitch})
    grad = torch.from_numpy(out["grad"].reshape(-1)).as_strided((rows, v), (pitch, 1))
    logits.copy_(grad.to(logits.dtype))
    return torch.from_numpy(out["loss"]).reshape(rows)


# ``kittens::cross_entropy_``, the op of this body, is defined in kittens/ops.py with the others.


# -- the chunked loss ----------------------------------------------------------------------------------


def _mm(a: Tensor, b: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """``a @ b`` by the kittens GEMM where it reads both in place (bf16, K and N multiples of 8), else
    PyTorch's (into ``out`` directly where given: ``out`` may be a padded chunk, rows a pitch apart)."""
    from . import ops

    k, n = a.shape[1], b.shape[1]
    if a.dtype == b.dtype == torch.bfloat16 and k % 8 == 0 and n % 8 == 0 and a.is_contiguous():
        if a.is_cuda and not torch.compiler.is_compiling():
            from . import _dispatch

            return _dispatch.matmul(a, b, out=out)
        r = ops.matmul(a, b)  # the custom op: traceable by torch.compile
    elif out is not None:
        return torch.mm(a, b, out=out)
    else:
        return a @ b
    if out is None:
        return r
    out.copy_(r)
    return out


#: The fewest rows a chunk takes (where the input has them). Per chunk ``d_weight.addmm_`` reads and writes
#: all of ``d_weight`` (V x H) once, 4·V·H bytes in bf16, against 2·rows·V·H flops: below ~400 rows that
#: traffic outlasts the GEMM on an H100/H200 (~1000 dense bf16 TFLOP/s over 3.4-4.8 TB/s), and the
#: ``d_hidden`` GEMM (rows x H outputs) has too few tiles for the SMs. (Liger's chunk, rows / ceil(V/H),
#: is 64-256 rows at the vocabularies of GPT-2 and Llama 3.)
MIN_CHUNK_ROWS = 512

#: The share of all the rows a chunk takes where that is more than :data:`MIN_CHUNK_ROWS`: the memory
#: beyond the inputs and the gradients (one chunk of logits) is then 1/16 of the logits' (6%).
CHUNK_SHARE = 16


def default_chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Rows per chunk: ``rows / 16`` (:data:`CHUNK_SHARE`) rounded up to 64, at least
    :data:`MIN_CHUNK_ROWS` and at most ``rows`` (rounded up to 8). ``hidden`` and ``vocab`` do not enter:
    the d_weight traffic per chunk and the chunk's share of the logits are both set by rows alone."""
    n = max(-(-rows // (CHUNK_SHARE * 64)) * 64, MIN_CHUNK_ROWS)
    return max(8, min(n, -(-rows // 8) * 8))


def pitch_of(vocab: int) -> int:
    """The row pitch of a chunk's logits: ``vocab`` rounded up to a multiple of 8, so that every row
    starts on a 16-byte boundary (an odd vocabulary such as GPT-2's 50257 then moves in vectors through
    the ``cross_entropy`` kernel, and the GEMMs read and write aligned rows)."""
    return -(-vocab // 8) * 8


def _labels_for_kernel(labels: Tensor, ignore_index: int, vocab: int) -> Tensor:
    lab = labels.to(torch.float32)
    out_of_range = (labels < 0) | (labels >= vocab)
    lab = torch.where(out_of_range, torch.full_like(lab, _NO_MATCH), lab)
    return torch.where(labels == ignore_index, torch.full_like(lab, -1.0), lab)


def _forward_and_grads(hidden, weight, labels, ignore_index, smoothing, scale, chunk, need_dh, need_dw):
    """``(per-row loss, d_hidden, d_weight)`` (the gradients already times ``scale``; None where not
    needed). One buffer of ``chunk`` rows of logits at :func:`pitch_of` V is all the memory beyond the
    inputs and the gradients (the largest intermediate; tests/test_lce_cpu.py checks it)."""
    rows, h = hidden.shape
    v = weight.shape[0]
    lab = _labels_for_kernel(labels, ignore_index, v)
    loss = torch.empty(rows, dtype=torch.float32, device=hidden.device)
    dh = torch.empty_like(hidden) if need_dh else None
    dw = (torch.empty_like(weight) if rows else torch.zeros_like(weight)) if need_dw else None
    wt = weight.t()
    buf = torch.empty(min(chunk, rows), pitch_of(v), dtype=hidden.dtype, device=hidden.device)
    from . import ops

    for s in range(0, rows, chunk):
        e = min(rows, s + chunk)
        hc = hidden[s:e]
        logits = _mm(hc, wt, out=buf[: e - s, :v])
        loss[s:e] = ops.call("cross_entropy_", logits, lab[s:e], scale, smoothing)
        if dh is not None:
            _mm(logits, weight, out=dh[s:e])
        if dw is not None and s == 0:
            torch.mm(logits.t(), hc, out=dw)  # the first chunk writes d_weight: no zero fill, no read
        elif dw is not None:
            dw.addmm_(logits.t(), hc)
    return loss, dh, dw


def lce_forward(hidden: Tensor, weight: Tensor, labels: Tensor, scale: Tensor, ignore_index: int,
                smoothing: float, chunk: int, need_dh: bool, need_dw: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """The body of ``kittens::linear_cross_entropy_forward`` (kittens/ops.py): ``(loss, d_hidden,
    d_weight)`` — the loss (a float32 scalar, ``scale`` times the sum of the rows' losses) and both
    gradients of it (empty (0,) tensors where not needed). One op, opaque to ``torch.compile``: traced
    through, the chunk loop unrolls into the graph and functionalisation turns ``addmm_`` into a new
    ``d_weight`` per chunk."""
    loss, dh, dw = _forward_and_grads(hidden, weight, labels, ignore_index, smoothing, scale, chunk,
                                      need_dh, need_dw)
    empty = hidden.new_empty((0,))
    return (loss.sum() * scale[0], empty if dh is None else dh, empty if dw is None else dw)


def linear_cross_entropy(hidden: Tensor, weight: Tensor, labels: Tensor, *, ignore_index: int = -100,
                         label_smoothing: float = 0.0, reduction: str = "mean", chunk_rows: Optional[int] = None,
                         num_items_in_batch=None) -> Tensor:
    """``F.cross_entropy(hidden @ weight.T, labels, ignore_index=, label_smoothing=, reduction=)`` for
    ``hidden`` (..., H), ``weight`` (V, H), ``labels`` (...) of integers, without materialising the logits
    (see the module documentation). ``reduction``: ``"mean"`` (over the rows not ignored, or over
    ``num_items_in_batch`` when given, as transformers' loss does) or ``"sum"``. ``chunk_rows``: rows per
    chunk (default :func:`default_chunk_rows`). Differentiable in ``hidden`` and ``weight`` (both
    gradients are computed in this call when they require one)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction {reduction!r}: 'mean' or 'sum' (the gradients are computed in the "
                         "forward pass, which needs one scalar loss)")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing = {label_smoothing} must be in [0, 1)")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} must be (..., H) and weight {tuple(weight.shape)} (V, H)")
    if tuple(labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"labels {tuple(labels.shape)} must be hidden's leading shape {tuple(hidden.shape[:-1])}")
    if labels.dtype.is_floating_point:
        raise TypeError(f"labels has dtype {labels.dtype}; class indices (an integer dtype) are needed")
    if hidden.dtype != weight.dtype:
        raise TypeError(f"hidden ({hidden.dtype}) and weight ({weight.dtype}) must have one dtype")
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows = {chunk_rows} must be positive")
    h2 = hidden.reshape(-1, hidden.shape[-1])
    if not h2.is_contiguous():
        h2 = h2.contiguous()
    lab = labels.reshape(-1)
    # Whole 8-row steps, so that every chunk's labels and rows start on a 16-byte boundary.
    chunk = -(-(chunk_rows or default_chunk_rows(h2.shape[0], h2.shape[1], weight.shape[0])) // 8) * 8
    w = weight if weight.is_contiguous() else weight.contiguous()
    if reduction == "mean":
        div = (lab != ignore_index).sum().clamp_min(1).to(torch.float32) if num_items_in_batch is None else \
            torch.as_tensor(num_items_in_batch, dtype=torch.float32, device=hidden.device)
        scale = (1.0 / div).reshape(1)
    else:
        scale = torch.ones(1, dtype=torch.float32, device=hidden.device)
    from . import ops

    need_dh = torch.is_grad_enabled() and h2.requires_grad
    need_dw = torch.is_grad_enabled() and w.requires_grad
    return ops.call("linear_cross_entropy_forward", h2, w, lab, scale, int(ignore_index), float(label_smoothing),
                    int(chunk), need_dh, need_dw)[0]
