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


def test_matmul_reads_transposed_and_sliced_operands_and_refuses_the_rest():
    """a column-major or a row slice of a wider matrix is read in place (leading-dimension strides);
    strides with neither dimension contiguous are refused by name."""
    rng = np.random.default_rng(3)
    a, w = rand(rng, 16, 24), rand(rng, 8, 24)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    wide = rand(rng, 16, 40)
    wide[:, 5:29] = a
    for a_view in (np.ascontiguousarray(a.T).T, wide[:, 5:29]):
        c = kittens.matmul(a_view, w.T).astype(np.float64)
        err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
        assert 1e-4 < err < 1e-2, err
    with pytest.raises(ValueError, match=r"b must have one dimension contiguous"):
        kittens.matmul(a, rand(rng, 24, 16)[:, ::2])  # strided columns
    with pytest.raises(ValueError, match="a must have one dimension contiguous"):
        kittens.matmul(rand(rng, 16, 48)[:, ::2], w.T)  # strided columns


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
    with pytest.raises(ValueError, match="scale.*-0.5"):
        kittens.attention(q, k, v, scale=-0.5)
    with pytest.raises(ValueError, match="softcap"):
        kittens.attention(q, k, v, softcap=0.0)
    with pytest.raises(ValueError, match="window"):
        kittens.attention(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match="head dim 48 is not supported"):
        kittens.attention(rand(rng, 1, 2, 16, 48), rand(rng, 1, 2, 16, 48), rand(rng, 1, 2, 16, 48))
    with pytest.raises(ValueError, match="no keys"):
        kittens.attention(q, rand(rng, 1, 2, 0, 64), rand(rng, 1, 2, 0, 64))
    with pytest.raises(ValueError, match="GQA needs H divisible by H_kv"):
        kittens.attention(rand(rng, 1, 3, 16, 64), k, v)
    # Mixed memory orders are read in place (the strided program); a head dim that is not contiguous
    # cannot be, and is refused naming the tensor and its strides.
    kittens.attention(q, bshd(rng, 1, 2, 16, 64), v)
    with pytest.raises(ValueError, match=r"k strides .*head dim \(last\) must be contiguous"):
        kittens.attention(q, rand(rng, 1, 2, 64, 16).transpose(0, 1, 3, 2), v)
    with pytest.raises(ValueError, match="k has shape"):
        kittens.attention(q, k, rand(rng, 1, 1, 16, 64))
    with pytest.raises(TypeError, match="float32"):
        kittens.attention(q.astype(np.float32), k, v)
    with pytest.raises(ValueError, match="4-D"):
        kittens.attention(rand(rng, 2, 16, 64), k, v)


