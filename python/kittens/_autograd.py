"""``kittens.AttentionFunction``, the torch.autograd.Function kittens.attention used before the
``torch.library`` ops (kept for callers that apply it directly; imported only with torch).

The public functions now go through the custom ops of :mod:`kittens.ops` (``torch.ops.kittens.*``),
whose autograd covers every kernel (matmul, attention with any scale, bottom-right causal and the lse's
gradient, layernorm, rotary) and which ``torch.compile(fullgraph=True)`` traces.
"""

import torch

from . import _attention
from ._backward import attention_backward


class AttentionFunction(torch.autograd.Function):
    """Forward: kittens' attention kernel, keeping its output and log-sum-exp. Backward: kittens'
    attention backward kernel (dQ, dK, dV; GQA's dK and dV summed over each group)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse = _attention(q, k, v, causal, scale, None, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = bool(causal), scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, out, grad_out.to(torch.bfloat16), lse, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None
