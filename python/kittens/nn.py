"""``kittens.nn``: drop-in modules for a transformer block on kittens' kernels.

=======================  ==========================================  ==========================================
module                   counterpart (same parameters, state-dict)   kernel
=======================  ==========================================  ==========================================
:class:`Linear`          ``torch.nn.Linear`` (a subclass)            ``kittens.matmul`` (GEMM), bias in PyTorch
:class:`LayerNorm`       ``torch.nn.LayerNorm`` (a subclass)         ``kittens.layernorm`` (residual add fused)
:class:`RMSNorm`         ``torch.nn.RMSNorm`` (a subclass)           ``kittens.ops.rmsnorm`` (residual add fused)
:class:`RotaryEmbedding` Hugging Face's ``LlamaRotaryEmbedding``     ``kittens.rotary`` (GPT-NeoX halves)
:class:`SwiGLU`          Hugging Face's ``LlamaMLP`` (gate/up/down)  ``kittens.ops.swiglu``, projections Linear
:class:`Attention`       Hugging Face's ``LlamaAttention`` (q/k/v/o) ``kittens.attention`` (MHA/GQA, causal)
=======================  ==========================================  ==========================================

Each module runs the kernel where the kernel takes the case, and PyTorch's own computation otherwise,
with a :class:`FallbackWarning` naming why, once per module type and reason (never a silently different
result, never an error the PyTorch module would not raise). The kernels take bfloat16 on the CPU (the
interpreter) and on CUDA devices of compute capability 9.0 (sm_90a); a float32 input runs in PyTorch,
except under ``torch.autocast(dtype=torch.bfloat16)``, where every module computes in bfloat16 (the norms
too, which PyTorch's autocast runs in float32). Shape limits are the kernels' (``docs/python.md``): matmul
any shape (CPU: at most 2^34 multiply-adds a call), layernorm D a multiple of 8 from 768 to 8192,
rotary D a multiple of 16 from 16 to 512, attention head dims 32 to 256 in steps of 32 (CUDA: 64, 128).

Warnings are issued in eager mode; under ``torch.compile`` the same choice is made without one.
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import kittens

from . import ops as _ops
from .loss import linear_cross_entropy

__all__ = ["Linear", "LayerNorm", "RMSNorm", "RotaryEmbedding", "SwiGLU", "Attention", "KVCache",
           "FallbackWarning", "attention", "apply_rotary", "rotate_half", "rms_norm", "swiglu",
           "LinearCrossEntropy", "linear_cross_entropy"]

BF16 = torch.bfloat16
CPU_MACS = 2**34  # the CPU interpreter's budget a call (kittens run's), refused beyond


class FallbackWarning(UserWarning):
    """A kittens.nn module ran PyTorch's computation instead of a kernel; the message says why."""


_WARNED: set = set()


def fallback(what: str, why: str) -> None:
    """Warn once per (module, reason) that ``what`` runs PyTorch because ``why``."""
    if torch.compiler.is_compiling() or (what, why) in _WARNED:
        return
    _WARNED.add((what, why))
    warnings.warn(f"kittens.nn.{what}: running PyTorch instead of the kernel: {why}", FallbackWarning,
                  stacklevel=3)


_CAPS: dict = {}


def device_why(t: Tensor) -> Optional[str]:
    """Why kittens' kernels cannot run on ``t``'s device (None: they can)."""
    if t.device.type == "cpu":
        return None
    if t.device.type == "cuda":
        i = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if i not in _CAPS:
            _CAPS[i] = torch.cuda.get_device_capability(i)
        cap = _CAPS[i]
        return None if cap == (9, 0) else (f"device cuda:{i} is sm_{cap[0]}{cap[1]}; kittens' CUDA kernels "
                                           "are sm_90a (Hopper)")
    return f"device {t.device.type}: kittens' kernels run on the CPU (interpreter) and CUDA sm_90a"


def compute_dtype(x: Tensor) -> torch.dtype:
    """bfloat16 under ``torch.autocast(dtype=bfloat16)`` on x's device, else x's own dtype."""
    kind = x.device.type
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == BF16:
        return BF16
    return x.dtype


def dtype_why(dt: torch.dtype) -> Optional[str]:
    if dt == BF16:
        return None
    return (f"dtype {dt}: kittens' kernels take bfloat16 (run the model in bfloat16 or under "
            "torch.autocast(dtype=torch.bfloat16))")


