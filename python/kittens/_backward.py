"""The attention backward on torch tensors (``kittens._attention_backward``), and the forward's
log-sum-exp for callers whose forward does not return one.

CUDA tensors run ``attn_bwd``'s Hopper launches on the current torch stream, in one of two forms:

- ``"two"``: the query blocks (dQ, and ``D = rowsum(dO * O)`` in float32, the backward's
  preprocessing, FlashAttention-2 §3.2), then the key blocks (dK, dV); deterministic, no workspace;
- ``"atomic"`` (FlashAttention-3 §3.3): D and a zeroed float32 dQ accumulator, the key blocks adding
  dQ into it beside dK and dV (each warpgroup's 64 x 64 share staged in shared memory and added by
  one TMA reduction in the L2), the conversion to bfloat16: five matrix products per pair of blocks
  instead of seven; the accumulator (4 bytes per element of Q) is the runtime's stream-ordered
  scratch, and dQ's last bits vary from run to run with the order of the f32 additions.

At head dims 192 and 256 both forms run ``attn_bwd``'s 64-key blocks; ``"two"``'s query blocks stream 64
(192) or 32 (256) keys per step there, and ``"auto"`` takes ``"atomic"``.
``"auto"`` (the default) is ``"atomic"`` at head dim 128, where it measured 1.05-1.07x the two
launches on the H100 (docs/performance.md, "attn_bwd"), and at head dims 32 and 64, where the key blocks
take 128-query steps and warpgroup g adds dQ for half g's queries over all 128 keys (faster than the two
launches there, docs/performance.md); ``"two"`` at head dim 96. The
form is the ``form=`` argument, else the environment variable ``KITTENS_ATTN_BWD`` (read once), else
``"auto"``; ``form="two"`` is the deterministic choice (``kittens.attention(..., deterministic=True)`` and
``flash_attn_func(..., deterministic=True)`` take it). Both forms are the registry's ``attn_bwd``
launches (variants ``dq`` and ``atomic``) through the one prepared-call path (``kittens._dispatch``).
CPU tensors run the same gradients on the CPU interpreter (``attn_bwd``'s one-launch program, which
computes D itself) whatever the form.
"""

import math
import os
import sys

from . import _kittens


def _torch():
    return sys.modules["torch"]


def _check(q, k, v, out, grad_out, lse, scale):
    torch = _torch()
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("grad_out", grad_out)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 or t.dim() != 4:
            raise ValueError(f"kittens._attention_backward: {name} must be a 4-D bfloat16 torch tensor")
    b, h, n, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    if k.shape != (b, hk, nk, d) or v.shape != k.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must both be (B, H_kv, N_kv, D) = "
                         f"({b}, H_kv, N_kv, {d})")
    if out.shape != q.shape or grad_out.shape != q.shape:
        raise ValueError(f"out {tuple(out.shape)} and grad_out {tuple(grad_out.shape)} must be q's shape "
                         f"{tuple(q.shape)}")
    if hk == 0 or h % hk != 0:
        raise ValueError(f"H_kv = {hk} must divide H = {h} (grouped-query heads)")
    if not isinstance(lse, torch.Tensor) or lse.shape != (b, h, n):
        raise ValueError(f"lse must be a float32 tensor of shape (B, H, N) = ({b}, {h}, {n})")
    devs = {t.device for t in (q, k, v, out, grad_out, lse)}
    if len(devs) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(str(x) for x in devs)}")
    if scale is not None and not (math.isfinite(float(scale)) and float(scale) > 0):
        raise ValueError(f"scale = {scale}: the softmax scale must be finite and positive")
    return b, h, hk, n, nk, d


FORMS = ("auto", "two", "atomic")
# Head dims whose CUDA backward is the atomic form only (``attn_bwd``'s 64-key blocks, no query blocks).
WIDE = (192, 256)
_env_form = None


def _form(form, dim, softcap=None):
    """The launch form for head dim ``dim``: ``form``, else ``KITTENS_ATTN_BWD`` (read on first use), else
    ``"auto"``; ``"auto"`` resolves to ``"atomic"`` at head dim 128 without a soft cap (the atomic
    key blocks refuse one there: too few registers), at head dims 32 and 64 and at 192 and 256, ``"two"``
    otherwise (the deterministic two launches take every head dim)."""
    global _env_form
    if form is None:
        if _env_form is None:
            _env_form = os.environ.get("KITTENS_ATTN_BWD", "").strip().lower() or "auto"
        form = _env_form
        where = f"KITTENS_ATTN_BWD = {form!r}"
    else:
        where = f"form = {form!r}"
    if form not in FORMS:
        raise ValueError(f"kittens._attention_backward: {where}; the form is 'auto', 'two' or 'atomic'")
    if form == "auto":
        return "atomic" if (dim == 128 and softcap is None) or dim in WIDE or dim <= 64 else "two"
    return form


