"""Inputs the CPU path once mishandled, each now refused with a clear error or answered correctly:
empty problems, non-finite and coerced arguments, outputs allocated before the layout check, the run
budget, Ctrl-C during a long run, and read-only DLPack outputs. (Kept apart from test_cpu.py, which is
near the project's file-size limit.)"""

import _thread
import ctypes
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import kittens

BF16 = ml_dtypes.bfloat16


def rand(rng, *shape):
    return rng.uniform(-1.0, 1.0, shape).astype(BF16)


def zero_strided(*shape):
    """A bf16 array of `shape` over one element (all strides 0): no memory to speak of, any size."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=BF16), shape=shape, strides=(0,) * len(shape))


# ------------------------------------------------------------------------------------ empty problems


def test_empty_matmuls_give_empty_or_zero_results_whatever_the_strides():
    rng = np.random.default_rng(0)
    # numpy's own empty arrays, and empty arrays with zero strides (as numpy makes some of them).
    for a, b, shape in [
        (np.empty((0, 8), BF16), rand(rng, 8, 5), (0, 5)),
        (zero_strided(0, 8), rand(rng, 8, 5), (0, 5)),
        (rand(rng, 3, 8), zero_strided(8, 0), (3, 0)),
        (zero_strided(0, 0), zero_strided(0, 0), (0, 0)),
    ]:
        c = kittens.matmul(a, b)
        assert c.shape == shape and c.dtype == BF16
    c = kittens.matmul(np.empty((4, 0), BF16), np.empty((0, 6), BF16))  # K = 0: an empty sum
    assert c.shape == (4, 6) and not np.any(c.astype(np.float32))
    # An empty output of the package's own making passed back as out=.
    out = kittens.matmul(np.empty((0, 8), BF16), rand(rng, 8, 5))
    assert kittens.matmul(np.empty((0, 8), BF16), rand(rng, 8, 5), out=out) is out


def test_empty_attention_layernorm_rotary():
    rng = np.random.default_rng(1)
    q = np.empty((0, 2, 5, 32), BF16)  # B = 0
    assert kittens.attention(q, q, q).shape == (0, 2, 5, 32)
    q = zero_strided(1, 2, 0, 32)  # N = 0
    assert kittens.attention(q, q, q).shape == (1, 2, 0, 32)
    x = np.empty((0, 768), BF16)  # rows = 0
    w = rand(rng, 768)
    y, h = kittens.layernorm(x, x, w, w)
    assert y.shape == h.shape == (0, 768)
    q = np.empty((0, 2, 4, 16), BF16)
    assert kittens.rotary(q).shape == (0, 2, 4, 16)


# ------------------------------------------------------------------------ coerced or ignored arguments


def test_nan_and_wrong_scales_are_refused():
    q = rand(np.random.default_rng(2), 1, 1, 4, 32)
    for s in (float("nan"), float("inf"), 0.0, -0.5):
        with pytest.raises(ValueError, match="scale"):
            kittens.attention(q, q, q, scale=s)
    kittens.attention(q, q, q, scale=1 / np.sqrt(32))  # the default scale, given explicitly
    kittens.attention(q, q, q, scale=0.5)  # any finite positive scale: a constant of the kernel


def test_bottom_right_alignment_needs_a_causal_mask():
    q = rand(np.random.default_rng(3), 1, 1, 4, 32)
    with pytest.raises(ValueError, match="causal=True"):
        kittens.attention(q, q, q, causal=False, causal_align="bottom_right")


def test_layernorm_seed_and_offset_are_exact_64_bit_integers():
    rng = np.random.default_rng(4)
    x, w = rand(rng, 2, 768), rand(rng, 768)
    for bad, err in [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), (True, TypeError)]:
        with pytest.raises(err, match="seed"):
            kittens.layernorm(x, x, w, w, p=0.1, seed=bad)
    with pytest.raises(ValueError, match="offset"):
        kittens.layernorm(x, x, w, w, p=0.1, offset=-5)
    # The largest seed and offset are taken as given, not wrapped: different masks from 0's.
    a = kittens.layernorm(x, x, w, w, p=0.5, seed=2**64 - 1, offset=2**64 - 1)[1]
    b = kittens.layernorm(x, x, w, w, p=0.5, seed=0, offset=0)[1]
    assert not np.array_equal(a.astype(np.float32), b.astype(np.float32))
    for p in (float("nan"), -0.1, 1.0):
        with pytest.raises(ValueError, match="p"):
            kittens.layernorm(x, x, w, w, p=p)
    with pytest.raises(ValueError, match="eps"):
        kittens.layernorm(x, x, w, w, eps=float("nan"))


def test_rotary_sizes_and_flags_are_not_coerced():
    with pytest.raises(TypeError, match="seq"):
        kittens.rotary_tables(3.7, 64)
    with pytest.raises(TypeError, match="dim"):
        kittens.rotary_tables(4, 64.0)
    cos, sin = kittens.rotary_tables(np.int64(4), 64)  # numpy integers are integers
    assert cos.shape == (4, 32)
    q = rand(np.random.default_rng(5), 1, 1, 4, 64)
    with pytest.raises(TypeError, match="interleaved"):
        kittens.rotary(q, interleaved="no")
    with pytest.raises(TypeError, match="interleaved"):
        kittens.rotary(q, cos, sin, interleaved=1)


# -------------------------------------------------------------------- checks before allocations


def test_layouts_are_refused_before_the_output_is_allocated():
    # (2^40, 8) bf16 at zero strides: a 16 TiB output if allocated first; refused by its layout.
    a = zero_strided(1 << 40, 8)
    b = rand(np.random.default_rng(6), 8, 4)
    with pytest.raises(ValueError, match="row-major"):
        kittens.matmul(a, b)
    q = zero_strided(1, 1 << 20, 1 << 10, 64)
    with pytest.raises(ValueError, match="head dim"):  # q's strides, named, before any output exists
        kittens.attention(q, q, q)
    x = zero_strided(1 << 30, 768)
    w = rand(np.random.default_rng(7), 768)
    with pytest.raises(ValueError, match="contiguous"):
        kittens.layernorm(x, x, w, w)
    with pytest.raises(ValueError, match="dense"):
        kittens.rotary(q)  # the 2^10 x 32 tables are never built: q is refused first


# ----------------------------------------------------------------------- budget and interrupts


def test_the_cpu_path_takes_the_clis_work_budget():
    # Over the interpreter's 2^34 multiply-adds (as `kittens run` refuses them), refused at once
    # instead of running for an hour. np.zeros is calloc'd: the pages are never touched,
    # because the budget is checked before the arrays are read.
    a = np.zeros((4096, 4096), BF16)  # 4096^3 = 2^36
    t = time.perf_counter()
    with pytest.raises(ValueError, match=r"interpreter work .*\(2\^34"):
        kittens.matmul(a, a.T)
    with pytest.raises(ValueError, match=r"interpreter work .*\(2\^34"):
        q = np.zeros((1, 8, 16384, 128), BF16)
        kittens.attention(q, q, q)
    # 16384^3 is over the host-memory budget too (13 GiB of tensors with the reference): refused.
    a = np.zeros((16384, 16384), BF16)
    with pytest.raises(ValueError, match="over the run's limit"):
        kittens.matmul(a, a.T)
    assert time.perf_counter() - t < 30


def test_ctrl_c_interrupts_a_long_cpu_run():
    rng = np.random.default_rng(9)
    # 2048³: several seconds on the interpreter (1024³ now takes ~0.6 s, which raced the 0.5 s timer)
    a, b = rand(rng, 2048, 2048), rand(rng, 2048, 2048)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    t = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            kittens.matmul(a, b)
    finally:
        timer.cancel()
    # Seen within a block's time (well under the whole run), not when the run ends.
    assert time.perf_counter() - t < 5.0
    # The module is still usable afterwards.
    c = kittens.matmul(np.ascontiguousarray(a[:8, :16]), np.ascontiguousarray(b[:16, :8]))
    assert c.shape == (8, 8)


# ------------------------------------------------------------------------------ DLPack outputs


class _VersionedBf16:
    """A DLPack 1.0 producer of bfloat16 (numpy's uint16 capsule relabelled), read-only or not."""

    def __init__(self, a, writable):
        self.bits = a.view(np.uint16)
        self.bits.flags.writeable = writable

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None, **kw):
        from kittens._arrays import _DLManagedTensorVersioned, _DLTensor

        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        if max_version is None:
            cap = self.bits.__dlpack__()
            _DLTensor.from_address(get(cap, b"dltensor")).dtype.code = 4
            return cap
        cap = self.bits.__dlpack__(max_version=max_version)
        _DLManagedTensorVersioned.from_address(get(cap, b"dltensor_versioned")).dl_tensor.dtype.code = 4
        return cap


class _UnversionedOnly:
    """A producer that speaks only the unversioned protocol (says nothing about writability)."""

    def __init__(self, a):
        self.inner = _VersionedBf16(a, True)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__()


def test_dlpack_outputs_must_say_they_are_writable():
    rng = np.random.default_rng(10)
    a, b = rand(rng, 4, 8), rand(rng, 8, 3)
    ro = np.zeros((4, 3), BF16)
    with pytest.raises(ValueError, match="read-only"):
        kittens.matmul(a, b, out=_VersionedBf16(ro, writable=False))
    assert not np.any(ro.astype(np.float32)), "nothing written"
    with pytest.raises(ValueError, match="may be written"):
        kittens.matmul(a, b, out=_UnversionedOnly(np.zeros((4, 3), BF16)))
    out = np.zeros((4, 3), BF16)
    kittens.matmul(a, b, out=_VersionedBf16(out, writable=True))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(out.astype(np.float64) - ref)) <= 2e-2 * np.max(np.abs(ref))
