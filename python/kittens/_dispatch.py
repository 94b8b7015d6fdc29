"""The one CUDA path of the torch ops: every kernel through a prepared call of the extension module
(``_kittens.prepare``, ``kittens_runtime::cuda::dispatch``), found by one dictionary lookup per call.

A call's key is everything the preparation checked: the op, each tensor's shape, strides, dtype and
device, and the op's settings. The first call of a key prepares it (the registry kernel's launches
for that problem, lowered, compiled or read from the disk cache, loaded; the tensors checked against
the kernel's declared layouts — any error is raised here, naming the argument); every later call
allocates the outputs (and any scratch the launches pass between them), reads the addresses and
enqueues. Nothing here synchronises, so a loop of calls can be captured in a CUDA graph after one
warm-up call.

What each op does here is only to say which registry kernel runs and how its tensors are seen as the
kernel declares them (e.g. layernorm's weight as a (rows, D) view with row stride 0); the checks,
launch configuration, tensor maps and launches are the extension module's, the same for every kernel.
"""

from __future__ import annotations

import sys
from typing import Dict, Tuple

import torch

from . import _kittens
from ._arrays import matmul_operand

_BF16 = torch.bfloat16
_HANDLES: Dict[tuple, tuple] = {}
# Distinct keys kept (a decode loop whose cache grows by one key per token adds one per step); past it
# the table starts over, so its memory is bounded.
_MAX_KEYS = 4096
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _say(line: str) -> None:
    if _kittens.verbose():
        print(line, file=sys.stderr)


def _spec(name: str, shape, strides, dtype: str = "bfloat16"):
    return (name, [int(s) for s in shape], [int(s) for s in strides], dtype)


