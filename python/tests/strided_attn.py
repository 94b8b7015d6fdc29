"""What the strided-attention tests share (test_attn_strides_cpu.py on the CPU interpreter,
test_gpu_attn_strides.py on CUDA): q, k, v in the layouts a model hands over, and the check of a
forward and its gradients against float64 autograd by FlashAttention's rule.

Imported by those tests after their skips (torch importable; on CUDA an sm_90a GPU).
"""

import torch
from test_torch_ops import BF, attention_ref, check_rule


def views(rand, kind, b, h, hk, n, nk, d, seed):
    """q, k, v as a model hands them over, drawn by ``rand(*shape, seed=...)``: ``fused`` slices of one
    (B, N, H + 2 H_kv, D) projection; ``hf`` q a transposed (B, N, H, D) buffer with k, v dense
    (B, H_kv, N_kv, D); ``padded`` rows of D + 16 elements (a row stride past the head dim)."""
    if kind == "fused":
        qkv = rand(b, n, h + 2 * hk, d, seed=seed)
        return (qkv[:, :, :h].transpose(1, 2), qkv[:, :, h:h + hk].transpose(1, 2),
                qkv[:, :, h + hk:].transpose(1, 2))
    if kind == "hf":
        return (rand(b, n, h, d, seed=seed).transpose(1, 2), rand(b, hk, nk, d, seed=seed + 1),
                rand(b, hk, nk, d, seed=seed + 2))
    pad = lambda *s: rand(*s[:-1], s[-1] + 16, seed=seed + len(s))[..., : s[-1]]  # noqa: E731
    return pad(b, h, n, d), pad(b, nk, hk, d).transpose(1, 2), pad(b, hk, nk, d)


def check_against_float64(o, grads, q, k, v, do, dlse, causal, bottom_right, return_lse):
    """``o`` and ``grads`` (dq, dk, dv) of ``sum(o · do)`` (plus ``sum(lse · dlse)`` over the finite lse
    with ``return_lse``) against float64 autograd by FlashAttention's rule, the same computation in plain
    bf16 the yardstick."""

    def ref_fn(dtype):
        xs = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out, l = attention_ref(*xs, causal, None, bottom_right)
        total = (out * do.to(dtype)).sum()
        if return_lse:
            total = total + (torch.where(torch.isinf(l), torch.zeros_like(l), l) * dlse.to(dtype)).sum()
        return out.detach(), torch.autograd.grad(total, xs)

    (o64, g64), (o16, g16) = ref_fn(torch.float64), ref_fn(BF)
    check_rule(o, o16, o64, "out")
    for x, y, z, name in zip(grads, g16, g64, "qkv"):
        check_rule(x, y, z, f"d{name}")