def attention_backward(q, k, v, out, grad_out, lse, causal=False, scale=None, form=None, *, bottom_right=False,
                       softcap=None, window=None, dlse=None, alibi=None):
    """Gradients ``(dq, dk, dv)`` of ``out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)``
    for the output gradient ``grad_out``: bfloat16 q, out, grad_out (B, H, N, D) and k, v
    (B, H_kv, N_kv, D), dK and dV summed over each KV head's query heads; ``lse`` is float32 (B, H, N),
    the natural log of each query's sum of ``exp(scale * q·k)`` over its unmasked keys (what
    ``kittens.attention(..., return_lse=True)`` returns, but ``+inf`` for a query that keeps no key).
    ``causal`` masks keys after each query, top-left, or bottom-right with ``bottom_right`` (query i
    keeps keys j <= i + N_kv - N, the forward's ``causal_align="bottom_right"``). Any finite positive ``scale`` (default ``1/sqrt(D)``), ``softcap`` and ``window`` as the forward took them. The gradients come back in q's (and k's) memory
    order: (B, H, N, D) or (B, N, H, D) seen through ``.transpose(1, 2)``, else (B, H, N, D); on CUDA
    every input is read in place in any strides with the head dim contiguous. On CUDA the head dim must be 32, 64, 96, 128, 192 or 256. ``form``: ``"auto"``, ``"two"`` or
    ``"atomic"`` launches (module docstring); ``None`` takes ``KITTENS_ATTN_BWD``, else ``"auto"``.
    ``dlse``: the gradient of the log-sum-exp (float32 (B, H, N)) when it was an output of the forward
    with a gradient; the kernels fold it into their preprocessing, ``D = rowsum(dO∘O) − dlse``.
    ``alibi``: ALiBi's slopes as the forward took them (float32, (H,) or (B, H), ``kittens._alibi``).
    """
    b, h, hk, n, nk, d = _check(q, k, v, out, grad_out, lse, scale)
    atomic = _form(form, d, softcap) == "atomic"
    opts = (None if scale is None else float(scale), None if softcap is None else float(softcap),
            None if window is None else (int(window[0]), int(window[1])))
    if dlse is not None and (not isinstance(dlse, _torch().Tensor) or tuple(dlse.shape) != (b, h, n)
                             or dlse.device != q.device):
        raise ValueError(f"kittens._attention_backward: dlse must be a tensor of shape (B, H, N) = ({b}, {h}, {n}) "
                         f"on {q.device}")
    if dlse is not None:
        dlse = dlse.to(_torch().float32).contiguous()
    from ._alibi import slopes

    alibi = slopes(alibi, b, h, q.device)
    if q.device.type == "cuda":
        return _cuda(q, k, v, out, grad_out, lse, bool(causal), (b, h, hk, n, nk, d), atomic, bool(bottom_right),
                     opts, dlse, alibi)
    if q.device.type == "cpu":
        return _cpu(q, k, v, out, grad_out, lse, bool(causal), (b, h, hk, n, nk, d), bool(bottom_right), opts,
                    dlse, alibi)
    raise ValueError(f"kittens._attention_backward runs on CPU and CUDA tensors, got {q.device}")


def _cuda(q, k, v, out, grad_out, lse, causal, shape, atomic, bottom_right=False, opts=(None, None, None),
          dlse=None, alibi=None):
    """The CUDA launches through the one prepared-call path (``kittens._dispatch``): every tensor read in
    place in its own strides (the head dim contiguous)."""
    from . import _dispatch

    lse32 = lse.to(_torch().float32).contiguous()
    named = tuple((n, x) for n, x in zip(("scale", "softcap", "window"), opts) if x is not None)
    return _dispatch.attention_backward(q, k, v, out, grad_out, lse32, causal, bool(bottom_right and causal), atomic,
                                        named, dlse=dlse, alibi=alibi)


def _cpu(q, k, v, out, grad_out, lse, causal, shape, bottom_right=False, opts=(None, None, None), dlse=None,
         alibi=None):
    torch = _torch()
    b, h, hk, n, nk, d = shape
    f32 = lambda t: t.detach().to(torch.float32).contiguous().numpy().tobytes()
    arrays = [f32(q), f32(k), f32(v), f32(out), f32(grad_out), f32(lse)]
    dq, dk, dv = _kittens.attention_backward_cpu(arrays, shape, causal, bool(bottom_right and causal), *opts,
                                                 dlse=None if dlse is None else f32(dlse),
                                                 alibi=None if alibi is None else alibi.reshape(-1).tolist())
    as_t = lambda raw, like: torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(like.shape).to(
        torch.bfloat16)
    return as_t(dq, q), as_t(dk, k), as_t(dv, v)


def lse_reference(q, k, causal=False):
    """The forward's log-sum-exp computed with torch in float32, one batch at a time (for a forward
    that does not return it): ``logsumexp(q·kᵀ/sqrt(D))`` over each query's unmasked keys."""
    torch = _torch()
    b, h, n, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    out = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    for i in range(b):
        kk = k[i].float().repeat_interleave(h // hk, dim=0)
        s = torch.matmul(q[i].float(), kk.transpose(-1, -2)) / math.sqrt(d)
        if causal:
            keep = torch.ones(n, nk, dtype=torch.bool, device=q.device).tril()
            s = s.masked_fill(~keep, float("-inf"))
        out[i] = torch.logsumexp(s, dim=-1)
    return out
