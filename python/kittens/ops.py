"""kittens' kernels as PyTorch operators (``torch.ops.kittens.*``; imported on first use with torch).

Each kernel is a ``torch.library`` custom op with a fake implementation (output shapes, dtypes and
strides without running it, for ``torch.compile`` and FakeTensor tracing) and an autograd formula, so
``torch.compile(fullgraph=True)`` traces through them and every differentiable input gets a gradient:

=========================================  ===============================================================
``kittens::matmul(a, b)``                  ``a @ b`` (GEMM kernel); backward ``kittens::matmul_backward``
``kittens::attention(q, k, v, ...)``       ``(out, lse)`` (attention forward kernel)
``kittens::attention_backward(...)``       ``(dq, dk, dv)`` (attention backward kernel)
``kittens::layernorm(x, residual, ...)``   ``(2, ..., D)``: the normed rows and the new residual
``kittens::layernorm_backward(...)``       ``(dx, dresidual, dweight, dbias)`` (layernorm backward kernel)
``kittens::layernorm_backward_h(...)``     the same from the forward's ``h`` (what the op's autograd uses on CUDA)
``kittens::rotary(q, cos, sin, ...)``      the rotated q (rotary kernel); backward = the same kernel
=========================================  ===============================================================

What is interim here (each says so where it is done):

* ``layernorm_backward`` on CPU tensors is a composite of PyTorch ops (float32, recomputing ``h``, its
  statistics and the dropout mask from the saved inputs; CUDA runs the ``layernorm_bwd`` kernel); the
  mask is drawn by :func:`dropout_keep`, the kernels' Philox 4x32-10 stream written in integer torch ops
  (same bits as the kernel: the tests check it against the forward kernel's mask).

The attention ops (``attention``, ``attention_backward``, ``attention_paged``) are made in
:mod:`kittens._ops_attention` and imported here.

Each op takes ``bfloat16`` CPU or CUDA tensors, like the public functions (:func:`kittens.matmul` etc.,
which call these ops on torch tensors through :func:`call`: eager calls skip the custom op's Python
dispatch, see there).
"""

from __future__ import annotations

import sys
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _matmul, _opchecks
from ._arrays import matmul_operand
# The attention ops live in their own module (the package and the tests reach them here).
from ._ops_attention import (  # noqa: F401
    attention,
    attention_backward,
    attention_eager,
    attention_no_lse,
    attention_paged,
)
# The op machinery (varlen.py and the tests use it from here).
from ._opcall import (  # noqa: F401
    _BODIES,
    _BSHD,
    _FUNCTIONS,
    _PLAIN,
    _autograd,
    _bf16,
    _empty,
    _in_layout,
    _layout_like,
    _layouts,
    _op,
    call,
    seed_arg,
)

if torch.cuda.is_available():
    from . import _dispatch

__all__ = ["matmul", "attention", "attention_backward", "layernorm", "layernorm_backward", "layernorm_backward_h",
           "rotary", "dropout_keep", "seed_arg", "rotary_tables", "rmsnorm", "rmsnorm_y", "rmsnorm_backward", "swiglu",
           "swiglu_backward", "cross_entropy_", "linear_cross_entropy_forward"]


# Each op's body is also callable as ``<op>_eager`` (the benchmarks time it alone); ``kittens.<op>`` calls
# the op through :func:`call`.

# -- matmul --------------------------------------------------------------------------------------------


def _no_double_backward(name: str):
    def grad(ctx, *grads):
        raise RuntimeError(f"kittens::{name} has no backward (double backward is not implemented)")

    return grad


