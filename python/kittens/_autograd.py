"""The torch.autograd.Functions behind kittens.attention and kittens.matmul (imported only with torch).

Neither has a backward kernel yet: backward raises NotImplementedError, so a training step through them
fails loudly instead of producing a gradient that silently skips these ops.
"""

import torch

from . import _attention, _matmul


class AttentionFunction(torch.autograd.Function):
    """Forward: kittens' attention kernel. Backward: not written yet."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        return _attention(q, k, v, causal, scale, None)

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError(
            "kittens.attention has no backward kernel yet (attention backward is not written); train "
            "with torch.nn.functional.scaled_dot_product_attention, or call kittens.attention under "
            "torch.no_grad()"
        )


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
