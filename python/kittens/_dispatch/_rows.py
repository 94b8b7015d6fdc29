"""The row-wise kernels through their prepared calls: layernorm, rmsnorm and
swiglu (each with its backward) and the fused cross-entropy."""

from __future__ import annotations

import os

import torch

from . import _core
from ._core import _dense, _BF16, _HANDLES, _bf16s, _check_out, _launch, _same_device, _spec, _store


# -- layernorm -----------------------------------------------------------------------------------------


def _words(v: int):
    """A 64-bit seed or counter as the kernel's two 32-bit word parameters, each signed."""
    v %= 2**64
    lo, hi = v & 0xFFFFFFFF, v >> 32
    return (lo - 2**32 if lo >= 2**31 else lo, hi - 2**32 if hi >= 2**31 else hi)


# The backwards' row-loop override for a measurement (``kittens_kernels::rows::ROW_LOOP_VAR``), read when
# a handle is built: part of the backwards' keys, so that one process can time several settings.
_ROW_LOOP_VAR = "KITTENS_NORM_BWD"
# The forwards' split override (``kittens_kernels::rows::FWD_SPLIT_VAR``), likewise part of their keys.
_FWD_SPLIT_VAR = "KITTENS_NORM_FWD"
# SwiGLU's block-shape override (``kittens_kernels::swiglu::TUNE_VAR``), likewise.
_SWIGLU_VAR = "KITTENS_SWIGLU"
_CE_VAR = "KITTENS_CE"  # kittens_kernels::cross_entropy::TUNE_VAR: the block shape, for a measurement


def layernorm(x, residual, weight, bias, p: float, seed: int, offset: int, eps: float, out=None):
    """The fused dropout-residual-layernorm on CUDA: a new (2, ..., D) tensor (normed rows, residual)."""
    key = (2, x.shape, x.stride(), residual.shape, residual.stride(), weight.shape, weight.stride(),
           bias.shape, bias.stride(), x.dtype, residual.dtype, weight.dtype, bias.dtype, x.get_device(),
           residual.get_device(), weight.get_device(), bias.get_device(), p, eps, os.environ.get(_FWD_SPLIT_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_layernorm(key, x, residual, weight, bias, p, eps)
    shape = (2,) + tuple(x.shape)
    if out is None:
        out = torch.empty(shape, dtype=_BF16, device=x.device)
    else:
        _check_out("out", out, shape, torch.empty(shape, device="meta").stride(), _BF16, x)
    if rec[0] is None:
        return out
    s0, s1 = _words(seed)
    o0, o1 = _words(offset)
    rec[0].launch((x.data_ptr(), residual.data_ptr(), weight.data_ptr(), bias.data_ptr(), out.data_ptr()),
                  _core._raw_stream(key[13]), [s0, s1, o0, o1])
    return out


def _prepare_layernorm(key, x, residual, weight, bias, p, eps):
    _bf16s(x=x, residual=residual, weight=weight, bias=bias)
    dev = _same_device(x=x, residual=residual, weight=weight, bias=bias)
    if x.dim() < 1 or residual.shape != x.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must be (..., D) of one shape")
    d = x.shape[-1]
    if weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)} must be (D,) = ({d},)")
    _dense(weight=weight, bias=bias)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p = {p} must be in [0, 1)")
    rows = x.numel() // d if d else 0
    if rows == 0 or d == 0:
        return _store(key, (None, (0, ()), None))
    problem = {"rows": rows, "norm_dim": d, "p": float(p), "eps": float(eps)}
    tensors = (
        *_row_specs(problem, d, rows, x=x, residual=residual),
        _spec("weight", (rows, d), (0, 1)),
        _spec("bias", (rows, d), (0, 1)),
        _spec("out", (2, rows, d), (rows * d, d, 1)),
    )
    free = ("seed_lo", "seed_hi", "offset_lo", "offset_hi")
    return _core._prepare(key, "layernorm", problem, tensors, dev, free=free)


