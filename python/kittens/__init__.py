"""kittens: the tile-framework kernels on your own arrays, with PyTorch's conventions.

``kittens.matmul(a, b)`` is ``a @ b``, ``kittens.attention(q, k, v, causal=False)`` is
``torch.nn.functional.scaled_dot_product_attention``, ``kittens.layernorm(x, residual, weight, bias, p)``
is a prenorm block's fused dropout + residual + layernorm and ``kittens.rotary(q, cos, sin)`` the rotary
position embedding, for bfloat16 arrays:

* torch tensors (CPU or CUDA), numpy arrays of dtype ``ml_dtypes.bfloat16``, and any object with
  ``__dlpack__`` (CPU ones come back as numpy arrays; CUDA ones go through torch);
* CPU arrays run on the CPU interpreter (exact storage numerics, slow); CUDA tensors run the kernel
  lowered for sm_90a (Hopper) on the caller's current stream, in the primary context PyTorch uses;
* outputs are new arrays of the input's kind and device, or ``out=``;
* layouts are read in place or refused (no hidden copies): see :func:`matmul` and :func:`attention`;
* torch tensors go through ``torch.library`` custom ops (``torch.ops.kittens.*``, :mod:`kittens.ops`):
  every kernel has an autograd formula and a fake implementation, so ``loss.backward()`` reaches every
  input and ``torch.compile(fullgraph=True)`` traces through them. Attention takes q, k, v, out each in
  its own strides (head dim contiguous), read in place, and any ``scale``.

``kittens.set_verbose(True)`` (or ``KITTENS_VERBOSE=1``) reports on stderr when a GPU kernel is compiled
(NVRTC, on first use per process; later processes read the disk cache) and how long CPU calls take.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any, Optional

from . import _kittens
from ._arrays import Array, adapt, as_bool, as_int, new_like

__all__ = ["matmul", "attention", "layernorm", "rotary", "rotary_tables", "set_verbose", "AttentionFunction", "__version__"]
__version__ = _kittens.__version__

_kittens.set_verbose(os.environ.get("KITTENS_VERBOSE", "") not in ("", "0"))


def set_verbose(on: bool = True) -> None:
    """Report kernel compile times (first CUDA call per device) and CPU run times on stderr."""
    _kittens.set_verbose(bool(on))


_NVRTC_LOOKED = False


def _find_nvrtc() -> None:
    """Point the runtime at a pip-installed NVRTC 13 (``nvidia-cuda-nvrtc``, which torch may bring along)
    unless ``KITTENS_NVRTC`` already names one; the runtime also looks in the CUDA toolkit's places.
    Looked for once per process: every CUDA call asks, and a search of ``sys.path`` costs more than a
    launch."""
    global _NVRTC_LOOKED
    if _NVRTC_LOOKED or os.environ.get("KITTENS_NVRTC"):
        return
    _NVRTC_LOOKED = True
    for base in sys.path:
        # A relative entry ("" is the current folder) would name a library of whatever folder Python
        # runs in; the runtime refuses relative paths, so never hand it one.
        if not os.path.isabs(base):
            continue
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            hits = glob.glob(os.path.join(base, sub, "libnvrtc.so.13"))
            if hits:
                os.environ["KITTENS_NVRTC"] = os.path.dirname(hits[0])
                return


def _stream(a: Array) -> int:
    """The caller's current CUDA stream on a's device (torch's), as a CUstream handle."""
    if a.device != "cuda":
        return 0
    torch = sys.modules["torch"]
    _find_nvrtc()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        # The handle itself, without building a torch.cuda.Stream object (what Triton's launcher reads).
        return int(raw(a.index))
    return int(torch.cuda.current_stream(a.obj.device).cuda_stream)


def _result(ref: Array, out):
    """Hand back `out` as the caller's kind: CPU DLPack inputs get numpy, CUDA DLPack inputs (imported
    through torch) go back through their own namespace's ``from_dlpack`` where it has one."""
    if ref.kind == "torch" and ref.keep:
        ns = getattr(ref.keep[0], "__array_namespace__", None)
        if ns is not None:
            try:
                return ns().from_dlpack(out)
            except Exception:
                return out
    return out


_OPS = None


def _torch_op(*xs) -> bool:
    """Whether every one of ``xs`` is a torch tensor: then the call goes through the ``torch.ops.kittens``
    custom op (:mod:`kittens.ops`: autograd, ``torch.compile``), which this registers on first use."""
    global _OPS
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    for x in xs:  # a loop, not all(<generator>): every call of every op asks
        if not isinstance(x, torch.Tensor):
            return False
    if _OPS is None:
        from . import ops

        _OPS = ops
    return True


def _eager(*xs) -> bool:
    """Eager (not traced by torch.compile) and no input needs a gradient (the attention call without the
    log-sum-exp output, which no op has; every other call chooses through ``kittens.ops.call``)."""
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and any(x.requires_grad for x in xs))