def matmul_eager(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` through the GEMM kernel: a (M, K) and b (K, N) each row-major or transposed, with any
    leading-dimension stride (read in place; other strides are refused, see kittens.matmul)."""
    if a.is_cuda:
        return _dispatch.matmul(a, b)
    return _matmul(a, b, None)


matmul = _op("matmul")(matmul_eager)


@matmul.register_fake
def _(a, b):
    _bf16("a", a)
    _bf16("b", b)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"kittens.matmul takes 2-D arrays, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    # A ValueError, as the real op's (``torch._check_value`` also takes symbolic sizes).
    torch._check_value(a.shape[1] == b.shape[0], lambda: f"a @ b: a is {tuple(a.shape)} (M, K) but b is "
                       f"{tuple(b.shape)}: b needs K = {a.shape[1]} rows")
    return a.new_empty((a.shape[0], b.shape[1]))


def _matmul_setup(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    if matmul_operand(grad.shape, grad.stride()) is None:
        grad = grad.contiguous()  # e.g. the zero strides of an expanded gradient: no layout to read
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if torch.is_grad_enabled():
        # create_graph=True: each product through the differentiable op (a double backward reaches it).
        da = call("matmul", grad, b.t()) if need_a else None
        db = call("matmul", a.t(), grad) if need_b else None
        return da, db
    # Both products in one op call: a traced backward (torch.compile) dispatches once per matmul, not twice.
    da, db = call("matmul_backward", grad, a, b, need_a, need_b)
    return (da if need_a else None), (db if need_b else None)


_autograd("matmul", matmul, _matmul_backward, _matmul_setup)


@_op("matmul_backward")
def matmul_backward(grad: Tensor, a: Tensor, b: Tensor, need_a: bool = True,
                    need_b: bool = True) -> Tuple[Tensor, Tensor]:
    """``(da, db)`` of :func:`matmul` for ``grad`` of its output: ``da = grad·bᵀ`` and ``db = aᵀ·grad``, each
    through the GEMM with its operands read in place (``b.t()`` and ``a.t()`` are transposed views); a
    gradient not asked for (``need_a``/``need_b`` False) comes back as an empty (0-element) tensor."""
    # dA = dC·Bᵀ: ``b.t()`` is read in place whatever b's order (row-major, ``w.T``, a slice); dB = Aᵀ·dC:
    # ``a.t()`` likewise (the GEMM reads A stored transposed).
    da = matmul_eager(grad, b.t()) if need_a else grad.new_empty((0,))
    db = matmul_eager(a.t(), grad) if need_b else grad.new_empty((0,))
    return da, db


@matmul_backward.register_fake
def _(grad, a, b, need_a=True, need_b=True):
    for name, t in (("grad", grad), ("a", a), ("b", b)):
        _bf16(name, t)
        if t.dim() != 2:
            raise ValueError(f"kittens.matmul's backward takes 2-D arrays, got {name} of shape {tuple(t.shape)}")
    return (grad.new_empty((grad.shape[0], b.shape[0])) if need_a else grad.new_empty((0,)),
            grad.new_empty((a.shape[1], grad.shape[1])) if need_b else grad.new_empty((0,)))


_autograd("matmul_backward", matmul_backward, _no_double_backward("matmul_backward"),
          lambda ctx, inputs, output: None)


# -- layernorm -----------------------------------------------------------------------------------------


def layernorm_eager(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, p: float = 0.0, seed: int = 0,
              offset: int = 0, eps: float = 1e-5) -> Tensor:
    """``(2, ..., D)``: plane 0 ``LayerNorm(h) * weight + bias``, plane 1 ``h = residual + dropout(x, p)``
    (the fused layernorm kernel; ``seed`` and ``offset`` as signed int64, taken mod 2^64)."""
    if x.is_cuda:
        rows = _dispatch.rows_in_place
        return _dispatch.layernorm(rows(x), rows(residual), weight, bias, float(p), seed, offset, float(eps))
    from . import layernorm as run

    both = x.new_empty((2,) + tuple(x.shape))
    # The CPU entry of the extension takes dense rows (only CUDA reads row-strided ones in place).
    run(x.contiguous(), residual.contiguous(), weight, bias, p, seed % 2**64, offset=offset % 2**64, eps=eps, out=both)
    return both


layernorm = _op("layernorm")(layernorm_eager)


@layernorm.register_fake
def _(x, residual, weight, bias, p=0.0, seed=0, offset=0, eps=1e-5):
    for name, t in (("x", x), ("residual", residual), ("weight", weight), ("bias", bias)):
        _bf16(name, t)
    _opchecks.dropout_p(p)
    return x.new_empty((2,) + tuple(x.shape))


def _layernorm_setup(ctx, inputs, output):
    x, residual, weight, bias, p, seed, offset, eps = inputs
    # Where the kernel takes it, the backward reads h, the output's second plane (kept alive by the caller
    # anyway: the next residual), in place of x and residual: fewer bytes read and, without dropout, one
    # gradient written for both (layernorm_backward_h).
    ctx.from_h = _layernorm_bwd_on_gpu(x, p)
    if ctx.from_h:
        ctx.save_for_backward(output[1], weight, bias)
    else:
        ctx.save_for_backward(x, residual, weight, bias)
    ctx.p, ctx.seed, ctx.offset, ctx.eps = p, seed, offset, eps


def _layernorm_grad(ctx, grad):
    if ctx.from_h:
        h, weight, bias = ctx.saved_tensors
        dx, dres, dw, db = call("layernorm_backward_h", grad, h, weight, bias, ctx.p, ctx.seed, ctx.offset,
                                ctx.eps)
        # Without dropout dx is dresidual (the op returns no tensor of its own for it: its outputs may not
        # alias), as autograd's backward of `residual + x` hands one gradient to both.
        return (dres if ctx.p == 0.0 else dx), dres, dw, db, None, None, None, None
    x, residual, weight, bias = ctx.saved_tensors
    grads = call("layernorm_backward", grad, x, residual, weight, bias, ctx.p, ctx.seed,
                                                 ctx.offset, ctx.eps)
    return tuple(grads) + (None, None, None, None)


_autograd("layernorm", layernorm, _layernorm_grad, _layernorm_setup)


# The longest row the layernorm_bwd kernel takes on sm_90a with dropout
# (kittens_kernels::layernorm::bwd::MAX_DIM_32_LANES_DROPOUT: longer rows would spill); without dropout it
# takes every row length the forward does. Longer rows with dropout take the composite below.
_LAYERNORM_BWD_MAX_D = 4096


def _layernorm_bwd_on_gpu(x: Tensor, p: float) -> bool:
    """Whether the layernorm_bwd kernel takes rows like ``x`` with dropout ``p`` (else the composite)."""
    return x.is_cuda and (p == 0.0 or x.shape[-1] <= _LAYERNORM_BWD_MAX_D)


@_op("layernorm_backward")
def layernorm_backward(grad: Tensor, x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor,
                       p: float = 0.0, seed: int = 0, offset: int = 0,
                       eps: float = 1e-5) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dx, dresidual, dweight, dbias)`` of :func:`layernorm` for ``grad`` of its ``(2, ..., D)``
    output (plane 0 the normed rows' gradient, plane 1 the new residual's).

    CUDA: the ``layernorm_bwd`` kernel (``h``, its statistics and the dropout mask recomputed from
    ``x``, ``residual``, ``seed`` and ``offset``; a gradient plane that is not dense is copied first)
    (rows up to ``_LAYERNORM_BWD_MAX_D`` long with dropout, any length without). CPU, and longer rows
    with dropout on CUDA (interim): PyTorch ops
    in float32 that recompute the kernel's float32 ``h`` (the dropout mask drawn again by
    :func:`dropout_keep`), its mean and ``1/sqrt(var + eps)``, and take LayerNorm's gradient.
    """
    if _layernorm_bwd_on_gpu(x, p):
        g = grad.reshape((2,) + tuple(x.shape))
        rows = _dispatch.rows_in_place
        return _dispatch.layernorm_backward(rows(g[0]), rows(g[1]), rows(x), rows(residual), weight,
                                            float(p), seed, offset, float(eps))
    d = x.shape[-1]
    f32 = torch.float32
    xs = x.reshape(-1, d).to(f32)
    r = residual.reshape(-1, d).to(f32)
    keep = None
    if p > 0.0:
        keep = dropout_keep(xs.shape[0], d, p, seed, offset, x.device).to(f32) * (1.0 / (1.0 - p))
        xs = xs * keep
    dx, dh, dweight, dbias = _layernorm_bwd_cpu(grad, r + xs, keep, weight, bias, eps)
    return dx.reshape(x.shape), dh.reshape(residual.shape), dweight, dbias


def _layernorm_bwd_cpu(grad: Tensor, h: Tensor, keep: Optional[Tensor], weight: Tensor, bias: Tensor,
                       eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """LayerNorm's gradient in float32 PyTorch ops from the float32 rows ``h`` (``(rows, D)``) and the
    scaled dropout mask ``keep`` (or None): ``(dx, dresidual)`` as bf16 ``(rows, D)``, dweight, dbias."""
    d = h.shape[-1]
    f32 = torch.float32
    g = grad.reshape(2, -1, d).to(f32)
    dy, dh_out = g[0], g[1]
    mean = h.mean(dim=-1, keepdim=True)
    hc = h - mean
    rstd = torch.rsqrt((hc * hc).mean(dim=-1, keepdim=True) + eps)
    xhat = hc * rstd
    w = weight.to(f32)
    dweight = (dy * xhat).sum(dim=0)
    dbias = dy.sum(dim=0)
    gw = dy * w
    dh = rstd * (gw - gw.mean(dim=-1, keepdim=True) - xhat * (gw * xhat).mean(dim=-1, keepdim=True))
    dh = dh + dh_out
    dx = dh * keep if keep is not None else dh
    bf = torch.bfloat16
    return dx.to(bf), dh.to(bf), dweight.to(weight.dtype), dbias.to(bias.dtype)


@layernorm_backward.register_fake
def _(grad, x, residual, weight, bias, p=0.0, seed=0, offset=0, eps=1e-5):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(residual, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format),
            torch.empty_like(bias, memory_format=torch.contiguous_format))


def _layernorm_backward_setup(ctx, inputs, output):
    pass


def _layernorm_backward_grad(ctx, *grads):
    raise RuntimeError("kittens::layernorm_backward has no backward (double backward through "
                       "kittens.layernorm is not implemented)")


_autograd("layernorm_backward", layernorm_backward, _layernorm_backward_grad, _layernorm_backward_setup)


@_op("layernorm_backward_h")
def layernorm_backward_h(grad: Tensor, h: Tensor, weight: Tensor, bias: Tensor, p: float = 0.0, seed: int = 0,
                         offset: int = 0, eps: float = 1e-5) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dx, dresidual, dweight, dbias)`` of :func:`layernorm` from ``h``, its output's second plane (the
    forward's ``residual + dropout(x)``), for ``grad`` of its ``(2, ..., D)`` output. Without dropout ``dx``
    equals ``dresidual`` and is returned empty (0 elements: an op's outputs may not alias); the caller
    uses ``dresidual`` for both.

    CUDA: the ``layernorm_bwd`` kernel with ``from_h`` (h, dy, dh read; dresidual written, and dx with
    dropout; the mask drawn again from ``seed`` and ``offset``), rows up to ``_LAYERNORM_BWD_MAX_D`` long
    with dropout. CPU and longer rows with dropout: PyTorch ops in float32.
    """
    if _layernorm_bwd_on_gpu(h, p):
        g = grad.reshape((2,) + tuple(h.shape))
        rows = _dispatch.rows_in_place
        dx, dres, dw, db = _dispatch.layernorm_backward_h(rows(g[0]), rows(g[1]), rows(h), weight, float(p),
                                                          seed, offset, float(eps))
        dres = dres.reshape(h.shape)
        return (dx.reshape(h.shape) if p > 0.0 else dres.new_empty(0)), dres, dw, db
    d = h.shape[-1]
    hf = h.reshape(-1, d).to(torch.float32)
    keep = None
    if p > 0.0:
        keep = dropout_keep(hf.shape[0], d, p, seed, offset, h.device).to(torch.float32) * (1.0 / (1.0 - p))
    dx, dres, dw, db = _layernorm_bwd_cpu(grad, hf, keep, weight, bias, eps)
    return (dx.reshape(h.shape) if p > 0.0 else dx.new_empty(0)), dres.reshape(h.shape), dw, db


@layernorm_backward_h.register_fake
def _(grad, h, weight, bias, p=0.0, seed=0, offset=0, eps=1e-5):
    dres = torch.empty_like(h, memory_format=torch.contiguous_format)
    return ((torch.empty_like(h, memory_format=torch.contiguous_format) if p > 0.0 else h.new_empty(0)), dres,
            torch.empty_like(weight, memory_format=torch.contiguous_format),
            torch.empty_like(bias, memory_format=torch.contiguous_format))


_autograd("layernorm_backward_h", layernorm_backward_h, _layernorm_backward_grad, _layernorm_backward_setup)


# The kernels' dropout stream in torch ops (layernorm_backward's composite draws the mask with it).
from ._philox import dropout_keep  # noqa: E402


# -- rotary --------------------------------------------------------------------------------------------


def rotary_tables(seq: int, dim: int, base: float = 10000.0, positions: Optional[Tensor] = None,
                  device=None) -> Tuple[Tensor, Tensor]:
    """:func:`kittens.rotary_tables` in torch ops, for traced code (``kittens.rotary(q)`` without
    tables under ``torch.compile``, where the numpy tables and their cache would break the graph):
    the angles, cosines and sines in float64, rounded once to bfloat16. The same values as the numpy
    tables up to float64's last bit before that rounding (``pow`` and ``cos`` of two libraries)."""
    f64 = torch.float64
    if positions is None:
        pos = torch.arange(seq, dtype=f64, device=device)
    else:
        pos = torch.as_tensor(positions, device=device).to(f64)
    inv_freq = float(base) ** (-torch.arange(0, dim, 2, dtype=f64, device=device) / dim)
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(torch.bfloat16), torch.sin(ang).to(torch.bfloat16)


def _rotary_layout(q: Tensor) -> str:
    from . import _dispatch as dispatch  # importable without CUDA (the module-level import is CUDA-only)

    return dispatch.rotary_out_layout(q)


def rotary_eager(q: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """Rotary embedding of q (B, H, N, D) with tables cos, sin (N, D/2); the output in q's layout, or for
    q in neither dense layout in :func:`kittens._dispatch.rotary_out_layout`'s. On CUDA such a q (the head
    dim contiguous, the other strides multiples of 8: a transposed q, q sliced out of a fused QKV) is read
    in place; otherwise (and on CPU) it is copied into that layout first."""
    if q.is_cuda:
        if q.dim() != 4:
            raise ValueError(f"q must be 4-D (B, H, N, D), got shape {tuple(q.shape)}")
        st = q.stride()
        if st[-1] != 1 or st[0] % 8 or st[1] % 8 or st[2] % 8:
            q = _in_layout(q, _rotary_layout(q))
        if not cos.is_contiguous():
            cos = cos.contiguous()
        if not sin.is_contiguous():
            sin = sin.contiguous()
        return _dispatch.rotary(q, cos, sin, bool(interleaved))
    from . import rotary as run

    layout = _rotary_layout(q)
    q = _in_layout(q, layout)
    out = _empty(q.shape, layout, q)
    run(q, cos.contiguous(), sin.contiguous(), interleaved, out=out)
    return out


rotary = _op("rotary")(rotary_eager)


@rotary.register_fake
def _(q, cos, sin, interleaved=False):
    for name, t in (("q", q), ("cos", cos), ("sin", sin)):
        _bf16(name, t)
    if q.dim() != 4:
        raise ValueError(f"q must be 4-D (B, H, N, D), got shape {tuple(q.shape)}")
    _opchecks.rotary_dim(q)
    return _empty(q.shape, _rotary_layout(q), q)


def _rotary_setup(ctx, inputs, output):
    q, cos, sin, interleaved = inputs
    ctx.interleaved = interleaved
    ctx.save_for_backward(q, cos, sin)


def _pairs(t: Tensor, interleaved: bool) -> Tuple[Tensor, Tensor]:
    if interleaved:
        return t[..., 0::2], t[..., 1::2]
    half = t.shape[-1] // 2
    return t[..., :half], t[..., half:]


def _rotary_grad(ctx, grad):
    q, cos, sin = ctx.saved_tensors
    dq = dcos = dsin = None
    if ctx.needs_input_grad[0]:
        # The rotation's transpose is the rotation by -angle: the same kernel with -sin (exact).
        dq = call("rotary", grad, cos, -sin, ctx.interleaved)
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        # The tables' gradients, PyTorch ops in float32 (y0 = x0 c - x1 s, y1 = x1 c + x0 s), summed over
        # batch and heads.
        x0, x1 = _pairs(q.to(torch.float32), ctx.interleaved)
        g0, g1 = _pairs(grad.to(torch.float32), ctx.interleaved)
        if ctx.needs_input_grad[1]:
            dcos = (g0 * x0 + g1 * x1).sum(dim=(0, 1)).to(cos.dtype)
        if ctx.needs_input_grad[2]:
            dsin = (g1 * x0 - g0 * x1).sum(dim=(0, 1)).to(sin.dtype)
    return dq, dcos, dsin, None


_autograd("rotary", rotary, _rotary_grad, _rotary_setup)


# -- rmsnorm -------------------------------------------------------------------------------------------
# CUDA: the registry kernels `rmsnorm` / `rmsnorm_bwd` through `_dispatch`. CPU: PyTorch in float32 with
# the kernels' rounding points (no per-kernel CPU entry of the extension exists for them yet).


def _rms_cpu(h: Tensor, weight: Tensor, eps: float) -> Tensor:
    hf = h.to(torch.float32)
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float32)).to(torch.bfloat16)


def rmsnorm_eager(x: Tensor, residual: Optional[Tensor], weight: Tensor, eps: float = 1e-6) -> Tuple[Tensor, Tensor]:
    """``(y, h)``: ``h = x + residual`` (a copy of ``x`` when ``residual`` is None), ``y = h /
    sqrt(mean(h^2) + eps) * weight`` over the last dimension D (768 to 8192, a multiple of 8 on CUDA),
    bf16 in and out, float32 statistics (the fused residual-add RMSNorm kernel)."""
    if x.is_cuda:  # checked where the call's key is first prepared (kittens._dispatch._rows)
        rows = _dispatch.rows_in_place
        y, h = _dispatch.rmsnorm(rows(x), None if residual is None else rows(residual), weight, float(eps))
        return y, (x.clone() if h is None else h)
    _opchecks.rmsnorm_args(x, residual, weight)
    hf = x.to(torch.float32) if residual is None else x.to(torch.float32) + residual.to(torch.float32)
    return _rms_cpu(hf, weight, eps), hf.to(torch.bfloat16)


rmsnorm = _op("rmsnorm")(rmsnorm_eager)


@_op("rmsnorm_y")
def rmsnorm_y(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``rmsnorm(x, None, weight, eps)[0]`` alone: the normed rows without the op's second output, which
    without a residual is a copy of x (an op's outputs may not alias its inputs), made for nothing where
    the caller keeps only the normed rows (a norm outside a residual add: Hugging Face's order)."""
    if x.is_cuda:  # checked where the call's key is first prepared (kittens._dispatch._rows)
        return _dispatch.rmsnorm(_dispatch.rows_in_place(x), None, weight, float(eps))[0]
    _opchecks.rmsnorm_args(x, None, weight)
    return _rms_cpu(x.to(torch.float32), weight, eps)


@rmsnorm_y.register_fake
def _(x, weight, eps=1e-6):
    _opchecks.rmsnorm_args(x, None, weight)
    return x.new_empty(x.shape)


def _rmsnorm_y_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight)  # h is x itself


def _rmsnorm_y_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dweight = call("rmsnorm_backward", grad, x, weight, None, ctx.eps)
    return dx, dweight, None


_autograd("rmsnorm_y", rmsnorm_y, _rmsnorm_y_grad, _rmsnorm_y_setup)


@rmsnorm.register_fake
def _(x, residual, weight, eps=1e-6):
    _opchecks.rmsnorm_args(x, residual, weight)
    return x.new_empty(x.shape), x.new_empty(x.shape)


def _rmsnorm_setup(ctx, inputs, output):
    x, residual, weight, eps = inputs
    ctx.has_residual, ctx.eps = residual is not None, eps
    ctx.save_for_backward(output[1], weight)
    # An output nobody used (h, for a norm without a residual) gets None, not a tensor of zeros for the
    # backward kernel to read.
    ctx.set_materialize_grads(False)


def _rmsnorm_grad(ctx, grad_y, grad_h):
    h, weight = ctx.saved_tensors
    if grad_y is None:
        grad_y = torch.zeros_like(h)
    # Gradients in row strides are read in place on CUDA; others (e.g. expanded ones) are copied there.
    dx, dweight = call("rmsnorm_backward", grad_y, h, weight, grad_h, ctx.eps)
    return dx, (dx if ctx.has_residual else None), dweight, None


_autograd("rmsnorm", rmsnorm, _rmsnorm_grad, _rmsnorm_setup)


@_op("rmsnorm_backward")
def rmsnorm_backward(grad: Tensor, h: Tensor, weight: Tensor, grad_h: Optional[Tensor],
                     eps: float = 1e-6) -> Tuple[Tensor, Tensor]:
    """``(dx, dweight)`` of :func:`rmsnorm`: ``dx = rstd * (w*dy - h_hat * mean(w*dy*h_hat)) + grad_h`` (also
    the residual's gradient), ``dweight = sum over rows of dy * h_hat``; rstd recomputed from ``h``."""
    _opchecks.rmsnorm_backward_args(grad, h, weight, grad_h)
    if h.is_cuda:
        rows = _dispatch.rows_in_place
        return _dispatch.rmsnorm_backward(rows(grad), rows(h), weight, None if grad_h is None else rows(grad_h),
                                          float(eps))
    d = h.shape[-1]
    f32 = torch.float32
    hf = h.reshape(-1, d).to(f32)
    dy = grad.reshape(-1, d).to(f32)
    rstd = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    hat = hf * rstd
    wdy = dy * weight.to(f32)
    dx = rstd * (wdy - hat * (wdy * hat).mean(-1, keepdim=True))
    if grad_h is not None:
        dx = dx + grad_h.reshape(-1, d).to(f32)
    return dx.to(torch.bfloat16).reshape(h.shape), (dy * hat).sum(0).to(weight.dtype)


@rmsnorm_backward.register_fake
def _(grad, h, weight, grad_h, eps=1e-6):
    _opchecks.rmsnorm_backward_args(grad, h, weight, grad_h)
    return torch.empty_like(h, memory_format=torch.contiguous_format), torch.empty_like(weight)


_autograd("rmsnorm_backward", rmsnorm_backward, _no_double_backward("rmsnorm_backward"), lambda ctx, inputs, output: None)


# -- swiglu --------------------------------------------------------------------------------------------


def swiglu_eager(gate: Tensor, up: Tensor) -> Tensor:
    """``silu(gate) * up`` over (..., F) tensors (F a multiple of 8 on CUDA), bf16 in and out, float32
    inside. On CUDA, gate and up whose rows are one stride apart (e.g. the two halves of one (..., 2F)
    tensor, the packed kernel, or slices of wider ones) are read in place; others are copied first."""
    if gate.is_cuda:  # checked where the call's key is first prepared (kittens._dispatch._rows)
        packed = _dispatch._packed(gate, up)
        if not packed:
            gate, up = _dispatch.rows_in_place(gate), _dispatch.rows_in_place(up)
        return _dispatch.swiglu(gate, up, packed)
    _opchecks.swiglu_args(gate, up)
    g = gate.to(torch.float32)
    return (torch.nn.functional.silu(g) * up.to(torch.float32)).to(torch.bfloat16)


swiglu = _op("swiglu")(swiglu_eager)


@swiglu.register_fake
def _(gate, up):
    _opchecks.swiglu_args(gate, up)
    return torch.empty(gate.shape, dtype=torch.bfloat16, device=gate.device)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_grad(ctx, grad):
    gate, up = ctx.saved_tensors
    dgate, dup = call("swiglu_backward", grad, gate, up)
    return dgate, dup


_autograd("swiglu", swiglu, _swiglu_grad, _swiglu_setup)


@_op("swiglu_backward")
def swiglu_backward(grad: Tensor, gate: Tensor, up: Tensor) -> Tuple[Tensor, Tensor]:
    """``(dgate, dup)`` of :func:`swiglu`: ``dgate = grad * up * silu'(gate)``, ``dup = grad * silu(gate)``
    (two separate tensors, since outputs of one op may not alias each other: packed inputs are read in
    place as two row-strided tensors)."""
    _opchecks.swiglu_args(gate, up, grad)
    if gate.is_cuda:
        rows = _dispatch.rows_in_place
        return _dispatch.swiglu_backward(rows(grad), rows(gate), rows(up), allow_packed=False)
    g, u, d = gate.to(torch.float32), up.to(torch.float32), grad.to(torch.float32)
    s = torch.sigmoid(g)
    silu = g * s
    bf = torch.bfloat16
    return (d * u * s * (1.0 + g - silu)).to(bf), (d * silu).to(bf)


@swiglu_backward.register_fake
def _(grad, gate, up):
    _opchecks.swiglu_args(gate, up, grad)
    return (torch.empty(gate.shape, dtype=torch.bfloat16, device=gate.device),
            torch.empty(up.shape, dtype=torch.bfloat16, device=up.device))


_autograd("swiglu_backward", swiglu_backward, _no_double_backward("swiglu_backward"), lambda ctx, inputs, output: None)


# -- cross-entropy -------------------------------------------------------------------------------------
# ``kittens::cross_entropy_``: the per-chunk kernel, in place over the logits; its body is kittens/_lce.py's,
# and the fused linear + cross-entropy built on it (kittens.linear_cross_entropy) kittens/loss.py's.

from ._lce import cross_entropy_eager, lce_forward  # noqa: E402

cross_entropy_ = _op("cross_entropy_", mutates=("logits",))(cross_entropy_eager)


@cross_entropy_.register_fake
def _(logits, labels, scale, smoothing=0.0):
    return logits.new_empty((logits.shape[0],), dtype=torch.float32)


# ``kittens::linear_cross_entropy_forward``: the whole chunked loss as one op (body kittens/_lce.py's
# ``lce_forward``), so that torch.compile calls it as it is instead of unrolling its chunk loop into the
# graph. It returns the loss and both gradients (computed in the forward, as Liger's); the backward scales
# them by the incoming gradient.
linear_cross_entropy_forward = _op("linear_cross_entropy_forward")(lce_forward)


@linear_cross_entropy_forward.register_fake
def _(hidden, weight, labels, scale, ignore_index, smoothing, chunk, need_dh, need_dw):
    empty = hidden.new_empty((0,))
    return (hidden.new_empty((), dtype=torch.float32), hidden.new_empty(hidden.shape) if need_dh else empty,
            weight.new_empty(weight.shape) if need_dw else empty)


def _lce_setup(ctx, inputs, output):
    _, dh, dw = output
    ctx.mark_non_differentiable(dh, dw)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(dh, dw)


def _lce_grad(ctx, grad, _dh_grad=None, _dw_grad=None):
    # Eager: in place (as Liger's), since a scaled copy would hold a second weight-sized gradient at the
    # peak; a second backward (retain_graph) would scale them twice, and autograd's version check on the
    # saved tensors refuses it ("modified by an inplace operation"). Both in one ``_foreach_mul_`` by the
    # incoming gradient in the gradients' dtype: PyTorch's multi-tensor kernel then reads the scalar on the
    # device and moves the bytes in vectors, where ``mul_`` by a float32 scalar tensor takes the mixed-dtype
    # elementwise path (d_weight at 128256 x 4096 plus d_hidden: 0.80 against 2.07 ms on an H200,
    # bench/results/lce/README.md). The multiplier is then rounded to bf16: exact for 1, powers of two
    # (gradient accumulation over 2^k steps, loss scaling), else within 2^-9, the gradients' own rounding
    # (tests/test_lce_cpu.py checks a gradient of 1/3 by the rule). Traced (torch.compile): out of place, in
    # float32; the compiler fuses it and reuses the buffer.
    dh, dw = ctx.saved_tensors
    eager = type(dh) in _PLAIN and type(grad) in _PLAIN
    need = [t for t, n in ((dh, ctx.needs_input_grad[0]), (dw, ctx.needs_input_grad[1])) if n]
    if eager and need:
        torch._foreach_mul_(need, grad.to(need[0].dtype))
    elif need:
        g = grad.to(torch.float32)
        need = [(t * g).to(t.dtype) for t in need]
    out = iter(need)
    return (next(out) if ctx.needs_input_grad[0] else None, next(out) if ctx.needs_input_grad[1] else None,
            None, None, None, None, None, None, None)


_autograd("linear_cross_entropy_forward", linear_cross_entropy_forward, _lce_grad, _lce_setup)


# ``kittens._torch_op`` reads this module from the package's ``_OPS``: set it here, once imported, so that a
# trace (torch.compile) never sees ``_OPS`` unset and guards on it (which recompiled the graph on its
# second call, after the trace's own import had set it).
sys.modules[__package__]._OPS = sys.modules[__name__]

# torch.compile's on-disk caches do not see the fakes above change between kittens builds: key them on the
# build (kittens/_compile_cache.py says why).
from . import _compile_cache  # noqa: E402

_compile_cache.install()
