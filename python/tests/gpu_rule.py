"""What the GPU tests share: FlashAttention's test rule and the random bf16 inputs it is applied to.

Imported by test_gpu_*.py after their module-level skip (so only where torch and an sm_90a GPU exist).
"""

import torch

BF = torch.bfloat16


def rule(ours, ref64, plain, floor=1e-3):
    """FlashAttention's rule: our error against float64 at most twice the plain bf16 computation's, plus
    a floor."""
    e_ours = (ours.double() - ref64).abs().max().item()
    e_plain = (plain.double() - ref64).abs().max().item()
    assert e_ours <= 2 * e_plain + floor, (e_ours, e_plain)


def rand(*shape, scale=1.0, seed=0):
    """Uniform in [-scale, scale), drawn on the CPU from `seed` (the same values on every device), as bf16
    on the GPU."""
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).to(BF).cuda()