def _no_autograd_with_out(what: str, *xs) -> None:
    """``out=`` (or ``inplace=True``) writes into the caller's array, outside autograd: refused, naming
    the call, when an input needs a gradient (never a silently dropped gradient)."""
    if _grad_needed(*xs):
        raise RuntimeError(f"kittens.{what} does not support autograd (an input requires grad): only "
                           "torch tensors without out= / inplace= go through the differentiable ops; "
                           "otherwise call it under torch.no_grad()")


def _grad_needed(*xs) -> bool:
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and torch.is_grad_enabled()
        and any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs)
    )


def matmul(a: Any, b: Any, *, out: Any = None):
    """``a @ b`` for 2-D bfloat16 arrays, fp32 accumulation, bf16 output (M, N).

    ``a`` (M, K) and ``b`` (K, N) are each read in place in either major order and with any
    leading-dimension stride: row-major with rows any distance apart (a slice of a bigger matrix), or
    the transpose of a row-major array (``x.T``, ``weight.T`` of a linear layer, or a slice of one; the
    kernel reads A M-major and B N-major from shared memory, wgmma's transpose bits). Strides with
    neither dimension contiguous are refused with a ValueError. On CUDA the GPU must be a Hopper
    (sm_90a); any M, N, K. One documented copy remains, on CUDA only: where a leading dimension or N
    is no multiple of 8 elements, or an operand starts off a 16-byte boundary (TMA's rows and
    addresses are 16-byte multiples), the operands go through padded copies. The block of C per
    thread block is chosen per shape. ``out=`` may likewise be a row-major slice of a bigger matrix
    (rows any distance apart), written in place.

    CUDA calls are enqueued on the current torch stream and return at once; they allocate nothing but
    the output (none with ``out=``) and, for padded shapes, stream-ordered scratch, and synchronise
    nothing, so after one warm-up call (which compiles or loads the kernel) they can be captured in a
    CUDA graph.

    Torch tensors go through ``torch.ops.kittens.matmul``, whose backward runs the same GEMM:
    ``dA = dC·Bᵀ`` and ``dB = Aᵀ·dC``, both reading their operands in place (``b.T`` and ``a.T`` as
    transposed operands, no copy). ``out=`` writes outside autograd: with an input that
    requires grad it is a RuntimeError.
    """
    if out is None and _torch_op(a, b):
        return _OPS.call("matmul", a, b)
    _no_autograd_with_out("matmul with out= or a non-torch argument", a, b)
    return _matmul(a, b, out)


def _cuda():
    """The CUDA path (``kittens._dispatch``: every kernel through one prepared-call path); CUDA arrays are
    torch tensors by then (``_arrays`` imports other frameworks' through DLPack)."""
    from . import _dispatch

    return _dispatch


def _obj(x, name: str):
    return None if x is None else adapt(x, name, writable=True).obj