_DEVICE_WHY: dict = {}


def _device_why(x: Tensor) -> Optional[str]:
    """:func:`device_why`, kept per device (every eager call of every module asks; a device's answer never
    changes in a process)."""
    if torch.compiler.is_compiling():  # traced: asked afresh (a table filled while tracing is a recompile)
        return device_why(x)
    dev = x.device
    try:
        return _DEVICE_WHY[dev]
    except KeyError:
        why = _DEVICE_WHY[dev] = device_why(x)
        return why


def _why(x: Tensor) -> Optional[str]:
    why = _device_why(x)
    if why is not None:
        return why
    # A bfloat16 x computes in bfloat16 with or without autocast; only another dtype asks autocast.
    return None if x.dtype is BF16 else dtype_why(compute_dtype(x))


# -- Linear --------------------------------------------------------------------------------------------


class Linear(nn.Linear):
    """``torch.nn.Linear`` through ``kittens.matmul``: ``x @ weight.T`` (+ bias, added by PyTorch)."""

    def forward(self, x: Tensor) -> Tensor:
        why = _why(x)
        rows = x.numel() // max(self.in_features, 1)
        if why is None and not x.is_cuda and rows * self.in_features * self.out_features > CPU_MACS:
            why = f"{rows}x{self.in_features}x{self.out_features} exceeds the CPU interpreter's 2^34 multiply-adds"
        if why is None and self.in_features == 0:
            why = "in_features = 0"
        if why is not None:
            fallback("Linear", why)
            return F.linear(x, self.weight, self.bias)
        # A cast or a copy only where one is needed (each is a call into torch even when it returns its
        # input).
        a = (x if x.dtype is BF16 else x.to(BF16)).reshape(rows, self.in_features)
        if not a.is_contiguous():
            a = a.contiguous()
        w = self.weight
        if w.dtype is not BF16:
            w = w.to(BF16)
        if not w.is_contiguous():
            w = w.contiguous()
        y = kittens.matmul(a, w.t()).view(*x.shape[:-1], self.out_features)
        b = self.bias
        return y if b is None else y + (b if b.dtype is BF16 else b.to(BF16))


# -- norms ---------------------------------------------------------------------------------------------


def _norm_shape_why(shape, lo: int = 768, hi: int = 8192) -> Optional[str]:
    if len(shape) != 1:
        return f"normalized_shape {tuple(shape)}: the kernel normalises the last dimension only"
    d = shape[0]
    if d % 8 or not lo <= d <= hi:
        return f"hidden size {d}: the kernel takes a multiple of 8 from {lo} to {hi}"
    return None


class LayerNorm(nn.LayerNorm):
    """``torch.nn.LayerNorm`` through the fused residual + layernorm kernel.

    ``forward(x)`` is the LayerNorm's; ``forward(x, residual)`` returns ``(LayerNorm(residual + x), residual
    + x)`` in one kernel (a prenorm block's add and norm). Without a residual the kernel gets a zero one
    (one more read of the rows, until a kernel variant without it exists)."""

    def forward(self, x: Tensor, residual: Optional[Tensor] = None):
        why = _why(x) or _norm_shape_why(self.normalized_shape)
        if why is not None:
            fallback("LayerNorm", why)
            h = x if residual is None else residual + x
            y = F.layer_norm(h, self.normalized_shape, self.weight, self.bias, self.eps)
            return y if residual is None else (y, h)
        d = self.normalized_shape[0]
        # Rows in a row stride (e.g. a slice x[..., :D]) are read in place on CUDA.
        xb = x.to(BF16)
        r = torch.zeros_like(xb) if residual is None else residual.to(BF16)
        w = self.weight.to(BF16) if self.weight is not None else xb.new_ones(d)
        b = self.bias.to(BF16) if self.bias is not None else xb.new_zeros(d)
        y, h = kittens.layernorm(xb, r, w, b, 0.0, 0, eps=self.eps)
        return y if residual is None else (y, h)


