"""The bodies of the loss ops ``kittens::cross_entropy_`` (the per-chunk kernel) and
``kittens::linear_cross_entropy_forward`` (the whole chunked loss), registered in kittens/ops.py; the
public function built on them, and the chunk policy, are kittens/loss.py's (which documents the method).

Inside an op's body nothing is traced and nothing requires grad, so the bodies call each other and the
GEMM directly (not through the ops): this module imports no op module, and kittens/ops.py imports it.
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


# ``kittens::cross_entropy_``, the op of this body, is registered in kittens/ops.py with the others.


# -- the chunked loss ----------------------------------------------------------------------------------


#: Whether the chunks' logits and d_hidden GEMMs use the kittens GEMM where it takes the shape (else
#: PyTorch's); ``python -m kittens.bench lce --lce-chunks`` times the fused pass both ways.
KITTENS_GEMM = True


def _mm(a: Tensor, b: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """``a @ b`` by the kittens GEMM where it reads both in place (bf16, K and N multiples of 8) and
    :data:`KITTENS_GEMM` is set, else PyTorch's (into ``out`` directly where given: ``out`` may be a
    padded chunk, rows a pitch apart)."""
    k, n = a.shape[1], b.shape[1]
    if (KITTENS_GEMM and a.dtype == b.dtype == torch.bfloat16 and k % 8 == 0 and n % 8 == 0
            and a.is_contiguous()):
        if a.is_cuda and not torch.compiler.is_compiling():
            from . import _dispatch

            return _dispatch.matmul(a, b, out=out)
        from . import _matmul  # the CPU interpreter's GEMM (kittens.ops.matmul's body)

        r = _matmul(a, b, None)
    elif out is not None:
        return torch.mm(a, b, out=out)
    else:
        return a @ b
    if out is None:
        return r
    out.copy_(r)
    return out


def pitch_of(vocab: int) -> int:
    """The row pitch of a chunk's logits: ``vocab`` rounded up to a multiple of 8, so that every row
    starts on a 16-byte boundary (an odd vocabulary such as GPT-2's 50257 then moves in vectors through
    the ``cross_entropy`` kernel, and the GEMMs read and write aligned rows)."""
    return -(-vocab // 8) * 8


def _labels_for_kernel(labels: Tensor, ignore_index: int, vocab: int) -> Tensor:
    """The kernel's float32 labels: -1 for an ignored row, :data:`_NO_MATCH` for any other negative
    label. A label at or past ``vocab`` stays as it is: as a float32 it is at least ``vocab`` (below 2^24,
    where every integer is exact; larger ones round to values that are larger still), so no column
    matches it either. Five launches (the conversion, two comparisons, two scalar ``where``), no
    full-size constants: this runs in the host time before the first GEMM."""
    if vocab >= 1 << 24:
        raise ValueError(f"vocabulary {vocab}: the cross_entropy kernel compares labels as float32, exact below 2^24")
    lab = torch.where(labels < 0, _NO_MATCH, labels.to(torch.float32))
    return torch.where(labels == ignore_index, -1.0, lab)


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
    for s in range(0, rows, chunk):
        e = min(rows, s + chunk)
        hc = hidden[s:e]
        logits = _mm(hc, wt, out=buf[: e - s, :v])
        loss[s:e] = cross_entropy_eager(logits, lab[s:e], scale, smoothing)
        if dh is not None:
            _mm(logits, weight, out=dh[s:e])
        if dw is not None and s == 0:
            torch.mm(logits.t(), hc, out=dw)  # the first chunk writes d_weight: no zero fill, no read
        elif dw is not None:
            dw.addmm_(logits.t(), hc)
    return loss, dh, dw


def lce_forward(hidden: Tensor, weight: Tensor, labels: Tensor, scale: Tensor, ignore_index: int,
                smoothing: float, chunk: int, need_dh: bool, need_dw: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """The body of ``kittens::linear_cross_entropy_forward`` (registered in kittens/ops.py): ``(loss, d_hidden,
    d_weight)`` — the loss (a float32 scalar, ``scale`` times the sum of the rows' losses) and both
    gradients of it (empty (0,) tensors where not needed). One op, opaque to ``torch.compile``: traced
    through, the chunk loop unrolls into the graph and functionalisation turns ``addmm_`` into a new
    ``d_weight`` per chunk."""
    loss, dh, dw = _forward_and_grads(hidden, weight, labels, ignore_index, smoothing, scale, chunk,
                                      need_dh, need_dw)
    empty = hidden.new_empty((0,))
    return (loss.sum() * scale[0], empty if dh is None else dh, empty if dw is None else dw)