def _matmul(a, b, out):
    A, B = adapt(a, "a"), adapt(b, "b")
    if A.device == "cuda":
        return _result(A, _cuda().matmul(A.obj, B.obj, out=_obj(out, "out")))
    if len(A.shape) != 2 or len(B.shape) != 2:
        raise ValueError(f"kittens.matmul takes 2-D arrays, got shapes {A.shape} and {B.shape}")
    m, n = A.shape[0], B.shape[1]
    if out is None:
        _kittens.matmul(A.args(), B.args(), None)  # the checks, before the output is allocated
        out = new_like(A, (m, n))
    O = adapt(out, "out", writable=True)
    same_cuda = A.device == "cuda" and A.where() == B.where() == O.where()
    if same_cuda and A.shape[1] == B.shape[0] and O.shape == (m, n) and O.strides == (n, 1):
        # Empty problems, which the kernel does not take: nothing to compute, or an empty sum (zeros,
        # written on the caller's stream).
        if m == 0 or n == 0:
            return _result(A, out)
        if A.shape[1] == 0:
            O.obj.zero_()
            return _result(A, out)
    _kittens.matmul(A.args(), B.args(), O.args())
    return _result(A, out)


def _attn_order(q: Array):
    """(0, 2, 1, 3) when q is a (B, N, H, D) buffer seen as (B, H, N, D), so the output matches it."""
    if len(q.shape) != 4:
        return None
    b, h, n, d = q.shape
    bshd = (n * h * d, d, h * d, 1)
    same = all(s == w or size <= 1 for s, w, size in zip(q.strides, bshd, q.shape))
    bhsd = (h * n * d, n * d, d, 1)
    also = all(s == w or size <= 1 for s, w, size in zip(q.strides, bhsd, q.shape))
    return (0, 2, 1, 3) if same and not also else None


