"""Fused linear + cross-entropy: the loss of ``hidden @ weight.T`` against labels, and its gradients with
respect to ``hidden`` and ``weight``, without the full (rows x vocab) logits (Liger-Kernel's
``fused_linear_cross_entropy``, docs/references.md).

The rows are taken in chunks (:func:`default_chunk_rows`: 1/16 of the rows, at least 1024). Per chunk: the
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

from typing import Optional

import torch
from torch import Tensor

from . import ops
from ._lce import pitch_of  # noqa: F401 (the chunk's row pitch, part of the chunk policy's documentation)

#: The fewest rows a chunk takes (where the input has them). Per chunk ``d_weight.addmm_`` reads and writes
#: all of ``d_weight`` (V x H) once, 4·V·H bytes in bf16, against 2·rows·V·H flops, and the ``d_hidden``
#: GEMM (rows x H outputs) has few tiles for the SMs. On an H200 (bench lce --lce-chunks, 2026-11-28) the
#: fused pass against the unfused one was 0.87x at 512 rows, 0.95x at 1024 and 2048 (8192 x 4096 x
#: 128256); 0.84x, 0.95x, 0.98x at 8192 x 2048 x 32000. (Liger's chunk, rows / ceil(V/H), is 64-256 rows
#: at the vocabularies of GPT-2 and Llama 3.)
MIN_CHUNK_ROWS = 1024

#: The share of all the rows a chunk takes where that is more than :data:`MIN_CHUNK_ROWS`: the memory
#: beyond the inputs and the gradients (one chunk of logits) is then 1/16 of the logits' (6%); from
#: 16384 rows on (a 4 x 4096 batch), below it the floor's 1024 rows.
CHUNK_SHARE = 16


def default_chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Rows per chunk: ``rows / 16`` (:data:`CHUNK_SHARE`) rounded up to 64, at least
    :data:`MIN_CHUNK_ROWS` and at most ``rows`` (rounded up to 8). ``hidden`` and ``vocab`` do not enter:
    the d_weight traffic per chunk and the chunk's share of the logits are both set by rows alone."""
    n = max(-(-rows // (CHUNK_SHARE * 64)) * 64, MIN_CHUNK_ROWS)
    return max(8, min(n, -(-rows // 8) * 8))


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
    need_dh = torch.is_grad_enabled() and h2.requires_grad
    need_dw = torch.is_grad_enabled() and w.requires_grad
    return ops.call("linear_cross_entropy_forward", h2, w, lab, scale, int(ignore_index), float(label_smoothing),
                    int(chunk), need_dh, need_dw)[0]
