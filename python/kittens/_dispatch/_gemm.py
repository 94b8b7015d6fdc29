"""matmul through the prepared ``gemm_bf16`` call (operands read in place where TMA can)."""

from __future__ import annotations

import torch

from .._arrays import matmul_operand
from . import _core
from ._core import _BF16, _HANDLES, _bf16s, _launch, _same_device, _spec, _store


# -- matmul --------------------------------------------------------------------------------------------


def matmul(a, b, out=None):
    """``a @ b`` on CUDA: a (M, K) and b (K, N) each row-major or the transpose of a row-major array,
    with any leading-dimension stride (a slice of a bigger matrix), read in place
    (:func:`kittens._arrays.matmul_operand`); ``out``: the (M, N) row-major output to write (else a
    new one)."""

    ldc = None if out is None else _out_rows(out, a, b)  # None: dense (N)
    key = (0, a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device(), ldc)
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_matmul(key, a, b, ldc)
    mode = rec[2]
    m, n = a.shape[0], b.shape[1]
    if mode is not None:
        return _into(out, mode(a, b))
    pa, pb = a.data_ptr(), b.data_ptr()
    if (pa | pb) & 15:  # a view off a 16-byte boundary: TMA's global addresses need one
        return _into(out, _matmul_copied(a, b))
    if out is None:
        out = torch.empty((m, n), dtype=_BF16, device=a.device)
    elif out.data_ptr() & 15:
        return _into(out, matmul(a, b))
    if rec[1][1]:  # split-K: the partial sums' scratch, then the reduction
        _launch(rec, (pa, pb, out.data_ptr()), key[7], device_obj=a.device)
    else:
        rec[0].launch((pa, pb, out.data_ptr()), _core._raw_stream(key[7]))
    return out


def _out_rows(out, a, b):
    """``out``'s row stride when it is a row-major (M, N) slice of a bigger matrix's rows (written in
    place), None when dense; anything else is refused, naming what is needed (after the operands'
    own checks when they are not 2-D)."""
    if a.dim() != 2 or b.dim() != 2:
        return None  # refused by _prepare_matmul, which names them
    m, n, like = a.shape[0], b.shape[1], a
    s = out.stride() if out.dim() == 2 else ()
    if out.dtype != _BF16 or tuple(out.shape) != (m, n) or out.device != like.device or not (
        m <= 1 or n == 0 or (s[1] == 1 or n == 1) and s[0] >= n
    ):
        raise ValueError(
            f"out must be a {_BF16} tensor of shape {(m, n)} on {like.device}, row-major with rows at least "
            f"{n} elements apart (strides (ldc, 1)); got {out.dtype} {tuple(out.shape)} strides {out.stride()} "
            f"on {out.device}"
        )
    return None if m <= 1 or n == 0 or s[0] == n else s[0]


def _into(out, result):
    if out is None:
        return result
    out.copy_(result)
    return out


def _matmul_copied(a, b):
    """An operand whose first element is off a 16-byte boundary (TMA's global addresses are 16-byte
    aligned): that operand copied into a fresh row-major array (the documented copy)."""

    def fresh(t):
        return t.clone(memory_format=torch.contiguous_format) if t.data_ptr() & 15 else t

    return matmul(fresh(a), fresh(b))


def _matmul_empty(a, b):
    out = torch.empty((a.shape[0], b.shape[1]), dtype=_BF16, device=a.device)
    if a.shape[1] == 0:
        out.zero_()
    return out


def _matmul_padded(a, b):
    """Rows TMA cannot address (a leading dimension, K or N no multiple of 8 elements: TMA's rows are
    16-byte multiples): the operands copied, zero-padded to whole 8s, into the layouts the kernel reads,
    and the result cut back (the documented copy)."""
    m, k = a.shape
    n = b.shape[1]
    kp, np_ = -(-k // 8) * 8, -(-n // 8) * 8
    ap = a.new_zeros((m, kp))
    ap[:, :k] = a
    bp = b.new_zeros((np_, kp))  # w-form (N, K): read in place by the kernel
    bp[:n, :k] = b.t()
    return matmul(ap, bp.t())[:, :n].contiguous()


def _prepare_matmul(key, a, b, ldc=None):
    _bf16s(a=a, b=b)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"kittens.matmul takes 2-D arrays, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"a @ b: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    dev = _same_device(a=a, b=b)
    if m == 0 or n == 0 or k == 0:
        return _store(key, (None, (0, ()), _matmul_empty))
    la, lb = matmul_operand(a.shape, a.stride()), matmul_operand(b.shape, b.stride())
    for name, t, lay, (r, c) in (("a", a, la, (m, k)), ("b", b, lb, (k, n))):
        if lay is None:
            raise ValueError(
                f"{name} must have one dimension contiguous: row-major ({r}, {c}) with rows any distance >= {c} "
                f"apart (a slice of a bigger matrix), or the transpose of a row-major ({c}, {r}) array with "
                f"rows >= {r} apart; got strides {t.stride()}")
    (a_km, lda), (b_nk, ldb) = la, lb
    ldc = n if ldc is None else ldc
    if lda % 8 or ldb % 8 or ldc % 8 or n % 8:
        return _store(key, (None, (0, ()), _matmul_padded))
    a_spec = _spec("a", (k, m) if a_km else (m, k), (lda, 1))
    b_spec = _spec("b", (n, k) if b_nk else (k, n), (ldb, 1))
    problem = {"m": m, "n": n, "k": k, "b_kn": not b_nk, "a_km": a_km}
    if (lda, ldb, ldc) != (m if a_km else k, k if b_nk else n, n):
        problem["ld"] = (lda, ldb, ldc)  # slices of bigger matrices: the kernel takes the strides
    return _core._prepare(key, "gemm_bf16", problem, (a_spec, b_spec, _spec("c", (m, n), (ldc, 1))), dev)