def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float, residual: Optional[Tensor] = None,
             hf_order: bool = False):
    """RMSNorm of the last dimension of ``h = x`` (or ``residual + x``, then ``(y, h)`` is returned):
    ``kittens.ops.rmsnorm`` when it takes the case, else PyTorch (``F.rms_norm``; with
    ``hf_order`` in Hugging Face Llama's order: float32 statistics, the normed rows cast to x's dtype,
    then times weight)."""
    # On CUDA the rmsnorm kernel: D a multiple of 8 from 768 to 8192 (the CPU op takes any D).
    why = _why(x) or (_norm_shape_why((x.shape[-1],)) if x.is_cuda else None)
    if why is not None:
        fallback("RMSNorm", why)
        h = x if residual is None else residual + x
        if hf_order:
            hf = h.to(torch.float32)
            hn = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)
            y = hn if weight is None else weight * hn
        else:
            y = F.rms_norm(h, (h.shape[-1],), weight, eps)
        return y if residual is None else (y, h)
    # Rows in a row stride (e.g. a slice x[..., :D]) are read in place on CUDA. A cast only where one is
    # needed (each is a call into torch even when it returns its input).
    xb = x if x.dtype is BF16 else x.to(BF16)
    if weight is None:
        w = xb.new_ones(x.shape[-1])
    else:
        w = weight if weight.dtype is BF16 else weight.to(BF16)
    if residual is None:
        # The normed rows alone (rmsnorm_y): rmsnorm's second output would be a copy of x, unused here.
        return _ops.call("rmsnorm_y", xb, w, eps)
    out = _ops.call("rmsnorm", xb, residual if residual.dtype is BF16 else residual.to(BF16), w, eps)
    return out[0], out[1]


class RMSNorm(nn.RMSNorm):
    """``torch.nn.RMSNorm``; ``forward(x, residual)`` returns ``(RMSNorm(residual + x), residual + x)``.

    The kernel is ``kittens.ops.rmsnorm`` where it takes the case (:func:`rms_norm`), else PyTorch with a
    one-time warning naming why. Only a 1-D ``normalized_shape`` goes to the kernel.
    """

    def forward(self, x: Tensor, residual: Optional[Tensor] = None):
        if len(self.normalized_shape) != 1:
            fallback("RMSNorm", f"normalized_shape {tuple(self.normalized_shape)}: the kernel normalises the "
                                "last dimension only")
            h = x if residual is None else residual + x
            y = F.rms_norm(h, self.normalized_shape, self.weight, self.eps)
            return y if residual is None else (y, h)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return rms_norm(x, self.weight, eps, residual)


