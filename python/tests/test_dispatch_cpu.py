"""The CUDA path's checks without a GPU (``kittens._dispatch``): a call is refused, naming the argument
and the limit, before anything is prepared or launched — on ``meta`` tensors, which carry shapes,
strides and dtypes but no memory, so these run on any machine (CI has no GPU; torch is installed)."""

import pytest
import torch

from kittens import _dispatch

BF = torch.bfloat16


def meta(*shape, dtype=BF):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_attention_limits():
    for d in (32, 96, 320):  # the CPU interpreter takes them; the sm_90a forward takes 64-256
        q = meta(1, 2, 16, d)
        with pytest.raises(ValueError, match="64, 128, 192 or 256"):
            _dispatch.attention(q, q, q, False, False)
    q = meta(1, 2, 16, 64)
    with pytest.raises(ValueError, match="no keys"):
        _dispatch.attention(q, meta(1, 2, 0, 64), meta(1, 2, 0, 64), False, False)
    with pytest.raises(ValueError, match="different devices"):
        _dispatch.attention(q, torch.empty(1, 2, 16, 64, dtype=BF), q, False, False)
    with pytest.raises(TypeError, match="k has dtype"):
        _dispatch.attention(q, meta(1, 2, 16, 64, dtype=torch.float16), q, False, False)
    with pytest.raises(ValueError, match="4-D"):
        _dispatch.attention(meta(2, 16, 64), q, q, False, False)


def test_matmul_limits():
    with pytest.raises(TypeError, match="a has dtype"):
        _dispatch.matmul(meta(8, 8, dtype=torch.float32), meta(8, 8))
    with pytest.raises(ValueError, match=r"a @ b"):
        _dispatch.matmul(meta(8, 16), meta(8, 8))
    with pytest.raises(ValueError, match="b must be a row-major"):
        _dispatch.matmul(meta(8, 16), meta(16, 32)[:, ::2])
    with pytest.raises(ValueError, match="a must be row-major"):
        _dispatch.matmul(meta(16, 8).t(), meta(16, 8))
    with pytest.raises(ValueError, match="different devices"):
        _dispatch.matmul(meta(8, 8), torch.empty(8, 8, dtype=BF))


def test_layernorm_and_rotary_limits():
    x = meta(3, 1000)
    with pytest.raises(ValueError, match=r"weight .* must be \(D,\)"):
        _dispatch.layernorm(x, x, meta(999), meta(1000), 0.0, 0, 0, 1e-5)
    with pytest.raises(ValueError, match="dropout p"):
        _dispatch.layernorm(x, x, meta(1000), meta(1000), 1.0, 0, 0, 1e-5)
    with pytest.raises(ValueError, match="must be contiguous"):
        _dispatch.layernorm(meta(1000, 3).t(), x, meta(1000), meta(1000), 0.0, 0, 0, 1e-5)
    q = meta(1, 2, 16, 64)
    with pytest.raises(ValueError, match=r"cos .* must be \(N, D/2\)"):
        _dispatch.rotary(q, meta(16, 64), meta(16, 32), False)


def test_the_handle_table_is_bounded():
    before = dict(_dispatch._HANDLES)
    try:
        _dispatch._HANDLES.clear()
        for i in range(_dispatch._MAX_KEYS):
            _dispatch._HANDLES[("probe", i)] = (None, (0, ()), None)
        # An empty product is a call of its own: past the bound the table starts over, not grows.
        out = _dispatch.matmul(meta(0, 8), meta(8, 8))
        assert out.shape == (0, 8)
        assert len(_dispatch._HANDLES) == 1
    finally:
        _dispatch._HANDLES.clear()
        _dispatch._HANDLES.update(before)