_CAUSAL_ALIGN = ("top_left", "bottom_right")


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: Optional[float] = None, *, out: Any = None,
              return_lse: bool = False, causal_align: str = "top_left", softcap: Optional[float] = None,
              window: Optional[Any] = None, deterministic: bool = False, alibi_slopes: Optional[Any] = None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=causal)`` for bfloat16 q (B, H, N, D) and
    k, v (B, H_kv, N_kv, D); grouped-query attention when H_kv divides H (as ``enable_gqa=True``).

    q, k, v (and ``out=``) may each be in its own strides, the head dim contiguous (FlashAttention's
    rule): a Hugging Face model's transposed q beside dense k and v, or q, k, v sliced out of one fused
    projection, are all read in place, no copy (on CUDA every stride but the head dim's a multiple of 8
    elements, 16 bytes, for the tensor maps; a ValueError naming the tensor and stride otherwise). A new
    output takes q's dense order, (B, H, N, D) or (B, N, H, D) seen through ``.transpose(1, 2)``, else
    (B, H, N, D). Torch tensors go through ``torch.ops.kittens.attention``. The head dim must be
    a multiple of 32 from 32 to 256. Queries and keys may differ in number (N_kv >= 1; decoding is
    N = 1). ``causal`` masks keys after each query, aligned as ``causal_align`` says: ``"top_left"``
    (PyTorch's ``is_causal``: query i keeps keys j <= i) or ``"bottom_right"`` (FlashAttention's: query
    i keeps keys j <= i + N_kv - N, so the last query sees every key). A query that keeps no key (bottom-
    right with N > N_kv) gets a zero output row. ``scale`` (default ``1/sqrt(D)``; finite, positive),
    ``softcap`` (logits capped to ``softcap * tanh(l / softcap)``; > 0) and ``window=(left, right)``
    (FlashAttention's sliding window, bottom-right aligned: query i keeps keys
    ``i + N_kv - N - left ..= i + N_kv - N + right``, -1 unbounded; with ``causal`` both masks apply)
    are constants of the kernel, each value its own compiled kernel. ``deterministic=True`` makes the
    CUDA backward bitwise reproducible: dQ from the query blocks' own pass, never the float32 atomic
    adds that the default takes at head dim 128 (``kittens._backward``). ``kittens.flash_attn.flash_attn_func``
    is FlashAttention's signature over this. ``alibi_slopes`` (FlashAttention's ALiBi: a float32 torch
    tensor (H,) or (B, H) on q's device) adds ``-slope * |i + N_kv - N - j|`` to each scaled logit (after
    the cap), read by the kernels from the tensor (any values, no recompile; no gradient; ``kittens._alibi``
    says which checks run where).

    ``return_lse=True`` returns ``(out, lse)``: ``lse`` is a new float32 array (B, H, N) on q's device,
    ``lse[b, h, i] = log(sum_j exp(scale * q_i . k_j))`` over the keys query i keeps (natural log;
    ``-inf`` for a query that keeps none), what a backward pass or a merge of partial attentions needs.

    CPU arrays run on the interpreter. CUDA tensors run ``attn_fwd`` lowered for sm_90a (Hopper) on the
    current torch stream, one compiled kernel per head dim, mask and alignment, memory order and
    log-sum-exp output (compiled or loaded on its first call, cached for the process); there the head
    dim must be 32, 64, 96, 128, 192 or 256 (the backward too; at 192 and 256 only its atomic form, so
    ``deterministic=True`` is a ValueError there). Few query rows against many keys (decoding) take
    the key split where it pays on the device's SMs (Flash-Decoding): the keys cut into parts, one
    block each, and a second kernel merging the parts by their log-sum-exp, with the partials in
    stream-ordered scratch. Like :func:`matmul`, CUDA calls allocate nothing else and synchronise
    nothing. The autograd of ``torch.ops.kittens.attention`` runs the attention backward kernel
    (``torch.ops.kittens.attention_backward``) on the saved output and log-sum-exp, for either causal
    alignment and any scale; with ``return_lse=True`` the lse's gradient too, folded into the same
    backward run's preprocessing (``D = rowsum(dO∘O) − dlse``, as FlashAttention does for ring
    attention). ``out=`` writes outside autograd: with an input that requires grad it is a RuntimeError.
    """
    if not isinstance(causal, bool) and type(causal).__name__ != "bool_":  # numpy's bool too
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if not isinstance(return_lse, bool) and type(return_lse).__name__ != "bool_":
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {type(deterministic).__name__}")
    if not isinstance(causal_align, str):
        raise TypeError(f"causal_align must be a str, one of {_CAUSAL_ALIGN}, got {type(causal_align).__name__}")
    if causal_align not in _CAUSAL_ALIGN:
        raise ValueError(f"causal_align={causal_align!r}: expected one of {_CAUSAL_ALIGN}")
    # FlashAttention's soft cap and sliding window (kittens_kernels::attn::score): ``softcap`` > 0 caps the
    # logits at ``softcap * tanh(l / softcap)``; ``window=(left, right)`` (-1 unbounded) keeps keys
    # ``i + N_kv - N - left ..= i + N_kv - N + right`` of query i, bottom-right aligned whatever the
    # causal alignment (both masks apply). Bad values are refused by the kernels, naming them.
    if window is not None:
        window = [int(window[0]), int(window[1])] if len(window) == 2 else list(window)
        if len(window) != 2:
            raise ValueError(f"window={window!r}: a pair (left, right)")
    softcap = None if softcap is None else float(softcap)
    if out is None and _torch_op(q, k, v):
        if not return_lse and alibi_slopes is None and q.is_cuda and _eager(q, k, v):
            # No gradient and no log-sum-exp wanted: the kernel without that output (the options checked
            # where the call's key is prepared, as the op's).
            opts = _attn_opts(None if scale is None else float(scale), softcap, window)
            o = _OPS.attention_no_lse(q, k, v, bool(causal), causal_align == "bottom_right", opts)
            if o is not None:
                return o
        o, lse = _OPS.call(
            "attention", q, k, v, bool(causal), None if scale is None else float(scale), causal_align == "bottom_right",
            bool(return_lse), softcap, window, deterministic, alibi_slopes,
        )
        return (o, lse) if return_lse else o
    _no_autograd_with_out("attention with out= or a non-torch argument", q, k, v)
    if alibi_slopes is not None:
        from ._alibi import slopes

        Q = adapt(q, "q")
        alibi_slopes = slopes(alibi_slopes, Q.shape[0], Q.shape[1], Q.obj.device if Q.kind == "torch" else None)
    return _attention(q, k, v, causal, scale, out, return_lse, causal_align, softcap, window, alibi_slopes)


def _new_lse(Q: Array, shape):
    """A new float32 (B, H, N) array of q's kind and device for the log-sum-exp."""
    if Q.kind == "torch":
        torch = sys.modules["torch"]
        return torch.empty(tuple(shape), dtype=torch.float32, device=Q.obj.device)
    import numpy as np

    return np.empty(tuple(shape), dtype=np.float32)


