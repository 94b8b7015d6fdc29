"""Writes fp8_vectors.txt: fp8 test vectors from ml_dtypes, an implementation independent of this
repository (https://github.com/jax-ml/ml_dtypes). Run: python gen_fp8_vectors.py > fp8_vectors.txt

Line formats (hex without 0x):
  decode <format> <fp8 bits> <f32 bits of the value>      every one of the 256 patterns
  encode <format> <f32 bits of the input> <fp8 bits>      f32 -> fp8, round to nearest even (numpy astype)
Formats: e4m3fn (OCP E4M3, ml_dtypes.float8_e4m3fn), e4m3fnuz (ml_dtypes.float8_e4m3fnuz),
e5m2 (OCP E5M2, ml_dtypes.float8_e5m2).
"""
import sys

import ml_dtypes
import numpy as np

FORMATS = {
    "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "e5m2": ml_dtypes.float8_e5m2,
}


def f32_bits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def inputs(t, rng):
    """Boundary values of format t (every finite value, the midpoints between neighbours and one f32 ulp
    either side of each, the overflow region, zeros, infinities, NaNs) and random values."""
    vals = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
    finite = np.unique(vals[np.isfinite(vals)].astype(np.float64))
    xs = list(finite)
    for a, b in zip(finite[:-1], finite[1:]):
        mid = np.float32((a + b) / 2)  # exact: neighbours differ by a power of two times a small integer
        xs += [mid, np.nextafter(mid, np.float32(-np.inf)), np.nextafter(mid, np.float32(np.inf))]
    top = finite[-1]
    step = top - finite[-2]
    for k in [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 1e3]:
        x = np.float32(top + k * step)
        xs += [x, -x, np.nextafter(x, np.float32(0)), -np.nextafter(x, np.float32(0))]
    tiny = finite[finite > 0][0]
    for k in [0.25, 0.5, 0.75, 1.0, 1.5]:
        x = np.float32(tiny * k)
        xs += [x, -x, np.nextafter(x, np.float32(0)), np.nextafter(x, np.float32(1))]
    xs += [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1e-45]
    # Random magnitudes, log-uniform over the format's range and a little past it, random signs.
    lo, hi = np.log2(tiny) - 3, np.log2(top) + 2
    mags = np.exp2(rng.uniform(lo, hi, 3000))
    signs = rng.choice([-1.0, 1.0], 3000)
    xs += list((mags * signs).astype(np.float32))
    # Random f32 bit patterns (any exponent, NaN payloads included).
    xs += list(rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32).view(np.float32))
    return np.array(xs, dtype=np.float32)


def main(out):
    rng = np.random.default_rng(20261122)
    out.write(f"# ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}; written by gen_fp8_vectors.py\n")
    for name, t in FORMATS.items():
        for b in range(256):
            v = np.array([b], dtype=np.uint8).view(t).astype(np.float32)[0]
            out.write(f"decode {name} {b:02x} {f32_bits(v):08x}\n")
        xs = inputs(t, rng)
        enc = xs.astype(t).view(np.uint8)
        for x, e in zip(xs.view(np.uint32), enc):
            out.write(f"encode {name} {int(x):08x} {int(e):02x}\n")


if __name__ == "__main__":
    main(sys.stdout)