def attention_lse_ref(q, k, v, causal, align="top_left", scale=1.0):
    """(O, lse) in float64 for q (B, H, N, D), k, v (B, H_kv, N_kv, D): query i keeps keys j <= i
    (top-left) or j <= i + N_kv - N (bottom-right) when causal; a row that keeps none has O = 0 and
    lse = -inf. `scale` multiplies the bf16 inputs exactly (powers of two) to reach large logits."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    b, h, n, d = q.shape
    nk = k.shape[2]
    group = h // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(d)
    if causal:
        off = 0 if align == "top_left" else nk - n
        keep = np.arange(nk)[None, :] <= np.arange(n)[:, None] + off
        s = np.where(keep, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(s - safe)
    tot = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(tot > 0, np.log(tot) + safe, -np.inf)[..., 0]
        o = np.where(tot > 0, np.einsum("bhij,bhjd->bhid", e, v) / tot, 0.0)
    return o, lse


@pytest.mark.parametrize(
    "n,nk,causal,align",
    [
        (77, 77, False, "top_left"),
        (45, 37, True, "bottom_right"),  # rows 0..7 keep no key
        (1, 70, True, "bottom_right"),  # decoding: the one query sees every key
        (1, 70, False, "top_left"),
        (3, 130, True, "top_left"),
        (70, 33, True, "top_left"),
        (33, 70, True, "bottom_right"),
    ],
)
def test_attention_lse_and_lengths_match_float64(n, nk, causal, align):
    rng = np.random.default_rng(n * 1000 + nk)
    # Inputs times 8 (exact in bf16) at head dim 64: logits up to about +-64.
    big = lambda *shape: (rng.uniform(-1.0, 1.0, shape) * 8).astype(BF16)  # noqa: E731
    q, k, v = big(2, 4, n, 64), big(2, 2, nk, 64), rand(rng, 2, 2, nk, 64)
    o, lse = kittens.attention(q, k, v, causal=causal, return_lse=True, causal_align=align)
    ref_o, ref_lse = attention_lse_ref(q, k, v, causal, align)
    assert o.shape == (2, 4, n, 64) and o.dtype == BF16
    assert isinstance(lse, np.ndarray) and lse.dtype == np.float32 and lse.shape == (2, 4, n)
    empty = ~np.isfinite(ref_lse)
    assert np.array_equal(np.isneginf(lse), empty)  # -inf exactly where a row keeps no key
    assert not np.any(o.astype(np.float32)[empty])
    fin = ~empty
    # f32 statistics of f32 scores: the log-sum-exp to about 1e-6 of its scale.
    assert np.max(np.abs(lse[fin] - ref_lse[fin])) <= 1e-5 * max(1.0, np.max(np.abs(ref_lse[fin])))
    assert np.max(np.abs(ref_lse[fin])) > 20  # the logits really were large
    assert rel_err(o[fin], ref_o[fin]) < 1e-2
    # Without the log-sum-exp: the same output bits.
    o2 = kittens.attention(q, k, v, causal=causal, causal_align=align)
    assert np.array_equal(o2.view(np.uint16), o.view(np.uint16))


def test_attention_bad_options_are_clear_errors():
    rng = np.random.default_rng(8)
    q = rand(rng, 1, 2, 16, 64)
    with pytest.raises(ValueError, match="causal_align='bottom'"):
        kittens.attention(q, q, q, causal=True, causal_align="bottom")
    with pytest.raises(TypeError, match="causal_align must be a str"):
        kittens.attention(q, q, q, causal=True, causal_align=1)
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        kittens.attention(q, q, q, return_lse=1)
    with pytest.raises(TypeError, match="causal must be a bool"):
        kittens.attention(q, q, q, causal="yes")


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
        )


def test_cuda_arrays_never_run_on_the_cpu():
    """The native per-kernel entries run CPU arrays; a CUDA array reaching one (the package sends every
    CUDA call through ``kittens._dispatch``'s prepared calls) is a RuntimeError, never a CPU run."""
    a = view_args([64, 64], "cuda", 0x10000)
    b = (0x20000, [64, 64], [1, 64], "bfloat16", "cuda", 0)
    c = view_args([64, 64], "cuda", 0x30000)
    with pytest.raises(RuntimeError, match="kittens._dispatch"):
        _kittens.matmul(a, b, c)
    q, k, v, o = (view_args([1, 2, 16, 64], "cuda", p) for p in (0x10000, 0x20000, 0x30000, 0x40000))
    with pytest.raises(RuntimeError, match="kittens._dispatch"):
        _kittens.attention(q, k, v, o, None, False, False, None)


def test_cuda_dlpack_without_torch_is_a_runtime_error():
    """A CUDA DLPack array without torch is a RuntimeError. Where torch is installed (CI installs it)
    the check runs in a child interpreter whose ``import torch`` fails, so it never skips."""
    import subprocess
    import sys

    code = """
import sys
sys.modules["torch"] = None  # import torch raises ImportError in this process
import kittens

class CudaThing:
    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be read")

try:
    kittens.matmul(CudaThing(), CudaThing())
except RuntimeError as e:
    assert "needs torch" in str(e), e
    print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_import_needs_no_gpu_and_verbose_toggles():
    kittens.set_verbose(True)
    assert _kittens.verbose()
    kittens.set_verbose(False)
    assert not _kittens.verbose()
    assert kittens.__version__


# ----------------------------------------------------------------------------------------- layernorm

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox(c, k):
    """Philox 4x32-10 in plain Python (Random123 §3.2), independent of the Rust implementation."""
    c, k = list(c), list(k)
    for r in range(10):
        if r:
            k = [(k[0] + PHILOX_W[0]) & 0xFFFFFFFF, (k[1] + PHILOX_W[1]) & 0xFFFFFFFF]
        p0, p1 = PHILOX_M[0] * c[0], PHILOX_M[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
    return c


def test_philox_python_matches_random123():
    # Random123 tests/kat_vectors, the philox4x32 10 lines.
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def keep_mask(rows, d, p, seed, offset):
    idx = np.arange(rows * d)
    words = {}
    out = np.empty(rows * d, dtype=bool)
    key = [seed & 0xFFFFFFFF, seed >> 32]
    for i in idx:
        g = int(i) // 4
        if g not in words:
            words[g] = philox([g & 0xFFFFFFFF, g >> 32, offset & 0xFFFFFFFF, offset >> 32], key)
        out[i] = (words[g][int(i) % 4] >> 8) / 2**24 >= p
    return out.reshape(rows, d)


def layernorm_ref(x, r, w, b, keep, p, eps=1e-5):
    x, r, w, b = (np.asarray(a).astype(np.float64) for a in (x, r, w, b))
    h = r + (x * keep / (1.0 - p) if p > 0 else x)
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / np.sqrt(var + eps) * w + b, h


@pytest.mark.parametrize("shape,p", [((3, 5, 776), 0.0), ((7, 1000), 0.2), ((2, 2056), 0.5)])
def test_layernorm_matches_float64_and_philox(shape, p):
    rng = np.random.default_rng(sum(shape))
    d = shape[-1]
    x, r = rand(rng, *shape), rand(rng, *shape)
    w, b = rand(rng, d), rand(rng, d)
    seed, offset = 0x0123456789ABCDEF, 5 << 32 | 3
    y, h = kittens.layernorm(x, r, w, b, p=p, seed=seed, offset=offset)
    assert y.shape == shape and h.shape == shape and y.dtype == BF16
    rows = int(np.prod(shape[:-1]))
    keep = keep_mask(rows, d, p, seed, offset).reshape(shape)
    ry, rh = layernorm_ref(x, r, w, b, keep, p)
    # One bf16 rounding per output: a flipped mask bit moves h by |x|/(1-p), far over 2^-8.
    dh = np.abs(np.asarray(h).astype(np.float64) - rh).max() / np.abs(rh).max()
    assert dh < 2**-8, dh
    assert rel_err(y, ry) < 1e-2


def test_layernorm_refuses_bad_rows():
    x = np.ones((2, 100), dtype=BF16)
    w = np.ones(100, dtype=BF16)
    with pytest.raises(ValueError, match="multiple of 8 from 768 to 8192"):
        kittens.layernorm(x, x, w, w)
    x = np.ones((2, 1000), dtype=BF16)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        kittens.layernorm(x, x, np.ones(1000, dtype=BF16), np.ones(1000, dtype=BF16), p=1.0)


# -------------------------------------------------------------------------------------------- rotary


def rotary_ref(q, cos, sin, interleaved):
    q, cos, sin = (np.asarray(a).astype(np.float64) for a in (q, cos, sin))
    if interleaved:
        x0, x1 = q[..., 0::2], q[..., 1::2]
    else:
        half = q.shape[-1] // 2
        x0, x1 = q[..., :half], q[..., half:]
    o0, o1 = x0 * cos - x1 * sin, x1 * cos + x0 * sin
    out = np.empty_like(q)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = o0, o1
    else:
        out[..., :half], out[..., half:] = o0, o1
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("bshd", [False, True])
def test_rotary_matches_float64(interleaved, bshd):
    rng = np.random.default_rng(3 + interleaved + 2 * bshd)
    b, h, n, d = 2, 3, 37, 64
    q = rand(rng, b, n, h, d).transpose(0, 2, 1, 3) if bshd else rand(rng, b, h, n, d)
    ang = rng.uniform(0, 6.28, (n, d // 2))
    cos, sin = np.cos(ang).astype(BF16), np.sin(ang).astype(BF16)
    o = kittens.rotary(q, cos, sin, interleaved=interleaved)
    ref = rotary_ref(q, cos, sin, interleaved)
    assert np.abs(np.asarray(o).astype(np.float64) - ref).max() <= 2**-8 * np.abs(ref).max()
    assert o.strides == q.strides
    q2 = q.copy()
    kittens.rotary(q2, cos, sin, interleaved=interleaved, inplace=True)
    assert np.array_equal(np.asarray(q2), np.asarray(o))


def test_rotary_tables_are_roformer_frequencies_rounded_once():
    import math

    n, d, base = 29, 48, 500.0
    cos, sin = kittens.rotary_tables(n, d, base)
    assert cos.dtype == BF16 and cos.shape == (n, d // 2) and sin.shape == (n, d // 2)
    for p in (0, 1, 7, 28):
        for i in range(d // 2):
            ang = p * math.pow(base, -2.0 * i / d)
            assert cos[p, i] == np.array(math.cos(ang)).astype(BF16)
            assert sin[p, i] == np.array(math.sin(ang)).astype(BF16)
    pos = np.array([1000, 3, 77])
    c2, s2 = kittens.rotary_tables(3, d, base, positions=pos)
    assert c2[1, 5] == cos[3, 5] and s2[1, 5] == sin[3, 5]
    assert c2[0, 0] == np.array(math.cos(1000.0)).astype(BF16)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_computes_its_tables(interleaved):
    rng = np.random.default_rng(11 + interleaved)
    b, h, n, d = 2, 3, 21, 32
    q = rand(rng, b, h, n, d)
    o = kittens.rotary(q, interleaved=interleaved)
    cos, sin = kittens.rotary_tables(n, d)
    assert np.array_equal(np.asarray(o), np.asarray(kittens.rotary(q, cos, sin, interleaved=interleaved)))
    # Against exact angles in float64: the tables' one bf16 rounding and the output's.
    ang = np.outer(np.arange(n), 10000.0 ** (-np.arange(0, d, 2) / d))
    ref = rotary_ref(q, np.cos(ang), np.sin(ang), interleaved)
    assert np.abs(np.asarray(o).astype(np.float64) - ref).max() <= 2**-7 * np.abs(ref).max()
    # New tokens at positions 9..12 of a cache: the same rows as the whole sequence's.
    part = np.ascontiguousarray(q[:, :, 9:13])
    o_part = kittens.rotary(part, interleaved=interleaved, positions=np.arange(9, 13))
    assert np.array_equal(np.asarray(o_part), np.asarray(o)[:, :, 9:13])


def test_rotary_table_arguments_are_checked():
    q = rand(np.random.default_rng(5), 1, 2, 8, 32)
    cos, sin = kittens.rotary_tables(8, 32)
    with pytest.raises(ValueError, match="both cos and sin"):
        kittens.rotary(q, cos)
    with pytest.raises(ValueError, match="positions apply to computed tables"):
        kittens.rotary(q, cos, sin, positions=np.arange(8))
    with pytest.raises(ValueError, match="8 integers"):
        kittens.rotary(q, positions=np.arange(7))
    with pytest.raises(ValueError, match="even"):
        kittens.rotary_tables(8, 33)
    with pytest.raises(ValueError, match="base"):
        kittens.rotary_tables(8, 32, base=1.0)


def test_attention_backward_form_choice(monkeypatch):
    """The backward's launch form: ``form=`` wins, else ``KITTENS_ATTN_BWD`` (read once), else "auto",
    which is "atomic" at head dims 32, 64 and 128 and "two" at 96; anything but "auto", "two" or "atomic" is a
    ValueError naming where it came from."""
    from kittens import _backward

    monkeypatch.setattr(_backward, "_env_form", None)
    monkeypatch.setenv("KITTENS_ATTN_BWD", "Atomic")
    assert _backward._form(None, 64) == "atomic"
    monkeypatch.setenv("KITTENS_ATTN_BWD", "two")
    assert _backward._form(None, 128) == "atomic"  # read once
    assert _backward._form("two", 128) == "two"
    assert _backward._form("auto", 128) == "atomic"
    assert _backward._form("auto", 64) == "atomic"
    assert _backward._form("auto", 32) == "atomic"
    assert _backward._form("auto", 96) == "two"
    with pytest.raises(ValueError, match="form = 'three'.*'auto', 'two' or 'atomic'"):
        _backward._form("three", 128)
    monkeypatch.setattr(_backward, "_env_form", None)
    monkeypatch.delenv("KITTENS_ATTN_BWD")
    assert _backward._form(None, 128) == "atomic"
    assert _backward._form(None, 64) == "atomic"
    assert _backward._form(None, 96) == "two"
    monkeypatch.setattr(_backward, "_env_form", None)
    monkeypatch.setenv("KITTENS_ATTN_BWD", "fast")
    with pytest.raises(ValueError, match="KITTENS_ATTN_BWD = 'fast'"):
        _backward._form(None, 128)
    # Head dims 192 and 256: "auto" takes the atomic form (even with a soft cap); the deterministic
    # two launches when asked for (their query blocks stream 64 or 32 keys per step there).
    for d in (192, 256):
        assert _backward._form("auto", d) == "atomic"
        assert _backward._form("auto", d, softcap=5.0) == "atomic"
        assert _backward._form("atomic", d) == "atomic"
        assert _backward._form("two", d) == "two"
    # Head dims 32 and 64: the atomic form (128-query key-block steps, dQ by halves), with a cap too.
    assert _backward._form("auto", 32) == "atomic"
    assert _backward._form("auto", 64, softcap=5.0) == "atomic"


def test_attention_takes_any_scale_exactly():
    """A softmax scale other than 1/sqrt(D) is a constant of the kernel (no rescaled copy of q): the
    interpreter's output matches float64 softmax(scale * q.k) v at bf16 accuracy."""
    rng = np.random.default_rng(11)
    q, k, v = rand(rng, 1, 2, 37, 64), rand(rng, 1, 1, 37, 64), rand(rng, 1, 1, 37, 64)
    for scale in (0.05, 0.5):
        o = kittens.attention(q, k, v, scale=scale)
        ref = attention_ref(np.asarray(q, np.float64) * (scale * 8.0), k, v, False)  # 8 = sqrt(64)
        err = np.linalg.norm(np.asarray(o, np.float64) - ref) / np.linalg.norm(ref)
        assert err < 1e-2, (scale, err)