def _attn_opts(scale, softcap, window):
    """The attention's options as the CUDA dispatch's problem fields (a hashable tuple, None omitted)."""
    items = (("scale", scale), ("softcap", softcap), ("window", None if window is None else tuple(window)))
    return tuple((name, value) for name, value in items if value is not None)


def _attention(q, k, v, causal, scale, out, return_lse=False, causal_align="top_left", softcap=None,
               window=None, alibi=None):
    """The forward without autograd: ``out``, or ``(out, lse)`` with ``return_lse``; ``alibi``: ALiBi's
    slopes as ``kittens._alibi.slopes`` made them (float32 (B, H))."""
    Q, K, V = adapt(q, "q"), adapt(k, "k"), adapt(v, "v")
    if len(Q.shape) != 4:
        raise ValueError(f"q must be 4-D (B, H, N, D), got shape {Q.shape}")
    if Q.device == "cuda":
        dispatch = _cuda()
        o = _obj(out, "out")
        f32 = sys.modules["torch"].float32
        lse = Q.obj.new_empty(tuple(Q.shape[:3]), dtype=f32) if return_lse else None
        r = dispatch.attention(Q.obj, K.obj, V.obj, bool(causal), causal_align == "bottom_right", out=o, lse=lse,
                               opts=_attn_opts(scale, softcap, window), alibi=alibi)
        if not return_lse:
            return _result(Q, r[0])
        return _result(Q, r[0]), _result(Q, lse)
    # The checks (layouts, shapes, scale, mask), before any output is allocated.
    win = None if window is None else (int(window[0]), int(window[1]))
    cap = None if softcap is None else float(softcap)
    slopes = None if alibi is None else [float(x) for x in alibi.reshape(-1).tolist()]
    _kittens.attention(
        Q.args(), K.args(), V.args(), None, None, bool(causal), causal_align == "bottom_right",
        None if scale is None else float(scale), softcap=cap, window=win, alibi=slopes,
    )
    if out is None:
        out = new_like(Q, Q.shape, _attn_order(Q))
    O = adapt(out, "out", writable=True)
    lse = _new_lse(Q, Q.shape[:3]) if return_lse else None
    L = adapt(lse, "lse", writable=True).args() if lse is not None else None
    _kittens.attention(
        Q.args(), K.args(), V.args(), O.args(), L, bool(causal), causal_align == "bottom_right",
        None if scale is None else float(scale), softcap=cap, window=win, alibi=slopes,
    )
    if lse is None:
        return _result(Q, out)
    return _result(Q, out), _result(Q, lse)


