# Shared by the bench/attn_*_check.py scripts (imported from the scripts' own folder): the relative
# error they judge by, and plain attention in a given dtype — float64 is the reference, bfloat16
# torch's own bf16 computation, whose error against float64 sets the FlashAttention rule's bound.
import torch


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def reference(q, k, v, causal_align, dtype):
    """Attention of (B, H, N, D) q and (B, H_kv, N_kv, D) k, v in `dtype`; `causal_align` is None (no
    mask), "top_left" or "bottom_right"."""
    g = q.shape[1] // k.shape[1]
    q, k, v = (t.to(dtype) for t in (q, k, v))
    k, v = (t.repeat_interleave(g, dim=1) for t in (k, v))
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal_align is not None:
        nq, nk = q.shape[2], k.shape[2]
        off = 0 if causal_align == "top_left" else nk - nq
        keep = torch.arange(nk, device=q.device)[None, :] <= torch.arange(nq, device=q.device)[:, None] + off
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float() if dtype == torch.bfloat16 else s, dim=-1).to(dtype)
    return p @ v