# -- rotary --------------------------------------------------------------------------------------------


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(q: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE (GPT-NeoX halves) of q (B, H, N, D) with tables cos, sin (N, D/2), by the rotary kernel where
    it takes the case; otherwise PyTorch as Hugging Face's ``apply_rotary_pos_emb`` computes it (tables in
    q's dtype, duplicated over the two halves)."""
    d = q.shape[-1]
    why = _device_why(q) or dtype_why(q.dtype)
    if why is None and (d % 16 or not 16 <= d <= 512):
        why = f"head dim {d}: the rotary kernel takes a multiple of 16 from 16 to 512"
    if why is not None:
        fallback("apply_rotary", why)
        c = torch.cat((cos, cos), dim=-1).to(q.dtype)
        s = torch.cat((sin, sin), dim=-1).to(q.dtype)
        return q * c + rotate_half(q) * s
    if cos.dtype is not BF16 or sin.dtype is not BF16:
        cos, sin = cos.to(BF16), sin.to(BF16)
    return kittens.rotary(q, cos, sin)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoFormer's frequencies ``base ** (-2i / D)``, GPT-NeoX halves).

    ``forward(q, positions=None, offset=0)``: q (B, H, N, D) turned by positions ``offset .. offset+N-1``
    or the N given ``positions``. The buffer ``inv_freq`` is Hugging Face's (float32, not persistent, so
    the state dict has no key of it); the cos/sin tables are computed in float64 up to the longest
    position seen and cached."""

    def __init__(self, dim: int, base: float = 10000.0, device=None):
        super().__init__()
        if dim <= 0 or dim % 2:
            raise ValueError(f"RotaryEmbedding: dim must be a positive even number, got {dim}")
        self.dim, self.base = dim, float(base)
        inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._tables: Optional[Tuple[Tensor, Tensor]] = None

    def tables(self, n: int, device, dtype=BF16) -> Tuple[Tensor, Tensor]:
        """cos, sin (n', D/2) for positions 0 .. n'-1 with n' >= n, float64 angles rounded once."""
        t = self._tables
        if t is None or t[0].shape[0] < n or t[0].device != torch.device(device) or t[0].dtype != dtype:
            n2 = max(n, 2 * t[0].shape[0] if t is not None else n)
            pos = torch.arange(n2, dtype=torch.float64, device=device)
            inv = self.base ** (-torch.arange(0, self.dim, 2, dtype=torch.float64, device=device) / self.dim)
            ang = pos[:, None] * inv[None, :]
            t = (torch.cos(ang).to(dtype), torch.sin(ang).to(dtype))
            if not torch.compiler.is_compiling():
                self._tables = t
        return t

    def forward(self, q: Tensor, positions: Optional[Tensor] = None, offset: int = 0) -> Tensor:
        n = q.shape[2]
        if q.shape[-1] != self.dim:
            raise ValueError(f"RotaryEmbedding(dim={self.dim}): q has head dim {q.shape[-1]}")
        dt = BF16 if q.dtype == BF16 else torch.float32
        if positions is None:
            cos, sin = self.tables(offset + n, q.device, dt)
            cos, sin = cos[offset: offset + n], sin[offset: offset + n]
        else:
            positions = positions.reshape(-1)
            if positions.numel() != n:
                raise ValueError(f"RotaryEmbedding: {positions.numel()} positions for {n} rows of q")
            cos, sin = self.tables(int(positions.max()) + 1, q.device, dt)
            cos, sin = cos[positions], sin[positions]
        return apply_rotary(q, cos, sin)


# -- SwiGLU --------------------------------------------------------------------------------------------


def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    """``silu(gate) * up``: ``kittens.ops.swiglu`` when it takes the case, else PyTorch."""
    why = _device_why(gate) or dtype_why(gate.dtype) or dtype_why(up.dtype)
    if why is None and gate.is_cuda and gate.shape[-1] % 8:
        why = f"intermediate size {gate.shape[-1]}: the kernel on CUDA takes a multiple of 8"
    if why is not None:
        fallback("SwiGLU", why)
        return F.silu(gate) * up
    return _ops.call("swiglu", gate, up)


class SwiGLU(nn.Module):
    """Llama's MLP, ``down_proj(silu(gate_proj(x)) * up_proj(x))``, with Hugging Face's ``LlamaMLP``
    parameter names (``gate_proj``, ``up_proj``, ``down_proj``), projections through :class:`Linear`."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.gate_proj = Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


# -- attention -----------------------------------------------------------------------------------------


def _sdpa(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float]) -> Tensor:
    """PyTorch's attention with the causal mask aligned bottom-right (FlashAttention's: the last query
    sees every key; top-left when N = N_kv) and GQA."""
    n, nk = q.shape[2], k.shape[2]
    mask = None
    if causal and n != nk:
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        mask = j <= i + (nk - n)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and n == nk, scale=scale,
                                          enable_gqa=k.shape[1] != q.shape[1])


def attention_why(q: Tensor, k: Tensor, v: Tensor) -> Optional[str]:
    """Why the attention kernel cannot take q, k, v (None: it can)."""
    why = _device_why(q)
    if why:
        return why
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != BF16:
            return f"{name} has dtype {t.dtype}: the attention kernel takes bfloat16"
    d = q.shape[-1]
    if q.device.type == "cuda" and d not in (32, 64, 96, 128, 192, 256):
        return f"head dim {d}: the CUDA attention kernels take 32, 64, 96, 128, 192 or 256"
    if d % 32 or not 32 <= d <= 256:
        return f"head dim {d}: the attention kernel takes multiples of 32 from 32 to 256"
    if q.shape[1] % k.shape[1]:
        return f"{q.shape[1]} query heads over {k.shape[1]} key heads: GQA needs a divisor"
    if k.shape[2] == 0:
        return "no keys"
    return None


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, scale: Optional[float] = None) -> Tensor:
    """Attention of q (B, H, N, D) over k, v (B, H_kv, N_kv, D), causal aligned bottom-right (as
    FlashAttention: with a KV cache the N new queries are the last N positions), output (B, H, N, D):
    ``kittens.attention`` where it takes the case, else ``F.scaled_dot_product_attention``."""
    why = attention_why(q, k, v)
    if why is not None:
        fallback("attention", why)
        return _sdpa(q, k, v, causal, scale)
    return kernel_attention(q, k, v, causal, scale)


def kernel_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float]) -> Tensor:
    """:func:`attention` once :func:`attention_why` has found nothing against the kernel (callers that asked
    it themselves, as the transformers integration, skip asking twice)."""
    if not causal:
        return kittens.attention(q, k, v, scale=scale)
    return kittens.attention(q, k, v, causal=True, scale=scale, causal_align="bottom_right")


class KVCache:
    """Keys and values of one attention layer for decoding: (B, max_len, H_kv, D) buffers (each token's
    heads in one row, as the projections write them) and the number of positions filled."""

    def __init__(self, batch: int, max_len: int, kv_heads: int, head_dim: int, dtype=BF16, device=None):
        self.k = torch.empty(batch, max_len, kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """Store k, v (B, H_kv, n, D) after the filled positions; all keys and values so far, (B, H_kv,
        length, D) views."""
        n, end = k.shape[2], self.length + k.shape[2]
        if end > self.k.shape[1]:
            raise ValueError(f"KVCache: {end} positions exceed max_len = {self.k.shape[1]}")
        self.k[:, self.length: end] = k.transpose(1, 2)
        self.v[:, self.length: end] = v.transpose(1, 2)
        self.length = end
        return self.k[:, :end].transpose(1, 2), self.v[:, :end].transpose(1, 2)


class Attention(nn.Module):
    """Multi-head / grouped-query self-attention with rotary positions, Hugging Face ``LlamaAttention``'s
    parameters (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``).

    ``forward(x)`` (B, N, hidden) attends causally (``causal=False``: every key); ``forward(x, cache)``
    with a :class:`KVCache` (``new_cache``) turns the new tokens at positions ``cache.length ..``, appends
    their keys and values and attends to everything cached (decoding: N = 1). ``rope_base=None``: no rotary.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, bias: bool = False, causal: bool = True,
                 rope_base: Optional[float] = 10000.0, device=None, dtype=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError(f"Attention: num_heads = {num_heads} is no multiple of num_kv_heads = "
                             f"{self.num_kv_heads}")
        self.head_dim = head_dim or hidden_size // num_heads
        self.causal, self.scaling = causal, self.head_dim ** -0.5
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = Linear(hidden_size, num_heads * self.head_dim, **kw)
        self.k_proj = Linear(hidden_size, self.num_kv_heads * self.head_dim, **kw)
        self.v_proj = Linear(hidden_size, self.num_kv_heads * self.head_dim, **kw)
        self.o_proj = Linear(num_heads * self.head_dim, hidden_size, **kw)
        self.rotary = RotaryEmbedding(self.head_dim, rope_base, device=device) if rope_base else None

    def new_cache(self, batch: int, max_len: int, dtype=BF16, device=None) -> KVCache:
        return KVCache(batch, max_len, self.num_kv_heads, self.head_dim, dtype,
                       device if device is not None else self.q_proj.weight.device)

    def forward(self, x: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        start = cache.length if cache is not None else 0
        if self.rotary is not None:
            q, k = self.rotary(q, offset=start), self.rotary(k, offset=start)
        if cache is not None:
            k, v = cache.append(k, v)
        o = attention(q, k, v, causal=self.causal, scale=self.scaling)
        return self.o_proj(o.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))


class LinearCrossEntropy(nn.Module):
    """``F.cross_entropy(hidden @ weight.T, labels)`` without the logits (:func:`kittens.linear_cross_entropy`):
    ``forward(hidden, weight, labels)`` (the weight is the caller's, e.g. an LM head's, so tied weights stay
    tied); ``ignore_index``, ``label_smoothing``, ``reduction`` ("mean" or "sum") and ``chunk_rows`` as
    the function takes them."""

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                 chunk_rows: Optional[int] = None):
        super().__init__()
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        self.reduction, self.chunk_rows = reduction, chunk_rows

    def forward(self, hidden: Tensor, weight: Tensor, labels: Tensor) -> Tensor:
        return linear_cross_entropy(hidden, weight, labels, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, reduction=self.reduction,
                                    chunk_rows=self.chunk_rows)