def _attention_backward(q, k, v, out, grad_out, lse, causal=False, scale=None, *, form=None):
    """Gradients ``(dq, dk, dv)`` of :func:`attention` from its output ``out`` and log-sum-exp ``lse``
    (float32 (B, H, N)) for the output gradient ``grad_out``; torch tensors. Private but stable: the
    entry the autograd function uses (see ``kittens._backward.attention_backward``). ``form``
    (``"auto"``, the default: ``"atomic"`` at head dims 32, 64, 128, 192 and 256, else ``"two"``; ``"two"`` is
    deterministic, at every head dim;
    ``None`` reads ``KITTENS_ATTN_BWD`` once) picks the CUDA launches."""
    from ._backward import attention_backward

    return attention_backward(q, k, v, out, grad_out, lse, causal, scale, form=form)


def layernorm(x: Any, residual: Any, weight: Any, bias: Any, p: float = 0.0, seed: int = 0, *,
              offset: int = 0, eps: float = 1e-5, out: Any = None):
    """``h = residual + dropout(x, p)``; returns ``(LayerNorm(h) * weight + bias, h)``, both bfloat16.

    ``x`` and ``residual`` are contiguous bfloat16 arrays of shape (..., D) with D a multiple of 8 from
    768 to 8192; ``weight`` and ``bias`` are (D,). The statistics are float32 over the float32 ``h``.
    Dropout keeps an element where its Philox 4x32-10 uniform (keyed by ``seed``, counter ``offset``,
    stream index ``row * D + col``) is at least ``p`` and scales it by ``1 / (1 - p)``; the CPU
    interpreter and the GPU draw the same mask. ``p = 0`` is exactly residual + layernorm. A new
    ``(2, ..., D)`` array holds both outputs (``out=`` passes one); the two returned arrays are its
    planes. CUDA tensors run the kernel lowered for sm_90a on the current torch stream (compiled per D,
    p and eps on first use).

    Torch tensors go through ``torch.ops.kittens.layernorm``: ``x``, ``residual``, ``weight`` and
    ``bias`` all get gradients, from ``torch.ops.kittens.layernorm_backward``, for now PyTorch ops in
    float32 (h, its statistics and the dropout mask recomputed from the saved inputs and the seed)
    until the layernorm backward kernel exists. ``out=`` writes outside autograd: with an input that
    requires grad it is a RuntimeError.
    """
    if out is None and _torch_op(x, residual, weight, bias):
        if not 0.0 <= float(p) < 1.0:
            raise ValueError(f"dropout p = {p} must be in [0, 1)")
        both = _OPS.call(
            "layernorm", x, residual, weight, bias, float(p), _OPS.seed_arg(seed), _OPS.seed_arg(offset), float(eps)
        )
        return both[0], both[1]
    _no_autograd_with_out("layernorm with out= or a non-torch argument", x, residual, weight, bias)
    X, R, W, B = adapt(x, "x"), adapt(residual, "residual"), adapt(weight, "weight"), adapt(bias, "bias")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"dropout p = {p} must be in [0, 1)")
    # Philox key and counter words: exact integers in [0, 2**64), never wrapped or truncated.
    seed, offset = as_int(seed, "seed", 0, 2**64), as_int(offset, "offset", 0, 2**64)
    if X.device == "cuda":
        both = _cuda().layernorm(X.obj, R.obj, W.obj, B.obj, float(p), seed, offset, float(eps),
                                 out=_obj(out, "out"))
        both = _result(X, both)
        return both[0], both[1]
    ins = (X.args(), R.args(), W.args(), B.args())
    if out is None:
        _kittens.layernorm(*ins, None, float(p), seed, offset, float(eps))  # the checks first
        out = new_like(X, (2,) + tuple(X.shape))
    O = adapt(out, "out", writable=True)
    _kittens.layernorm(*ins, O.args(), float(p), seed, offset, float(eps))
    both = _result(X, out)
    return both[0], both[1]


