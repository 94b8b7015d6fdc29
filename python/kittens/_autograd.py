"""The torch.autograd.Functions behind kittens.attention and kittens.matmul (imported only with torch).

Attention has its backward kernel (``kittens._attention_backward``); matmul has none yet: its backward
raises NotImplementedError, so a training step through it fails loudly instead of producing a gradient
that silently skips the op.
"""

import torch

from . import _attention, _matmul
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


class MatmulFunction(torch.autograd.Function):
    """Forward: kittens' GEMM. Backward: not written yet."""

    @staticmethod
    def forward(ctx, a, b):
        return _matmul(a, b, None)

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError(
            "kittens.matmul has no backward yet; use torch.matmul for training or call kittens.matmul "
            "under torch.no_grad()"
        )
