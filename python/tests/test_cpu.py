"""kittens on CPU arrays (the interpreter) against float64 numpy references, and the error cases.

Inputs are random bf16 values (never zeros) at sizes that are not tile multiples.
"""

import ctypes

import ml_dtypes
import numpy as np
import pytest

import kittens
from kittens import _kittens

BF16 = ml_dtypes.bfloat16


def rand(rng, *shape):
    return rng.uniform(-1.0, 1.0, shape).astype(BF16)


def rel_err(out, ref):
    out = np.asarray(out).astype(np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def attention_ref(q, k, v, causal):
    """softmax(q·kᵀ/√d)·v in float64 on (B, H, N, D) arrays, query head h reading kv head h // group."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    b, h, n, d = q.shape
    group = h // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v)


# ---------------------------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("m,n,k", [(37, 70, 45), (1, 8, 3), (130, 17, 260), (257, 300, 64)])
def test_matmul_matches_float64(m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    a, w = rand(rng, m, k), rand(rng, n, k)
    c = kittens.matmul(a, w.T)
    assert isinstance(c, np.ndarray) and c.dtype == BF16 and c.shape == (m, n)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    assert rel_err(c, ref) < 1e-2
    # fp32 accumulation, one rounding to bf16: each entry within a bf16 step (2^-8 relative) of the
    # exact value plus the f32 sum's error, far below 2e-2 of the output's scale.
    assert np.max(np.abs(c.astype(np.float64) - ref)) <= 2e-2 * np.max(np.abs(ref))


def test_matmul_out_writes_into_the_given_array():
    rng = np.random.default_rng(1)
    a, w = rand(rng, 33, 40), rand(rng, 24, 40)
    out = np.full((33, 24), np.nan, dtype=BF16)
    r = kittens.matmul(a, w.T, out=out)
    assert r is out
    assert np.array_equal(out.view(np.uint16), kittens.matmul(a, w.T).view(np.uint16))
    assert rel_err(out, a.astype(np.float64) @ w.astype(np.float64).T) < 1e-2


def test_matmul_empty_sum_is_zero():
    a, w = np.zeros((3, 0), dtype=BF16), np.zeros((5, 0), dtype=BF16)
    c = kittens.matmul(a, w.T)
    assert c.shape == (3, 5) and not np.any(c.astype(np.float32))


def test_matmul_refuses_wrong_dtype():
    rng = np.random.default_rng(2)
    a, w = rand(rng, 8, 8), rand(rng, 8, 8)
    with pytest.raises(TypeError, match="float32"):
        kittens.matmul(a.astype(np.float32), w.T)
    with pytest.raises(TypeError, match="kittens takes"):
        kittens.matmul([[1.0]], w.T)


def test_matmul_reads_b_in_either_layout():
    """b row-major (K, N) runs the same program reading B N-major, no copy: both layouts agree with
    float64 by the GEMM tolerance."""
    rng = np.random.default_rng(5)
    a, w = rand(rng, 40, 72), rand(rng, 136, 72)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    for b in (w.T, np.ascontiguousarray(w.T)):
        c = kittens.matmul(a, b).astype(np.float64)
        err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
        assert 1e-4 < err < 1e-2, err


def test_matmul_refuses_layouts_that_need_a_copy():
    rng = np.random.default_rng(3)
    a, w = rand(rng, 16, 24), rand(rng, 8, 24)
    with pytest.raises(ValueError, match=r"b must be a row-major \(K, N\) array"):
        kittens.matmul(a, rand(rng, 24, 16)[:, ::2])  # strided columns
    with pytest.raises(ValueError, match="a must be row-major"):
        kittens.matmul(np.ascontiguousarray(a.T).T, w.T)  # column-major a
    with pytest.raises(ValueError, match="a must be row-major"):
        kittens.matmul(rand(rng, 16, 48)[:, ::2], w.T)  # strided slice


def test_matmul_refuses_mismatched_shapes():
    rng = np.random.default_rng(4)
    a, w = rand(rng, 16, 24), rand(rng, 8, 20)
    with pytest.raises(ValueError, match="b needs K = 24 rows"):
        kittens.matmul(a, w.T)
    with pytest.raises(ValueError, match="2-D"):
        kittens.matmul(rand(rng, 2, 3, 4), w.T)
    with pytest.raises(ValueError, match=r"out has shape \[8, 8\]"):
        kittens.matmul(a, rand(rng, 8, 24).T, out=np.empty((8, 8), dtype=BF16))


def test_matmul_refuses_bad_outputs():
    rng = np.random.default_rng(5)
    a, w = rand(rng, 8, 8), rand(rng, 8, 8)
    with pytest.raises(ValueError, match="overlaps a"):
        kittens.matmul(a, w.T, out=a)
    ro = np.empty((8, 8), dtype=BF16)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kittens.matmul(a, w.T, out=ro)


# ------------------------------------------------------------------------------------------- attention


def bshd(rng, b, h, n, d):
    """A (B, N, H, D) buffer seen as (B, H, N, D), as projections produce it."""
    return rand(rng, b, n, h, d).transpose(0, 2, 1, 3)


@pytest.mark.parametrize(
    "b,h,hk,n,d,causal,layout",
    [
        (1, 2, 2, 45, 64, False, "bhsd"),
        (2, 4, 2, 45, 64, True, "bhsd"),
        (1, 4, 1, 70, 32, True, "bshd"),
        (2, 2, 2, 33, 128, False, "bshd"),
        (1, 3, 3, 1, 64, True, "bhsd"),
    ],
)
def test_attention_matches_float64(b, h, hk, n, d, causal, layout):
    rng = np.random.default_rng(b * 100 + h * 10 + n + d)
    make = (lambda *s: rand(rng, *s)) if layout == "bhsd" else (lambda *s: bshd(rng, *s))
    q, k, v = make(b, h, n, d), make(b, hk, n, d), make(b, hk, n, d)
    o = kittens.attention(q, k, v, causal=causal)
    assert o.dtype == BF16 and o.shape == (b, h, n, d)
    assert o.strides == q.strides  # the output takes q's memory order
    assert rel_err(o, attention_ref(q, k, v, causal)) < 1e-2


def test_attention_default_scale_is_accepted_and_out_is_written():
    rng = np.random.default_rng(6)
    q, k, v = rand(rng, 1, 2, 20, 64), rand(rng, 1, 2, 20, 64), rand(rng, 1, 2, 20, 64)
    out = np.full(q.shape, np.nan, dtype=BF16)
    r = kittens.attention(q, k, v, scale=1 / 8, out=out)
    assert r is out
    assert rel_err(out, attention_ref(q, k, v, False)) < 1e-2


def test_attention_refuses_what_the_kernel_does_not_compute():
    rng = np.random.default_rng(7)
    q, k, v = rand(rng, 1, 2, 16, 64), rand(rng, 1, 2, 16, 64), rand(rng, 1, 2, 16, 64)
    with pytest.raises(ValueError, match="scale=0.5 is not supported"):
        kittens.attention(q, k, v, scale=0.5)
    with pytest.raises(ValueError, match="head dim 48 is not supported"):
        kittens.attention(rand(rng, 1, 2, 16, 48), rand(rng, 1, 2, 16, 48), rand(rng, 1, 2, 16, 48))
    with pytest.raises(ValueError, match="as many keys as queries"):
        kittens.attention(q, rand(rng, 1, 2, 8, 64), rand(rng, 1, 2, 8, 64))
    with pytest.raises(ValueError, match="GQA needs H divisible by H_kv"):
        kittens.attention(rand(rng, 1, 3, 16, 64), k, v)
    with pytest.raises(ValueError, match="dense in one layout"):
        kittens.attention(q, bshd(rng, 1, 2, 16, 64), v)  # mixed memory orders
    with pytest.raises(ValueError, match="k has shape"):
        kittens.attention(q, k, rand(rng, 1, 1, 16, 64))
    with pytest.raises(TypeError, match="float32"):
        kittens.attention(q.astype(np.float32), k, v)
    with pytest.raises(ValueError, match="4-D"):
        kittens.attention(rand(rng, 2, 16, 64), k, v)


# --------------------------------------------------------------------------- DLPack and device errors


class Bf16Producer:
    """A stand-in for a framework that exports bfloat16 through DLPack (numpy cannot: ml_dtypes' bfloat16
    is not a DLPack dtype): numpy exports the raw uint16 data, and the capsule's dtype is set to DLPack's
    bfloat16 (code 4, 16 bits) before it is handed out."""

    def __init__(self, a):
        self.bits = a.view(np.uint16)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        cap = self.bits.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        from kittens._arrays import _DLTensor

        _DLTensor.from_address(get(cap, b"dltensor")).dtype.code = 4
        return cap


def test_dlpack_inputs_run_and_come_back_as_numpy():
    rng = np.random.default_rng(8)
    a, w = rand(rng, 20, 24), rand(rng, 12, 24)
    c = kittens.matmul(Bf16Producer(a), Bf16Producer(w.T))  # DLPack carries b's (1, K) strides
    assert rel_err(c, a.astype(np.float64) @ w.astype(np.float64).T) < 1e-2
    q = rand(rng, 1, 2, 30, 32)
    o = kittens.attention(Bf16Producer(q), Bf16Producer(q), Bf16Producer(q))
    assert isinstance(o, np.ndarray) and rel_err(o, attention_ref(q, q, q, False)) < 1e-2


def test_dlpack_dtype_is_checked():
    a = np.ones((4, 8), dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        kittens.matmul(a, a.T)  # numpy float32: read by numpy, refused by dtype
    with pytest.raises(TypeError, match="float32"):
        kittens.matmul(_Float32Producer(a), _Float32Producer(np.ones((8, 8), np.float32)))


class _Float32Producer:
    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


def view_args(shape, device="cpu", ptr=0x10000):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return (ptr, list(shape), list(reversed(strides)), "bfloat16", device, 0)


def test_mixed_devices_are_refused():
    with pytest.raises(ValueError, match="different devices"):
        _kittens.matmul(
            view_args([8, 8], "cuda", 0x10000),
            (0x20000, [8, 8], [1, 8], "bfloat16", "cpu", 0),
            view_args([8, 8], "cuda", 0x30000),
            0,
        )


def _have_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_cuda_arrays_without_a_driver_are_a_runtime_error():
    a = view_args([64, 64], "cuda", 0x10000)
    b = (0x20000, [64, 64], [1, 64], "bfloat16", "cuda", 0)
    c = view_args([64, 64], "cuda", 0x30000)
    if _have_cuda_driver():
        # A driver: these host-range addresses are refused as not being device memory.
        with pytest.raises((ValueError, RuntimeError)):
            _kittens.matmul(a, b, c, 0)
    else:
        with pytest.raises(RuntimeError, match="no NVIDIA driver"):
            _kittens.matmul(a, b, c, 0)


def test_cuda_attention_goes_to_the_driver_not_to_the_cpu():
    """CUDA attention is launched on the GPU or refused, never run on the CPU: host-range addresses are
    refused as not device memory (with a driver) or for want of a driver."""
    q, k, v, o = (view_args([1, 2, 16, 64], "cuda", p) for p in (0x10000, 0x20000, 0x30000, 0x40000))
    if _have_cuda_driver():
        with pytest.raises((ValueError, RuntimeError)):
            _kittens.attention(q, k, v, o, False, None, 0)
    else:
        with pytest.raises(RuntimeError, match="no NVIDIA driver"):
            _kittens.attention(q, k, v, o, False, None, 0)


def test_cuda_attention_limits_are_value_errors_before_any_driver_call():
    def four(shape, kv_shape=None):
        kv = kv_shape or shape
        return (
            view_args(shape, "cuda", 0x10000),
            view_args(kv, "cuda", 0x20000),
            view_args(kv, "cuda", 0x30000),
            view_args(shape, "cuda", 0x40000),
        )

    # Head dims the CPU interpreter takes but the Hopper kernel does not.
    for d in (32, 96, 256):
        with pytest.raises(ValueError, match="64 or 128"):
            _kittens.attention(*four([1, 2, 16, d]), False, None, 0)
    with pytest.raises(ValueError, match="default softmax scale"):
        _kittens.attention(*four([1, 2, 16, 64]), False, 0.5, 0)
    with pytest.raises(ValueError, match="as many keys as queries"):
        _kittens.attention(*four([1, 2, 16, 64], [1, 2, 32, 64]), False, None, 0)


def test_cuda_dlpack_without_torch_is_a_runtime_error():
    class CudaThing:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("must not be read")

    import sys

    if "torch" in sys.modules:
        pytest.skip("torch is imported: CUDA DLPack arrays go through torch here")
    try:
        import torch  # noqa: F401

        pytest.skip("torch is installed: CUDA DLPack arrays go through torch here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="needs torch"):
        kittens.matmul(CudaThing(), CudaThing())


def test_import_needs_no_gpu_and_verbose_toggles():
    kittens.set_verbose(True)
    assert _kittens.verbose()
    kittens.set_verbose(False)
    assert not _kittens.verbose()
    assert kittens.__version__
