"""ALiBi's slopes (FlashAttention's ``alibi_slopes``) as the attention kernels read them.

FlashAttention's rule (its ``flash_attn_func`` docstring and test references): one float32 slope per
head, ``(nheads,)`` or ``(batch, nheads)``; query ``i`` and key ``j`` get ``-slope * |i + N_k - N_q - j|``
added to their scaled logit (after a soft cap). The kernels read the slopes from a float32 ``(B, H)``
tensor (``kittens_kernels::attn::score::Alibi``), so any values run without recompiling; a ``(H,)`` tensor
is broadcast to it here (one small copy on the slopes' device).

Checks, each naming ``alibi_slopes``: a torch tensor, float32, shape ``(H,)`` or ``(B, H)``, on q's device;
non-finite slopes are refused where the slopes are on the CPU (the interpreter's check). On CUDA that check
would read the device (a synchronisation on every call, and a graph break under ``torch.compile``): it is
skipped there, and a NaN or infinite slope gives NaN rows as FlashAttention's kernel does.
"""

from typing import Any, Optional


def check(alibi_slopes: Any, batch: int, heads: int, device) -> None:
    """The checks that read no slope value (type, dtype, shape, device): what a fake (``torch.compile``'s
    trace) can check too."""
    import torch

    if not isinstance(alibi_slopes, torch.Tensor):
        raise TypeError(f"alibi_slopes must be a float32 torch tensor of shape (nheads,) or (batch, nheads), "
                        f"got {type(alibi_slopes).__name__}")
    s = alibi_slopes
    if s.dtype != torch.float32:
        raise ValueError(f"alibi_slopes must be float32 (FlashAttention's dtype), got {s.dtype}")
    if tuple(s.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes must have shape (nheads,) = ({heads},) or (batch, nheads) = "
                         f"({batch}, {heads}), got {tuple(s.shape)}")
    if s.device != device:
        raise ValueError(f"alibi_slopes must be on q's device {device}, got {s.device}")


def slopes(alibi_slopes: Any, batch: int, heads: int, device) -> Optional[Any]:
    """``alibi_slopes`` as a contiguous float32 ``(batch, heads)`` tensor on ``device`` (``None``: none)."""
    if alibi_slopes is None:
        return None
    import torch

    check(alibi_slopes, batch, heads, device)
    s = alibi_slopes
    if s.device.type == "cpu" and not bool(torch.isfinite(s).all()):
        bad = s[~torch.isfinite(s)][0].item()
        raise ValueError(f"alibi_slopes: every slope must be finite, got {bad}")
    return s.detach().expand(batch, heads).contiguous()