def rotary_tables(seq: int, dim: int, base: float = 10000.0, *, positions: Any = None, like: Any = None):
    """The rotary tables ``(cos, sin)``, each (N, D/2) bfloat16, of RoFormer's frequencies: pair ``i`` of
    position ``p`` turns by ``p * base ** (-2 i / D)``. ``positions`` (N integers, default ``0 .. seq-1``)
    gives each row's position, e.g. ``start + arange(n)`` for new tokens appended to a KV cache. The
    angles and their cosines and sines are computed in float64 and rounded once to bfloat16 (RTNE), so
    the tables carry no error but that rounding. With ``like`` a torch tensor, torch tensors on its
    device come back; otherwise numpy arrays of ``ml_dtypes.bfloat16``.
    """
    import numpy as np
    import ml_dtypes

    seq, dim = as_int(seq, "rotary_tables: seq", 1), as_int(dim, "rotary_tables: dim", 2)
    if dim % 2:
        raise ValueError(f"rotary_tables: seq must be >= 1 and dim a positive even number, got {seq}, {dim}")
    if not (base > 1.0 and np.isfinite(base)):
        raise ValueError(f"rotary_tables: base must be a finite number above 1, got {base}")
    if positions is None:
        pos = np.arange(seq, dtype=np.float64)
    else:
        if hasattr(positions, "detach"):
            positions = positions.detach().cpu().numpy()
        pos = np.asarray(positions)
        if pos.shape != (seq,) or not np.issubdtype(pos.dtype, np.integer):
            raise ValueError(f"rotary_tables: positions must be {seq} integers, got {pos.dtype} {pos.shape}")
        pos = pos.astype(np.float64)
    inv_freq = float(base) ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.outer(pos, inv_freq)
    cos, sin = (f(ang).astype(ml_dtypes.bfloat16) for f in (np.cos, np.sin))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return tuple(
            torch.from_numpy(t.view(np.int16)).view(torch.bfloat16).to(like.device)
            for t in (cos, sin)
        )
    return cos, sin


_TABLES: dict = {}


def _tables_for(q: Array, base: float, positions: Any):
    """Computed tables for ``q`` (N = q's third dimension, D its last), kept per device and shape when
    ``positions`` is the default."""
    n, d = q.shape[2], q.shape[3]
    like = q.obj if q.kind == "torch" else None
    if positions is not None:
        return rotary_tables(n, d, base, positions=positions, like=like)
    key = (n, d, float(base), q.kind, q.device, q.index)
    if key not in _TABLES:
        if len(_TABLES) >= 16:  # a few shapes in use at a time; never grows without bound
            _TABLES.clear()
        _TABLES[key] = rotary_tables(n, d, base, like=like)
    return _TABLES[key]


