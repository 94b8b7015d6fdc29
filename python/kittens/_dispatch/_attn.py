"""Attention forward and backward and rotary through the prepared ``attn_fwd``, ``attn_bwd`` and
``rotary`` calls, and the dense (B, H, N, D) / (B, N, H, D) layouts they share."""

from __future__ import annotations

import torch

from . import _core
from ._core import _BF16, _HANDLES, _bf16s, _check_out, _launch, _same_device, _spec, _store


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
    return _core._prepare(key, "attn_fwd", problem, tensors, dev, extra=layout if dense else new_out)


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
        rec[0].launch((q.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr()), _core._raw_stream(key[10]))
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
    return _core._prepare(key, "rotary", problem, tensors, dev, extra=layout)


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
        return _core._prepare(key, "attn_bwd", problem, tensors, dev, extra=(layout, layout, layout))
    # Each tensor in its own strides (the strided programs); the gradients new in q's, k's, v's layouts.
    grads = tuple(_layout_like(t) for t in (q, k, v))
    given = [("q", "q", q.shape, q.stride()), ("k", "k", k.shape, k.stride()), ("v", "v", v.shape, v.stride()),
             ("o", "out", q.shape, out.stride()), ("do", "grad_out", q.shape, grad_out.stride())]
    made = [(name, t.shape, _layout_strides(t.shape, lay)) for name, t, lay in zip(("dq", "dk", "dv"), (q, k, v), grads)]
    specs = [(name, shape, attn_strides(arg, shape, st)) for name, arg, shape, st in given] + [
        (name, shape, attn_strides(name, shape, st)) for name, shape, st in made]
    problem.update({f"{name}_strides": tuple(st[:3]) for name, _, st in specs})
    tensors = tuple(_spec(*s) for s in specs[:5]) + lse_spec + tuple(_spec(*s) for s in specs[5:])
    return _core._prepare(key, "attn_bwd", problem, tensors, dev, extra=grads)