def layernorm_backward(dy, dh, x, residual, weight, p: float, seed: int, offset: int, eps: float):
    """``(dx, dresidual, dweight, dbias)`` of :func:`layernorm` on CUDA from ``dy`` and ``dh``, the
    gradients of its two planes (registry ``layernorm_bwd``: ``h``, its statistics and the dropout mask
    recomputed from x, residual, seed and offset; two launches, the per-block partial sums of dweight
    and dbias are scratch)."""
    # A string tag: the integer tags are the other ops' (a key must never match another op's).
    key = ("layernorm_bwd", dy.shape, dy.stride(), dh.stride(), x.shape, x.stride(), residual.stride(),
           weight.shape, weight.stride(), dy.dtype, dh.dtype, x.dtype, residual.dtype, weight.dtype,
           x.device, dy.device, dh.device, residual.device, weight.device, p, eps, os.environ.get(_ROW_LOOP_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_layernorm_backward(key, dy, dh, {"x": x, "residual": residual}, weight, p, eps)
    dx, dres = _empty_like(x), _empty_like(x)
    dw = torch.empty(weight.shape, dtype=_BF16, device=x.device)
    db = torch.empty(weight.shape, dtype=_BF16, device=x.device)
    if rec[0] is None:
        return dx, dres, dw.zero_(), db.zero_()
    s0, s1 = _words(seed)
    o0, o1 = _words(offset)
    ptrs = tuple(t.data_ptr() for t in (dy, dh, x, residual, weight, dx, dres, dw, db))
    _launch(rec, ptrs, x.get_device(), free=(s0, s1, o0, o1), device_obj=x.device)
    return dx, dres, dw, db


def _prepare_layernorm_backward(key, dy, dh, rows_in, weight, p, eps):
    """Both forms' preparation: ``rows_in`` is ``{"x": x, "residual": residual}``, or ``{"h": h}`` for the
    form from the forward's h (``from_h``: without dropout it writes dresidual alone, which is dx)."""
    (lead, first), from_h = next(iter(rows_in.items())), "h" in rows_in
    ts = dict(dy=dy, dh=dh, **rows_in, weight=weight)
    _bf16s(**ts)
    dev = _same_device(**ts)
    _dense(weight=weight)
    for name, t in ts.items():
        if name != "weight" and t.shape != first.shape:
            raise ValueError(f"{name} {tuple(t.shape)} must have {lead}'s shape {tuple(first.shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p = {p} must be in [0, 1)")
    rows, d = _rows_of(first, weight)
    if rows == 0 or d == 0:
        return _store(key, (None, (0, ()), None))
    m = ((rows, d), (d, 1))
    problem = {"rows": rows, "norm_dim": d, "p": float(p), "eps": float(eps)}
    if from_h:
        problem["from_h"] = True
    tensors = _row_specs(problem, d, rows, dy=dy, dh=dh, **rows_in)
    tensors.append(_spec("weight", (rows, d), (0, 1)))
    tensors += [_spec(n, *m) for n in (("dresidual",) if from_h and p == 0.0 else ("dx", "dresidual"))]
    tensors += [_spec(n, (d, 1), (1, 1)) for n in ("dweight", "dbias")]
    free = ("seed_lo", "seed_hi", "offset_lo", "offset_hi")
    return _core._prepare(key, "layernorm_bwd", problem, tensors, dev, free=free)


def layernorm_backward_h(dy, dh, h, weight, p: float, seed: int, offset: int, eps: float):
    """``(dx, dresidual, dweight, dbias)`` of :func:`layernorm` on CUDA from ``dy``, ``dh`` and ``h``, its
    second output plane (registry ``layernorm_bwd`` with ``from_h``: the statistics recomputed from h, the
    dropout mask from seed and offset). Without dropout ``dx`` is ``dresidual`` (one tensor, returned for
    both, as autograd's own backward of ``residual + x`` does): four ``(rows, D)`` tensors moved, not six."""
    key = ("layernorm_bwd_h", dy.shape, dy.stride(), dh.stride(), h.shape, h.stride(), weight.shape,
           weight.stride(), dy.dtype, dh.dtype, h.dtype, weight.dtype, h.device, dy.device, dh.device,
           weight.device, p, eps, os.environ.get(_ROW_LOOP_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_layernorm_backward(key, dy, dh, {"h": h}, weight, p, eps)
    dres = _empty_like(h)
    dx = _empty_like(h) if p > 0.0 else dres
    dw = torch.empty(weight.shape, dtype=_BF16, device=h.device)
    db = torch.empty(weight.shape, dtype=_BF16, device=h.device)
    if rec[0] is None:
        return dx, dres, dw.zero_(), db.zero_()
    s0, s1 = _words(seed)
    o0, o1 = _words(offset)
    rows_out = (dx, dres) if p > 0.0 else (dres,)
    ptrs = tuple(t.data_ptr() for t in (dy, dh, h, weight, *rows_out, dw, db))
    _launch(rec, ptrs, h.get_device(), free=(s0, s1, o0, o1), device_obj=h.device)
    return dx, dres, dw, db


# -- rmsnorm, swiglu -----------------------------------------------------------------------------------




def _row_stride(name: str, t) -> int:
    """The row stride (elements) of ``t`` read as ``(rows, D)`` rows in place: its last dimension
    contiguous and its rows evenly spaced (each leading dimension nested in the next, as in a slice
    ``x[..., :D]`` of a wider tensor). The kernels check the stride itself (a multiple of 8, at least D;
    ``kittens_kernels::rows::RowStrides``); other layouts are a ValueError naming the tensor."""
    d = t.shape[-1] if t.dim() else 1
    rs, span = None, None
    for n, st in reversed(list(zip(t.shape[:-1], t.stride()[:-1]))):
        if n == 1:
            continue
        if rs is None:
            rs = st
        elif st != span:
            rs = -1
        span = st * n
    if (d > 1 and t.stride(-1) != 1) or rs == -1:
        raise ValueError(f"{name} of shape {tuple(t.shape)} and strides {t.stride()} must be (..., D) rows: "
                         "the last dimension contiguous and the rows one stride apart")
    return d if rs is None else rs


def rows_in_place(t):
    """``t`` itself where the row-wise kernels read its rows in place (a row stride that is a multiple of
    8 elements and at least D, the rule ``kittens_kernels::rows::RowStrides`` checks), else a dense
    copy (e.g. an expanded gradient's zero stride)."""
    if t.is_contiguous() or t.dim() == 0:
        return t  # dense rows (D apart; the kernels check D), or refused later with the op's own message
    try:
        rs = _row_stride("t", t)
    except ValueError:
        return t.contiguous()
    return t if rs % 8 == 0 and rs >= t.shape[-1] else t.contiguous()


def _row_specs(problem: dict, d: int, rows: int, **ts):
    """The ``(rows, D)`` specs of the row-strided tensors ``ts`` in their own row strides; each stride
    that is not D goes to ``problem`` as ``{name}_row_stride``."""
    specs = []
    for name, t in ts.items():
        rs = _row_stride(name, t)
        if rs != d:
            problem[f"{name}_row_stride"] = rs
        specs.append(_spec(name, (rows, d), (rs, 1)))
    return specs


def _empty_like(x):
    return torch.empty(x.shape, dtype=_BF16, device=x.device)


def rmsnorm(x, residual, weight, eps: float):
    """``(y, h)`` on CUDA: ``h = x + residual`` (``None`` without a residual), ``y = h / sqrt(mean(h^2) +
    eps) * weight`` (registry ``rmsnorm``)."""
    res = None if residual is None else (residual.shape, residual.stride(), residual.dtype, residual.device)
    key = (5, x.shape, x.stride(), x.dtype, x.device, res, weight.shape, weight.stride(), weight.dtype,
           weight.device, eps, os.environ.get(_FWD_SPLIT_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_rmsnorm(key, x, residual, weight, eps)
    y = _empty_like(x)
    h = None if residual is None else _empty_like(x)
    if rec[0] is None:
        return y, h
    ins = (x,) if residual is None else (x, residual)
    outs = (y,) if h is None else (y, h)
    _launch(rec, tuple(t.data_ptr() for t in ins + (weight,) + outs), x.get_device(), device_obj=x.device)
    return y, h


def _rows_of(x, weight):
    if x.dim() < 1:
        raise ValueError(f"x must be (..., D), got shape {tuple(x.shape)}")
    d = x.shape[-1]
    if tuple(weight.shape) != (d,):
        raise ValueError(f"weight {tuple(weight.shape)} must be (D,) = ({d},)")
    return (x.numel() // d if d else 0), d


def _prepare_rmsnorm(key, x, residual, weight, eps):
    ts = dict(x=x, weight=weight) if residual is None else dict(x=x, residual=residual, weight=weight)
    _bf16s(**ts)
    dev = _same_device(**ts)
    _dense(weight=weight)
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must be (..., D) of one shape")
    rows, d = _rows_of(x, weight)
    if rows == 0 or d == 0:
        rec = (None, (0, ()), None)
        _HANDLES[key] = rec
        return rec
    m = ((rows, d), (d, 1))
    outs = ("y",) if residual is None else ("y", "residual_out")
    problem = {"rows": rows, "norm_dim": d, "eps": float(eps), "residual": residual is not None}
    ins = dict(x=x) if residual is None else dict(x=x, residual=residual)
    tensors = _row_specs(problem, d, rows, **ins) + [_spec("weight", (rows, d), (0, 1))]
    tensors += [_spec(n, *m) for n in outs]
    return _core._prepare(key, "rmsnorm", problem, tensors, dev)


def rmsnorm_backward(dy, r, weight, dh, eps: float):
    """``(dx, dweight)`` on CUDA from the forward's ``h`` (``r``; x without a residual) and ``dh``, the
    gradient of ``h`` (``None``: none, or no residual); ``dx`` is also the residual's gradient
    (registry ``rmsnorm_bwd``: two launches, the per-block partial sums of dweight are scratch)."""
    key = (6, dy.shape, dy.stride(), dy.dtype, r.shape, r.stride(), r.dtype, r.device, weight.shape,
           weight.stride(), weight.dtype, None if dh is None else (dh.stride(), dh.dtype), eps,
           os.environ.get(_ROW_LOOP_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_rmsnorm_backward(key, dy, r, weight, dh, eps)
    dx = _empty_like(r)
    dw = torch.empty(weight.shape, dtype=_BF16, device=r.device)
    if rec[0] is None:
        return dx, dw.zero_()
    ins = (dy, r, weight) if dh is None else (dy, r, weight, dh)
    _launch(rec, tuple(t.data_ptr() for t in ins + (dx, dw)), r.get_device(), device_obj=r.device)
    return dx, dw


def _prepare_rmsnorm_backward(key, dy, r, weight, dh, eps):
    ts = dict(dy=dy, r=r, weight=weight) if dh is None else dict(dy=dy, r=r, weight=weight, dh=dh)
    _bf16s(**ts)
    dev = _same_device(**ts)
    _dense(weight=weight)
    for name, t in ts.items():
        if name != "weight" and t.shape != r.shape:
            raise ValueError(f"{name} {tuple(t.shape)} must have h's shape {tuple(r.shape)}")
    rows, d = _rows_of(r, weight)
    if rows == 0 or d == 0:
        rec = (None, (0, ()), None)
        _HANDLES[key] = rec
        return rec
    m = ((rows, d), (d, 1))
    problem = {"rows": rows, "norm_dim": d, "eps": float(eps), "residual": dh is not None}
    tensors = _row_specs(problem, d, rows, dy=dy, r=r) + [_spec("weight", (rows, d), (0, 1))]
    if dh is not None:
        tensors += _row_specs(problem, d, rows, dresidual_out=dh)
    tensors += [_spec("dx", *m), _spec("dweight", (d, 1), (1, 1))]
    return _core._prepare(key, "rmsnorm_bwd", problem, tensors, dev)


def _packed(gate, up) -> bool:
    """Gate and up are the two halves of one (..., 2F) tensor whose rows are one stride apart (a fused
    projection's output, or a slice of a wider one)."""
    f = gate.shape[-1] if gate.dim() else 0
    if not (gate.dim() >= 1 and gate.shape == up.shape and f > 0 and gate.stride() == up.stride()
            and up.data_ptr() == gate.data_ptr() + 2 * f):
        return False
    try:
        return _row_stride("gate", gate) >= 2 * f
    except ValueError:
        return False


def _inner(shape):
    """Elements (in units of the last dimension) below each leading dimension of a dense tensor."""
    out, acc = [], 1
    for n in reversed(shape[:-1]):
        out.append(acc)
        acc *= n
    return list(reversed(out))


def swiglu(gate, up, packed=None):
    """``silu(gate) * up`` on CUDA (registry ``swiglu``): two dense (..., F) tensors, or the two halves of
    one dense (..., 2F) tensor (read in place, the packed form); ``packed``: :func:`_packed`'s answer when
    the caller has it."""
    if packed is None:
        packed = _packed(gate, up)
    key = (7, gate.shape, gate.stride(), up.stride(), gate.dtype, up.dtype, gate.device, up.device, packed,
           os.environ.get(_SWIGLU_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_swiglu(key, "swiglu", gate, up, None, packed)
    out = _empty_like(gate)
    if rec[0] is None:
        return out
    ins = (gate,) if packed else (gate, up)
    _launch(rec, tuple(t.data_ptr() for t in ins + (out,)), gate.get_device(), device_obj=gate.device)
    return out


def swiglu_backward(dy, gate, up, allow_packed: bool = True):
    """``(dgate, dup)`` on CUDA (registry ``swiglu_bwd``), gate and up as :func:`swiglu` takes them;
    ``allow_packed=False``: halves of one tensor are read as two row-strided tensors and the gradients
    come as two tensors (not views of one)."""
    packed = allow_packed and _packed(gate, up)
    key = (8, dy.shape, dy.stride(), dy.dtype, gate.shape, gate.stride(), up.stride(), gate.dtype, up.dtype,
           gate.device, packed, os.environ.get(_SWIGLU_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_swiglu(key, "swiglu_bwd", gate, up, dy, packed)
    if packed:
        both = torch.empty(tuple(gate.shape[:-1]) + (2 * gate.shape[-1],), dtype=_BF16, device=gate.device)
        dgate, dup = both.split(gate.shape[-1], dim=-1)
        outs = (both,)
    else:
        dgate, dup = _empty_like(gate), _empty_like(up)
        outs = (dgate, dup)
    if rec[0] is None:
        return dgate, dup
    ins = (dy, gate) if packed else (dy, gate, up)
    _launch(rec, tuple(t.data_ptr() for t in ins + outs), gate.get_device(), device_obj=gate.device)
    return dgate, dup


def _prepare_swiglu(key, entry, gate, up, dy, packed):
    ts = dict(gate=gate, up=up) if dy is None else dict(dy=dy, gate=gate, up=up)
    _bf16s(**ts)
    dev = _same_device(**ts)
    if gate.shape != up.shape or (dy is not None and dy.shape != gate.shape):
        raise ValueError(f"gate {tuple(gate.shape)}, up {tuple(up.shape)}" +
                         ("" if dy is None else f" and dy {tuple(dy.shape)}") + " must be (..., F) of one shape")
    f = gate.shape[-1] if gate.dim() else 0
    rows = gate.numel() // f if f else 0
    if rows == 0 or f == 0:
        rec = (None, (0, ()), None)
        _HANDLES[key] = rec
        return rec
    m = ((rows, f), (f, 1))
    pair = ((rows, 2, f), (2 * f, f, 1))
    problem = {"rows": rows, "norm_dim": f, "packed": bool(packed)}
    tensors = _row_specs(problem, f, rows, dy=dy) if dy is not None else []
    if packed:
        rs = _row_stride("gate", gate)
        if rs != 2 * f:
            problem["x_row_stride"] = rs
        tensors.append(_spec("x", (rows, 2, f), (rs, f, 1)))
    else:
        tensors += _row_specs(problem, f, rows, gate=gate, up=up)
    if dy is None:
        tensors.append(_spec("out", *m))
    else:
        tensors += [_spec("dx", *pair)] if packed else [_spec("dgate", *m), _spec("dup", *m)]
    return _core._prepare(key, entry, problem, tensors, dev)


# -- cross-entropy -------------------------------------------------------------------------------------

def _column_indices(vocab: int, device) -> "torch.Tensor":
    """``0, 1, …, V-1`` as float32 on ``device`` (the kernel's ``cols``: the tile language has no column
    index), made per call (one small launch): a tensor cached across calls could be made inside a CUDA
    graph's private memory pool (torch.compile's reduce-overhead warm-up and capture allocate there) and
    outlive it, or be captured unwritten."""
    return torch.arange(vocab, dtype=torch.float32, device=device)


def cross_entropy_(logits, labels, scale, smoothing: float):
    """The per-row loss (float32 (R,)) of ``logits`` (R, V), bf16 or float32, rows any pitch apart (column
    stride 1; a pitch that is a multiple of 8 lets an odd V move in vectors), and its gradient
    ``scale * (softmax - (1-ε)·onehot - ε/V)`` written over ``logits`` in place (registry
    ``cross_entropy``). ``labels``: float32 (R,), a class index or negative (the row ignored: loss and
    gradient 0); ``scale``: a float32 tensor of one element (no host synchronisation)."""
    key = (9, logits.shape, logits.stride(), logits.dtype, logits.device, labels.stride(), labels.dtype,
           scale.dtype, float(smoothing), os.environ.get(_CE_VAR))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_cross_entropy(key, logits, labels, scale, smoothing)
    rows = logits.shape[0]
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rec[0] is None:
        return loss.zero_()
    cols = _column_indices(logits.shape[1], logits.device)
    p = logits.data_ptr()
    _launch(rec, (p, labels.data_ptr(), cols.data_ptr(), scale.data_ptr(), p, loss.data_ptr()),
            logits.get_device(), device_obj=logits.device)
    return loss


def _prepare_cross_entropy(key, logits, labels, scale, smoothing):
    dev = _same_device(logits=logits, labels=labels, scale=scale)
    if logits.dtype not in (_BF16, torch.float32):
        raise TypeError(f"logits has dtype {logits.dtype}; the cross-entropy kernel takes bfloat16 or float32")
    if labels.dtype != torch.float32 or scale.dtype != torch.float32 or scale.numel() != 1:
        raise TypeError("labels must be float32 (R,) and scale one float32 value")
    if logits.dim() != 2 or tuple(labels.shape) != (logits.shape[0],):
        raise ValueError(f"logits {tuple(logits.shape)} must be (R, V) and labels {tuple(labels.shape)} (R,)")
    _dense(labels=labels)
    pitch = logits.stride(0) if logits.shape[0] > 1 else logits.shape[1]
    if logits.shape[1] > 1 and logits.stride(1) != 1 or pitch < logits.shape[1]:
        raise ValueError(f"logits strides {logits.stride()}: the columns must be adjacent (stride 1) and the "
                         f"rows at least V = {logits.shape[1]} apart")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label_smoothing = {smoothing} must be in [0, 1)")
    rows, v = logits.shape
    if not 2 <= v <= 1 << 24:
        raise ValueError(f"vocabulary size {v}: the cross-entropy kernel takes 2 to 2^24 (labels travel as float32)")
    if rows == 0:
        return _store(key, (None, (0, ()), None))
    dt = "float32" if logits.dtype == torch.float32 else "bfloat16"
    m = ((rows, v), (pitch, 1))
    one = ((rows, 1), (1, 1))
    tensors = (
        _spec("logits", *m, dt), _spec("labels", *one, "float32"),
        _spec("cols", (rows, v), (0, 1), "float32"), _spec("scale", (rows, 1), (0, 0), "float32"),
        _spec("grad", *m, dt), _spec("loss", *one, "float32"),
    )
    problem = {"rows": rows, "norm_dim": v, "pitch": pitch, "smoothing": float(smoothing),
               "f32_logits": logits.dtype == torch.float32}
    return _core._prepare(key, "cross_entropy", problem, tensors, dev)