def rotary(
    q: Any,
    cos: Any = None,
    sin: Any = None,
    interleaved: bool = False,
    *,
    out: Any = None,
    inplace: bool = False,
    base: float = 10000.0,
    positions: Any = None,
):
    """Rotary position embedding of bfloat16 ``q`` (B, H, N, D) with tables ``cos``, ``sin`` (N, D/2).

    Pairs ``(x[i], x[i + D/2])`` (GPT-NeoX, half rotation) or, with ``interleaved=True``,
    ``(x[2i], x[2i + 1])`` (GPT-J): ``(x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)`` at each position.
    ``q`` is dense (B, H, N, D) or a (B, N, H, D) buffer seen through ``.transpose(1, 2)``; the output
    has q's shape and memory order. ``inplace=True`` writes into ``q`` (``out=q`` does the same). D is a
    multiple of 16 from 16 to 512. CUDA tensors run the kernel lowered for sm_90a on the current torch
    stream. Without ``cos`` and ``sin`` the tables are computed (:func:`rotary_tables` with ``base`` and
    ``positions``) and kept for later calls of the same shape and device (under ``torch.compile`` they
    are computed in the graph by torch ops instead, :func:`kittens.ops.rotary_tables`).

    Torch tensors go through ``torch.ops.kittens.rotary`` (q in neither dense layout is copied to
    (B, H, N, D) first): its backward is the same kernel with ``-sin``, the inverse rotation, and
    ``cos``/``sin`` that require grad get theirs (PyTorch ops). ``out=`` and ``inplace=True`` write
    outside autograd: with an input that requires grad they are a RuntimeError.
    """
    interleaved, inplace = as_bool(interleaved, "interleaved"), as_bool(inplace, "inplace")
    if (cos is None) != (sin is None):
        raise ValueError("rotary: give both cos and sin, or neither (then they are computed)")
    if cos is None and _torch_op(q) and sys.modules["torch"].compiler.is_compiling():
        # Traced (torch.compile): the tables in torch ops, inside the graph (no numpy, no cache).
        if q.dim() != 4:
            raise ValueError(f"q must be 4-D (B, H, N, D), got shape {tuple(q.shape)}")
        cos, sin = _OPS.rotary_tables(q.shape[2], q.shape[3], base, positions, q.device)
    elif cos is None:
        Q = adapt(q, "q")
        if len(Q.shape) != 4:
            raise ValueError(f"q must be 4-D (B, H, N, D), got shape {Q.shape}")
        _kittens.rotary(Q.args(), None, None, None, interleaved)  # q's checks, before the tables
        cos, sin = _tables_for(Q, base, positions)
    elif positions is not None:
        raise ValueError("rotary: positions apply to computed tables only (cos and sin were given)")
    if out is None and not inplace and _torch_op(q, cos, sin):
        return _OPS.call("rotary", q, cos, sin, bool(interleaved))
    _no_autograd_with_out("rotary with out=, inplace=True or a non-torch argument", q, cos, sin)
    Q, C, S = adapt(q, "q"), adapt(cos, "cos"), adapt(sin, "sin")
    if inplace:
        out = q
    if Q.device == "cuda":
        if len(Q.shape) != 4:
            raise ValueError(f"q must be 4-D (B, H, N, D), got shape {Q.shape}")
        return _result(Q, _cuda().rotary(Q.obj, C.obj, S.obj, bool(interleaved), out=_obj(out, "out")))
    if out is None:
        if len(Q.shape) != 4:
            raise ValueError(f"q must be 4-D (B, H, N, D), got shape {Q.shape}")
        _kittens.rotary(Q.args(), C.args(), S.args(), None, interleaved)  # the checks first
        out = new_like(Q, Q.shape, _attn_order(Q))
    O = adapt(out, "out", writable=True)
    _kittens.rotary(Q.args(), C.args(), S.args(), O.args(), bool(interleaved))
    return _result(Q, out)


_AUTOGRAD = None


def _torch_functions():
    """The torch.autograd.Functions, made on first use so that importing kittens needs no torch."""
    global _AUTOGRAD
    if _AUTOGRAD is None:
        from . import _autograd as m

        _AUTOGRAD = m
    return _AUTOGRAD


def __getattr__(name: str):
    if name == "AttentionFunction":
        return _torch_functions().AttentionFunction
    if name == "flash_attn_func":
        # FlashAttention's signature (kittens.flash_attn), so `from kittens import flash_attn_func` is
        # the import FlashAttention users change; loaded on first use (it needs torch).
        from .flash_attn import flash_attn_func

        return flash_attn_func
    if name == "linear_cross_entropy":
        # The fused linear + cross-entropy (kittens.loss), loaded on first use (it needs torch).
        from .loss import linear_cross_entropy

        return linear_cross_entropy
    if name == "flash_attn_varlen_func":
        # FlashAttention's packed variable-length interface (kittens.varlen), loaded on first use.
        from .varlen import flash_attn_varlen_func

        return flash_attn_varlen_func
    if name == "flash_attn_with_kvcache":
        # FlashAttention's decoding with a KV cache (kittens.kvcache), loaded on first use.
        from .kvcache import flash_attn_with_kvcache

        return flash_attn_with_kvcache
    if name in ("tile", "compile"):
        # The tile language (kittens.tile), imported on first use.
        import importlib

        t = importlib.import_module(".tile", __name__)
        return t if name == "tile" else t.compile
    raise AttributeError(f"module 'kittens' has no attribute {name!r}")