def _prepare(key, entry: str, problem: dict, tensors, device: int, free=(), extra=None):
    from . import _find_nvrtc

    _find_nvrtc()
    handle, loads = _kittens.prepare(entry, problem, list(tensors), list(free), device)
    for line in loads:
        _say(line)
    # The scratch tensors as offsets into one allocation (256-byte aligned, as the allocator's own).
    offsets, total = [], 0
    for n in handle.scratch:
        offsets.append(total)
        total += -(-int(n) // 256) * 256
    return _store(key, (handle, (total, tuple(offsets)), extra))


def _store(key, rec):
    """Keeps ``rec`` for ``key``; past ``_MAX_KEYS`` keys the table starts over (bounded memory)."""
    if len(_HANDLES) >= _MAX_KEYS:
        _HANDLES.clear()
    _HANDLES[key] = rec
    return rec


def _launch(rec, ptrs, device: int, free=(), device_obj=None) -> None:
    total, offsets = rec[1]
    if offsets:
        # Stream-ordered like any torch allocation: freed when this returns, reused by later work on
        # the stream only after the launches (the caching allocator's rule for its current stream).
        base = torch.empty(total, dtype=torch.uint8, device=device_obj).data_ptr()
        ptrs = ptrs + tuple(base + o for o in offsets)
    rec[0].launch(ptrs, _raw_stream(device), list(free))


def _same_device(**ts) -> int:
    (first, t0), *rest = ts.items()
    for name, t in rest:
        if t.device != t0.device:
            raise ValueError(f"kittens: {first} is on {t0.device} and {name} on {t.device}: the tensors are on "
                             "different devices (all must be on one CUDA device)")
    return t0.get_device()


def _bf16s(**ts) -> None:
    for name, t in ts.items():
        if t.dtype != _BF16:
            raise TypeError(f"{name} has dtype {t.dtype}; kittens' kernels take bfloat16")


# -- matmul --------------------------------------------------------------------------------------------


def _check_out(name: str, out, shape, strides, dtype, like) -> None:
    """``out=`` must be exactly what the call would allocate: shape, dtype, device and memory order."""
    if out.dtype != dtype or tuple(out.shape) != tuple(shape) or out.device != like.device or (
        out.numel() > 1 and not all(n <= 1 or s == w for n, s, w in zip(out.shape, out.stride(), strides))
    ):
        raise ValueError(
            f"{name} must be a {dtype} tensor of shape {tuple(shape)} and strides {tuple(strides)} on "
            f"{like.device} (dense in one layout, as the call would make it); got {out.dtype} "
            f"{tuple(out.shape)} strides {out.stride()} on {out.device}"
        )


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
        rec[0].launch((pa, pb, out.data_ptr()), _raw_stream(key[7]))
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
    return _prepare(key, "gemm_bf16", problem, (a_spec, b_spec, _spec("c", (m, n), (ldc, 1))), dev)


# -- attention forward ---------------------------------------------------------------------------------


def _layout_of(q) -> str:
    b, h, n, d = q.shape
    s = q.stride()
    for name, want in (("bhsd", (h * n * d, n * d, d, 1)), ("bshd", (n * h * d, d, h * d, 1))):
        if all(size <= 1 or st == w for st, w, size in zip(s, want, (b, h, n, d))):
            return name
    raise ValueError(f"q strides {s}: dense (B, H, N, D) or (B, N, H, D) needed")


def _dense_layout(q, k, v):
    """The one dense layout q, k and v share, or None."""
    for name in ("bhsd", "bshd"):
        if all(_is_layout(t, name) for t in (q, k, v)):
            return name
    return None


def _is_layout(t, name: str) -> bool:
    b, h, n, d = t.shape
    want = (h * n * d, n * d, d, 1) if name == "bhsd" else (n * h * d, d, h * d, 1)
    return all(size <= 1 or st == w for st, w, size in zip(t.stride(), want, (b, h, n, d)))


def attention(q, k, v, causal: bool, bottom_right: bool, out=None, lse=None, need_lse: bool = True, opts=(),
              alibi=None):
    """``(out, lse)`` of the attention forward on CUDA. q, k, v (and ``out=``) in any strides with the head
    dim contiguous, read in place: all dense in one layout run the dense kernels, others the strided
    ones (``kittens_kernels::attn_strides``). A new ``out`` takes q's dense layout, else (B, H, N, D);
    ``lse`` is float32 (B, H, N). ``alibi``: ALiBi's slopes, a contiguous float32 (B, H) tensor
    (``kittens._alibi``), read by the kernel after v."""
    if alibi is not None:
        opts = tuple(opts) + (("alibi", True),)
    key = (1, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
           q.get_device(), k.get_device(), v.get_device(), causal, bottom_right, need_lse, opts,
           None if out is None else (out.shape, out.stride(), out.dtype, out.device))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_attention(key, q, k, v, causal, bottom_right, need_lse, opts, out)
    b, h, n, d = q.shape
    if out is None:
        out = _new_in_layout(q, rec[2])
    ins = (q.data_ptr(), k.data_ptr(), v.data_ptr()) + (() if alibi is None else (alibi.data_ptr(),))
    if not need_lse:  # the kernel without the log-sum-exp output (an eager call that does not want it)
        _launch(rec, ins + (out.data_ptr(),), key[10], device_obj=q.device)
        return out, None
    if lse is None:
        lse = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    else:
        _check_out("lse", lse, (b, h, n), (h * n, n, 1), torch.float32, q)
    _launch(rec, ins + (out.data_ptr(), lse.data_ptr()), key[10], device_obj=q.device)
    return out, lse


def _layout_strides(shape, layout: str):
    b, h, n, d = shape
    return (n * h * d, d, h * d, 1) if layout == "bshd" else (h * n * d, n * d, d, 1)


def _new_in_layout(q, layout: str):
    b, h, n, d = q.shape
    if layout == "bshd":
        return torch.empty((b, n, h, d), dtype=_BF16, device=q.device).transpose(1, 2)
    return torch.empty((b, h, n, d), dtype=_BF16, device=q.device)


def _prepare_attention(key, q, k, v, causal, bottom_right, need_lse=True, opts=(), out=None):
    _bf16s(q=q, k=k, v=v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
    dev = _same_device(q=q, k=k, v=v)
    b, h, n, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    if d not in (32, 64, 96, 128, 192, 256):
        raise ValueError(f"head dim {d}: the attention forward on CUDA (sm_90a) takes 32, 64, 96, 128, 192 or 256")
    if nk == 0 and n > 0:
        raise ValueError("k and v have no keys (N_kv = 0): attention over nothing is undefined")
    new_out = _layout_like(q)  # a new output's layout
    if out is not None:
        if out.dtype != _BF16 or tuple(out.shape) != tuple(q.shape) or out.device != q.device:
            raise ValueError(f"out must be a bfloat16 tensor of q's shape {tuple(q.shape)} on {q.device}; got "
                             f"{out.dtype} {tuple(out.shape)} on {out.device}")
    o_strides = out.stride() if out is not None else _layout_strides(q.shape, new_out)
    layout = _dense_layout(q, k, v)
    dense = layout is not None and (out is None or _is_layout(out, layout))
    problem = {"batch": b, "heads": h, "heads_kv": hk, "seq": n, "seq_kv": nk, "dim": d,
               "layout": layout if dense else "bhsd",
               "causal": bool(causal), "bottom_right": bool(bottom_right), "lse": bool(need_lse),
               "kv_splits": "auto", **dict(opts)}  # opts: scale, softcap, window (kittens_kernels::attn::score)
    if dense:
        specs = [("q", q.shape, q.stride()), ("k", k.shape, k.stride()), ("v", v.shape, v.stride()),
                 ("o", q.shape, _layout_strides(q.shape, layout))]
    else:
        # Each tensor in its own strides (the strided program), checked and normalised here.
        specs = [(name, t.shape, attn_strides(name, t.shape, t.stride()))
                 for name, t in (("q", q), ("k", k), ("v", v))] + [("o", q.shape, attn_strides("out", q.shape, o_strides))]
        problem.update({f"{name}_strides": tuple(st[:3]) for name, _, st in specs})
    # ALiBi's slopes (B, H) after v, as the kernel declares them.
    alibi = (_spec("alibi", (b, h), (h, 1), "float32"),) if problem.get("alibi") else ()
    tensors = tuple(_spec(*s) for s in specs[:3]) + alibi + tuple(_spec(*s) for s in specs[3:]) + (
        (_spec("lse", (b, h, n), (h * n, n, 1), "float32"),) if need_lse else ())
    return _prepare(key, "attn_fwd", problem, tensors, dev, extra=layout if dense else new_out)


def _layout_like(t) -> str:
    """The dense attention layout of a new tensor made like ``t``: t's own where it has one, else
    (B, H, N, D)."""
    return "bshd" if _is_layout(t, "bshd") and not _is_layout(t, "bhsd") else "bhsd"


def attn_strides(name: str, shape, strides):
    """A 4-D (B, H, N, D) attention tensor's strides as the strided programs read them in place: the
    head dim contiguous (FlashAttention's rule) and every other stride a multiple of 8 elements (16 bytes:
    the sm_90a kernels' TMA tensor maps need it); a dimension of one element takes a stride that is
    (it is never stepped along). Anything else is a ValueError naming the tensor and the stride."""
    shape, st = [int(x) for x in shape], [int(x) for x in strides]
    if shape[3] > 1 and st[3] != 1:
        raise ValueError(f"kittens.attention: {name} strides {tuple(st)}: the head dim (last) must be contiguous "
                         "(stride 1); the kernels read each row of D elements in place")
    reach = max([s * n for s, n in zip(st[:3], shape[:3]) if n > 1] + [shape[3]])
    out = []
    for i, axis in enumerate(("batch", "head", "sequence")):
        if shape[i] <= 1:
            out.append(-(-reach // 8) * 8)
            continue
        if st[i] <= 0 or st[i] % 8:
            raise ValueError(f"kittens.attention: {name} strides {tuple(st)}: the {axis} stride {st[i]} is not a "
                             "positive multiple of 8 elements (16 bytes), which the sm_90a kernels' tensor maps "
                             "(TMA) need; pass a view with aligned rows (or .contiguous() it)")
        out.append(st[i])
    return (out[0], out[1], out[2], 1)


# -- layernorm -----------------------------------------------------------------------------------------


def _words(v: int):
    """A 64-bit seed or counter as the kernel's two 32-bit word parameters, each signed."""
    v %= 2**64
    lo, hi = v & 0xFFFFFFFF, v >> 32
    return (lo - 2**32 if lo >= 2**31 else lo, hi - 2**32 if hi >= 2**31 else hi)


def layernorm(x, residual, weight, bias, p: float, seed: int, offset: int, eps: float, out=None):
    """The fused dropout-residual-layernorm on CUDA: a new (2, ..., D) tensor (normed rows, residual)."""
    key = (2, x.shape, x.stride(), residual.shape, residual.stride(), weight.shape, weight.stride(),
           bias.shape, bias.stride(), x.dtype, residual.dtype, weight.dtype, bias.dtype, x.get_device(),
           residual.get_device(), weight.get_device(), bias.get_device(), p, eps)
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
                  _raw_stream(key[13]), [s0, s1, o0, o1])
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
    return _prepare(key, "layernorm", problem, tensors, dev, free=free)


def layernorm_backward(dy, dh, x, residual, weight, p: float, seed: int, offset: int, eps: float):
    """``(dx, dresidual, dweight, dbias)`` of :func:`layernorm` on CUDA from ``dy`` and ``dh``, the
    gradients of its two planes (registry ``layernorm_bwd``: ``h``, its statistics and the dropout mask
    recomputed from x, residual, seed and offset; two launches, the per-block partial sums of dweight
    and dbias are scratch)."""
    # A string tag: the integer tags are the other ops' (a key must never match another op's).
    key = ("layernorm_bwd", dy.shape, dy.stride(), dh.stride(), x.shape, x.stride(), residual.stride(),
           weight.shape, weight.stride(), dy.dtype, dh.dtype, x.dtype, residual.dtype, weight.dtype,
           x.device, dy.device, dh.device, residual.device, weight.device, p, eps)
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_layernorm_backward(key, dy, dh, x, residual, weight, p, eps)
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


def _prepare_layernorm_backward(key, dy, dh, x, residual, weight, p, eps):
    ts = dict(dy=dy, dh=dh, x=x, residual=residual, weight=weight)
    _bf16s(**ts)
    dev = _same_device(**ts)
    _dense(weight=weight)
    for name, t in ts.items():
        if name != "weight" and t.shape != x.shape:
            raise ValueError(f"{name} {tuple(t.shape)} must have x's shape {tuple(x.shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p = {p} must be in [0, 1)")
    rows, d = _rows_of(x, weight)
    if rows == 0 or d == 0:
        return _store(key, (None, (0, ()), None))
    m = ((rows, d), (d, 1))
    problem = {"rows": rows, "norm_dim": d, "p": float(p), "eps": float(eps)}
    tensors = _row_specs(problem, d, rows, dy=dy, dh=dh, x=x, residual=residual)
    tensors.append(_spec("weight", (rows, d), (0, 1)))
    tensors += [_spec(n, *m) for n in ("dx", "dresidual")]
    tensors += [_spec(n, (d, 1), (1, 1)) for n in ("dweight", "dbias")]
    free = ("seed_lo", "seed_hi", "offset_lo", "offset_hi")
    return _prepare(key, "layernorm_bwd", problem, tensors, dev, free=free)


# -- rotary --------------------------------------------------------------------------------------------


def rotary(q, cos, sin, interleaved: bool, out=None):
    """The rotary embedding of q (B, H, N, D) in one dense layout with (N, D/2) tables, on CUDA; the
    output in q's layout."""
    key = (3, q.shape, q.stride(), cos.shape, cos.stride(), sin.shape, sin.stride(), q.dtype, cos.dtype,
           sin.dtype, q.get_device(), cos.get_device(), sin.get_device(), interleaved)
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_rotary(key, q, cos, sin, interleaved)
    if out is None:
        out = _new_in_layout(q, rec[2])
    elif out.data_ptr() != q.data_ptr():  # in place (out is q) is allowed: each lane reads, then writes
        _check_out("out", out, q.shape, _layout_strides(q.shape, rec[2]), _BF16, q)
    if rec[0] is not None:
        rec[0].launch((q.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr()), _raw_stream(key[10]))
    return out


def rotary_out_layout(q) -> str:
    """The layout of rotary's output for q: q's own where q is dense in one, else BSHD where q's heads
    are nearer than its positions (q sliced out of a fused QKV projection), else BHSD."""
    for name in ("bhsd", "bshd"):
        if _is_layout(q, name):
            return name
    return "bshd" if q.stride(1) < q.stride(2) else "bhsd"


def _prepare_rotary(key, q, cos, sin, interleaved):
    _bf16s(q=q, cos=cos, sin=sin)
    if q.dim() != 4:
        raise ValueError(f"q must be 4-D (B, H, N, D), got shape {tuple(q.shape)}")
    dev = _same_device(q=q, cos=cos, sin=sin)
    b, h, n, d = q.shape
    layout = rotary_out_layout(q)
    strided = not _is_layout(q, layout)
    if strided and q.stride(3) != 1:
        raise ValueError(f"q strides {q.stride()}: the head dim must be contiguous")
    if d % 2 or cos.shape != (n, d // 2) or sin.shape != (n, d // 2):
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must be (N, D/2) = ({n}, {d // 2})")
    for name, t in (("cos", cos), ("sin", sin)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()})")
    if b * h * n == 0:
        return _store(key, (None, (0, ()), layout))
    s = q.stride()
    pairs = ((d // 2, 2), (2, 1)) if interleaved else ((2, d // 2), (d // 2, 1))
    xs = ((b, h, n) + pairs[0], tuple(s[:3]) + pairs[1])
    os_ = (n * h * d, d, h * d, 1) if layout == "bshd" else (h * n * d, n * d, d, 1)
    problem = {"batch": b, "heads": h, "seq": n, "dim": d, "layout": layout, "interleaved": bool(interleaved)}
    if strided:
        # Read in place in its own strides (the kernel checks them: multiples of 8).
        problem["x_strides"] = tuple(s[:3])
    tensors = (
        _spec("x", *xs),
        _spec("cos", (b, h, n, d // 2), (0, 0, d // 2, 1)),
        _spec("sin", (b, h, n, d // 2), (0, 0, d // 2, 1)),
        _spec("out", xs[0], tuple(os_[:3]) + pairs[1]),
    )
    return _prepare(key, "rotary", problem, tensors, dev, extra=layout)


# -- attention backward --------------------------------------------------------------------------------


def attention_backward(q, k, v, out, grad_out, lse, causal: bool, bottom_right: bool, atomic: bool, opts=(),
                       dlse=None, alibi=None):
    """``(dq, dk, dv)`` on CUDA: q, k, v, out, grad_out in any strides with the head dim contiguous, read
    in place (all dense in one layout: the dense kernels; else the strided ones); lse float32 (B, H, N)
    contiguous. dq, dk, dv come new in q's, k's and v's dense layouts (else (B, H, N, D)). ``atomic``:
    FlashAttention-3's three launches (the key blocks add dQ into a float32 accumulator), else the
    deterministic two (query blocks, key blocks). The launches' D and accumulator are scratch of this
    call. ``dlse``: the log-sum-exp's gradient (float32 (B, H, N) contiguous), folded into the launches'
    preprocessing (D = rowsum(dO∘O) − dlse). ``alibi``: ALiBi's slopes (float32 (B, H) contiguous), the
    launches' last input."""
    if alibi is not None:
        opts = tuple(opts) + (("alibi", True),)
    key = (4, q.shape, q.stride(), k.shape, k.stride(), v.stride(), out.stride(), grad_out.stride(),
           lse.stride(), q.dtype, k.dtype, v.dtype, out.dtype, grad_out.dtype, lse.dtype, q.get_device(),
           causal, bottom_right, atomic, opts, None if dlse is None else (dlse.dtype, dlse.stride()))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_attention_backward(key, q, k, v, out, grad_out, lse, causal, bottom_right, atomic, opts,
                                          dlse)
    lq, lk, lv = rec[2]
    dq, dk, dv = _new_in_layout(q, lq), _new_in_layout(k, lk), _new_in_layout(v, lv)
    ins = (q, k, v, out, grad_out, lse) + (() if dlse is None else (dlse,)) + (() if alibi is None else (alibi,))
    ptrs = tuple(t.data_ptr() for t in ins + (dq, dk, dv))
    _launch(rec, ptrs, key[15], device_obj=q.device)
    return dq, dk, dv


def _prepare_attention_backward(key, q, k, v, out, grad_out, lse, causal, bottom_right, atomic, opts=(), dlse=None):
    _bf16s(q=q, k=k, v=v, out=out, grad_out=grad_out)
    dev = _same_device(q=q, k=k, v=v, out=out, grad_out=grad_out, lse=lse)
    b, h, n, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    if d not in (32, 64, 96, 128, 192, 256):
        raise ValueError(f"head dim {d}: the attention backward on CUDA (sm_90a) takes 32, 64, 96, 128, 192 or 256 "
                         "(64-column tiles: 32 and 96 padded to 64 and 128)")
    if d > 128 and not atomic:
        raise ValueError(f"head dim {d}: the attention backward on CUDA (sm_90a) takes head dims past 128 in the "
                         "atomic form only (the deterministic query blocks exceed 240 registers per thread there)")
    layout = None
    for name in ("bhsd", "bshd"):
        if all(_is_layout(t, name) for t in (q, k, v, out, grad_out)):
            layout = name
            break
    if lse.dtype != torch.float32 or tuple(lse.shape) != (b, h, n) or not lse.is_contiguous():
        raise ValueError(f"lse must be a contiguous float32 (B, H, N) = ({b}, {h}, {n}) tensor")
    problem = {"batch": b, "heads": h, "heads_kv": hk, "seq": n, "seq_kv": nk, "dim": d,
               "layout": layout or "bhsd", "causal": bool(causal), "bottom_right": bool(bottom_right),
               "variant": "atomic" if atomic else "dq", "dlse": dlse is not None, **dict(opts)}
    if dlse is not None and (dlse.dtype != torch.float32 or tuple(dlse.shape) != (b, h, n) or not dlse.is_contiguous()):
        raise ValueError(f"dlse must be a contiguous float32 (B, H, N) = ({b}, {h}, {n}) tensor")
    # The log-sum-exp, and its gradient when the forward's lse had one (folded into D by the kernels).
    lse_spec = (_spec("lse", (b, h, n), (h * n, n, 1), "float32"),) + (
        () if dlse is None else (_spec("dlse", (b, h, n), (h * n, n, 1), "float32"),)) + (
        (_spec("alibi", (b, h), (h, 1), "float32"),) if problem.get("alibi") else ())
    if layout is not None:
        qs, ks = _layout_strides(q.shape, layout), _layout_strides(k.shape, layout)
        tensors = (
            _spec("q", q.shape, qs), _spec("k", k.shape, ks), _spec("v", v.shape, ks),
            _spec("o", q.shape, qs), _spec("do", q.shape, qs), *lse_spec,
            _spec("dq", q.shape, qs), _spec("dk", k.shape, ks), _spec("dv", v.shape, ks),
        )
        return _prepare(key, "attn_bwd", problem, tensors, dev, extra=(layout, layout, layout))
    # Each tensor in its own strides (the strided programs); the gradients new in q's, k's, v's layouts.
    grads = tuple(_layout_like(t) for t in (q, k, v))
    given = [("q", "q", q.shape, q.stride()), ("k", "k", k.shape, k.stride()), ("v", "v", v.shape, v.stride()),
             ("o", "out", q.shape, out.stride()), ("do", "grad_out", q.shape, grad_out.stride())]
    made = [(name, t.shape, _layout_strides(t.shape, lay)) for name, t, lay in zip(("dq", "dk", "dv"), (q, k, v), grads)]
    specs = [(name, shape, attn_strides(arg, shape, st)) for name, arg, shape, st in given] + [
        (name, shape, attn_strides(name, shape, st)) for name, shape, st in made]
    problem.update({f"{name}_strides": tuple(st[:3]) for name, _, st in specs})
    tensors = tuple(_spec(*s) for s in specs[:5]) + lse_spec + tuple(_spec(*s) for s in specs[5:])
    return _prepare(key, "attn_bwd", problem, tensors, dev, extra=grads)


# -- rmsnorm, swiglu -----------------------------------------------------------------------------------


def _dense(**ts) -> None:
    for name, t in ts.items():
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()})")


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
    if t.dim() == 0:
        return t  # refused later with the op's own message
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
           weight.device, eps)
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
    return _prepare(key, "rmsnorm", problem, tensors, dev)


def rmsnorm_backward(dy, r, weight, dh, eps: float):
    """``(dx, dweight)`` on CUDA from the forward's ``h`` (``r``; x without a residual) and ``dh``, the
    gradient of ``h`` (``None``: none, or no residual); ``dx`` is also the residual's gradient
    (registry ``rmsnorm_bwd``: two launches, the per-block partial sums of dweight are scratch)."""
    key = (6, dy.shape, dy.stride(), dy.dtype, r.shape, r.stride(), r.dtype, r.device, weight.shape,
           weight.stride(), weight.dtype, None if dh is None else (dh.stride(), dh.dtype), eps)
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
    return _prepare(key, "rmsnorm_bwd", problem, tensors, dev)


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


def swiglu(gate, up):
    """``silu(gate) * up`` on CUDA (registry ``swiglu``): two dense (..., F) tensors, or the two halves of
    one dense (..., 2F) tensor (read in place, the packed form)."""
    packed = _packed(gate, up)
    key = (7, gate.shape, gate.stride(), up.stride(), gate.dtype, up.dtype, gate.device, up.device, packed)
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
           gate.device, packed)
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
    return _prepare(key, entry, problem, tensors, dev)


# -- cross-entropy -------------------------------------------------------------------------------------

_COLS: Dict[tuple, "torch.Tensor"] = {}


def _column_indices(vocab: int, device) -> "torch.Tensor":
    """``0, 1, …, V-1`` as float32 on ``device`` (the kernel's ``cols``: the tile language has no column
    index), made once per (V, device)."""
    key = (vocab, str(device))
    t = _COLS.get(key)
    if t is None:
        t = _COLS[key] = torch.arange(vocab, dtype=torch.float32, device=device)
    return t


def cross_entropy_(logits, labels, scale, smoothing: float):
    """The per-row loss (float32 (R,)) of ``logits`` (R, V), bf16 or float32, rows any pitch apart (column
    stride 1; a pitch that is a multiple of 8 lets an odd V move in vectors), and its gradient
    ``scale * (softmax - (1-ε)·onehot - ε/V)`` written over ``logits`` in place (registry
    ``cross_entropy``). ``labels``: float32 (R,), a class index or negative (the row ignored: loss and
    gradient 0); ``scale``: a float32 tensor of one element (no host synchronisation)."""
    key = (9, logits.shape, logits.stride(), logits.dtype, logits.device, labels.stride(), labels.dtype,
           scale.dtype, float(smoothing))
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
    return _prepare(key, "cross_entropy", problem, tensors, dev)


# -- varlen attention ----------------------------------------------------------------------------------


def attention_varlen(q, k, v, cu_q, cu_k, max_q: int, max_k: int, causal: bool, scale, out=None, lse=None,
                     seqused_k=None):
    """``(out, lse)`` of the packed variable-length attention forward on CUDA (registry ``attn_varlen``,
    the sm_90a program ``kittens_kernels::attn_varlen_hopper``): q (total_q, H, D), k and v
    (total_k, H_kv, D), dense, bfloat16; cu_q, cu_k int32 (B + 1,) offsets that the kernel reads on the
    device (nothing is read back here). ``out`` like q, ``lse`` float32 (H, total_q): rows outside
    every sequence are never written (zeros when this call allocates them)."""
    key = (10, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), cu_q.shape, cu_k.shape,
           cu_q.dtype, cu_k.dtype, q.device, k.device, v.device, cu_q.device, cu_k.device, int(max_q),
           int(max_k), bool(causal), scale,
           None if seqused_k is None else (seqused_k.shape, seqused_k.dtype, seqused_k.device))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_varlen(key, q, k, v, cu_q, cu_k, int(max_q), int(max_k), bool(causal), scale, seqused_k)
    total_q, h, _ = q.shape
    if out is None:
        out = torch.zeros_like(q)
    else:
        _check_out("out", out, q.shape, (h * q.shape[2], q.shape[2], 1), _BF16, q)
    if lse is None:
        lse = torch.zeros((h, total_q), dtype=torch.float32, device=q.device)
    else:
        _check_out("lse", lse, (h, total_q), (total_q, 1), torch.float32, q)
    if rec[0] is not None:
        used = () if seqused_k is None else (seqused_k,)
        ptrs = tuple(t.data_ptr() for t in (q, k, v, cu_q, cu_k, *used, out, lse))
        _launch(rec, ptrs, q.get_device(), device_obj=q.device)
    return out, lse


def _prepare_varlen(key, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, seqused_k=None):
    _bf16s(q=q, k=k, v=v)
    dev = _same_device(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    used = ()
    if seqused_k is not None:
        _same_device(q=q, seqused_k=seqused_k)
        if seqused_k.dtype != torch.int32 or tuple(seqused_k.shape) != (cu_k.shape[0] - 1,) or (
                seqused_k.numel() > 1 and seqused_k.stride(0) != 1):
            raise ValueError(f"seqused_k must be a dense int32 tensor of shape ({cu_k.shape[0] - 1},), got "
                             f"{seqused_k.dtype} of shape {tuple(seqused_k.shape)}")
        used = (_spec("seqused_k", seqused_k.shape, (1,), "int32"),)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-d (total, nheads, headdim), got shape {tuple(t.shape)}")
    _dense(q=q, k=k, v=v)
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if t.dim() != 1 or t.dtype != torch.int32 or (t.numel() > 1 and t.stride(0) != 1):
            raise ValueError(f"{name} must be a dense 1-d int32 tensor (batch + 1 offsets), got {t.dtype} "
                             f"of shape {tuple(t.shape)}")
    if cu_q.shape != cu_k.shape or cu_q.shape[0] < 1:
        raise ValueError(f"cu_seqlens_q {tuple(cu_q.shape)} and cu_seqlens_k {tuple(cu_k.shape)} must both "
                         "hold batch + 1 >= 1 offsets")
    total_q, h, d = q.shape
    total_k, hk, dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or dk != d:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (total_k, nheads_k, {d})")
    if hk == 0 or h % hk:
        raise ValueError(f"nheads_k = {hk} must divide nheads = {h}")
    if d not in (64, 128, 192, 256):
        raise ValueError(f"head dim {d}: varlen attention on CUDA (sm_90a) takes 64, 128, 192 or 256")
    batch = cu_q.shape[0] - 1
    if batch == 0 or total_q == 0 or h == 0:
        return _store(key, (None, (0, ()), None))  # nothing to compute: the zeros are the answer
    problem = {"batch": batch, "heads": h, "heads_kv": hk, "seq": max(max_q, 1), "seq_kv": max(max_k, 1),
               "dim": d, "causal": causal, "scale": scale, "total_q": total_q, "total_k": total_k}
    if used:
        problem["variant"] = "seqused_k"
    # Dense (checked above), so the declared strides; torch may report others on dims of size 1.
    packed = (h * d, d, 1), (hk * d, d, 1)
    tensors = (
        _spec("q", q.shape, packed[0]), _spec("k", k.shape, packed[1]), _spec("v", v.shape, packed[1]),
        _spec("cu_seqlens_q", cu_q.shape, (1,), "int32"), _spec("cu_seqlens_k", cu_k.shape, (1,), "int32"),
        *used, _spec("o", q.shape, packed[0]), _spec("lse", (h, total_q), (total_q, 1), "float32"),
    )
    return _prepare(key, "attn_varlen", problem, tensors, dev)


# -- paged KV-cache decode attention --------------------------------------------------------------------


def attention_paged(q, k_cache, v_cache, block_table, cache_seqlens, causal: bool, scale, num_splits: int = 1):
    """``(out, lse)`` of decode attention against a paged cache on CUDA (registry ``attn_paged``): q
    (B, Nq, H, D), the caches (num_blocks, page_size, H_kv, D), dense bfloat16; block_table int32
    (B, max_blocks) and cache_seqlens int32 (B,), dense, read by the kernel on the device."""
    key = (11, q.shape, k_cache.shape, block_table.shape, q.device, k_cache.device, v_cache.device,
           block_table.device, cache_seqlens.device, bool(causal), scale, int(num_splits))
    rec = _HANDLES.get(key)
    if rec is None:
        rec = _prepare_paged(key, q, k_cache, v_cache, block_table, cache_seqlens, bool(causal), scale,
                             int(num_splits))
    b, sq, h, _ = q.shape
    out = torch.zeros_like(q)
    lse = torch.zeros((b, h, sq), dtype=torch.float32, device=q.device)
    if rec[0] is not None:
        ptrs = tuple(t.data_ptr() for t in (q, k_cache, v_cache, block_table, cache_seqlens, out, lse))
        _launch(rec, ptrs, q.get_device(), device_obj=q.device)
    return out, lse


def _prepare_paged(key, q, k_cache, v_cache, block_table, cache_seqlens, causal, scale, num_splits):
    _bf16s(q=q, k_cache=k_cache, v_cache=v_cache)
    dev = _same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                       cache_seqlens=cache_seqlens)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d, got shape {tuple(t.shape)}")
    _dense(q=q, k_cache=k_cache, v_cache=v_cache)
    b, sq, h, d = q.shape
    nb, page, hk, _ = k_cache.shape
    for name, t, shape in (("block_table", block_table, (b, block_table.shape[-1])),
                           ("cache_seqlens", cache_seqlens, (b,))):
        if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous():
            raise ValueError(f"{name} must be a dense int32 tensor of shape {shape}, got {t.dtype} of shape "
                             f"{tuple(t.shape)}")
    if b == 0 or sq == 0 or h == 0:
        return _store(key, (None, (0, ()), None))  # nothing to compute: the zeros are the answer
    mb = block_table.shape[1]
    problem = {"batch": b, "heads": h, "heads_kv": hk, "seq": sq, "dim": d, "causal": causal, "scale": scale,
               "page_size": page, "max_blocks": mb, "num_blocks": nb, "num_splits": num_splits}
    tensors = (
        _spec("q", q.shape, (sq * h * d, h * d, d, 1)),
        _spec("k_cache", k_cache.shape, (page * hk * d, hk * d, d, 1)),
        _spec("v_cache", v_cache.shape, (page * hk * d, hk * d, d, 1)),
        _spec("block_table", (b * mb,), (1,), "int32"),
        _spec("cache_seqlens", (b,), (1,), "int32"),
        _spec("o", q.shape, (sq * h * d, h * d, d, 1)),
        _spec("lse", (b, h, sq), (h * sq, sq, 1), "float32"),
    )
    return _prepare(key, "attn_paged", problem, tensors, dev)
