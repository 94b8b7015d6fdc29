"""kittens.tile on the CPU: the Python-built kernels are the Rust examples' kernels (same JSON), exact on
the interpreter against f64, race-checked, refused with named errors, and lowered with reports."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest

import kittens
from kittens import tile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "examples"))
from matmul import matmul  # noqa: E402
from rmsnorm import EPS, rmsnorm  # noqa: E402
from row_sum import row_sum  # noqa: E402
from swiglu import swiglu  # noqa: E402

BF16 = ml_dtypes.bfloat16


def rust_kernel_json(example: str, name: str) -> dict:
    """The kernel file the Rust example writes (`common::write_kernel_file`), made fresh by running it
    (scripts/test.sh runs the examples before the Python tests, so in CI this is a cached build)."""
    if shutil.which("cargo") is None or not (ROOT / "Cargo.toml").exists():
        pytest.skip("no cargo or no source checkout: the Rust example cannot run here")
    subprocess.run(
        ["cargo", "run", "-q", "--release", "-p", "kittens-runtime", "--example", example],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )
    path = pathlib.Path(tempfile.gettempdir()) / "kittens-examples" / f"{name}.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize("example,build,name", [
    ("rmsnorm", lambda: rmsnorm(1024, 1), "rmsnorm_d1024_w1"),
    ("swiglu", lambda: swiglu(1024), "swiglu_f1024"),
    ("row_sum", lambda: row_sum(256), "row_sum_s256"),  # a loop and a conditional on its variable
    ("matmul", matmul, "matmul_16x16x32"),  # async copies, shared tiles, mma in a loop
])
def test_same_ir_as_rust(example, build, name):
    p = build()
    assert p.name == name
    assert json.loads(p.json()) == rust_kernel_json(example, name)


def bf16(a):
    """`a` rounded to bf16 (RTNE), as float64: the kernel's inputs and the reference's."""
    return np.asarray(a, np.float32).astype(BF16).astype(np.float64)


def err_vs(ref, got, plain):
    """Our max error against f64, and the plain bf16 computation's (FlashAttention's rule)."""
    return np.abs(got - ref).max(), np.abs(plain.astype(np.float64) - ref).max()


@pytest.mark.parametrize("dim,waves_per_row", [(1000, 1), (1000, 2), (1024, 2)])
def test_rmsnorm_interpreter_vs_f64(dim, waves_per_row):
    rows = 37  # not a multiple of the 4 rows per block
    rng = np.random.default_rng(dim + waves_per_row)
    x, w = bf16(rng.uniform(-3, 3, (rows, dim))), bf16(rng.uniform(-2, 2, dim))
    kern = kittens.compile(rmsnorm(dim, waves_per_row))
    assert kern.race_check(rows=rows) == []
    y = kern.run({"x": x, "w": np.broadcast_to(w, (rows, dim))}, rows=rows)["y"]
    assert y.shape == (rows, dim) and np.isfinite(y).all()
    ref = x / np.sqrt((x**2).mean(1, keepdims=True) + EPS) * w
    xb, wb = x.astype(BF16), w.astype(BF16)
    plain = xb / np.sqrt((xb * xb).astype(np.float32).mean(1, keepdims=True) + EPS).astype(BF16) * wb
    ours, base = err_vs(ref, y, plain)
    assert ours <= 2 * base + 1e-6, (ours, base)


def test_swiglu_interpreter_vs_f64():
    rows, f = 37, 1000
    x = bf16(np.random.default_rng(7).uniform(-4, 4, (rows, 2 * f)))  # the sigmoid's tails too
    y = kittens.compile(swiglu(f)).run({"x": x}, rows=rows)["out"]
    g, u = x[:, :f], x[:, f:]
    ref = g / (1 + np.exp(-g)) * u
    gb, ub = g.astype(BF16), u.astype(BF16)
    plain = gb / (BF16(1) + np.exp(-gb)) * ub
    ours, base = err_vs(ref, y, plain)
    assert ours <= 2 * base + 1e-6, (ours, base)


def test_race_check_flags_the_missing_barrier_and_interpret_refuses():
    rows, dim = 37, 1024
    x = np.random.default_rng(3).uniform(-1, 1, (rows, dim))
    racy = rmsnorm(dim, 2, barrier=False)
    hazards = racy.race_check({"rows": rows})
    assert hazards and "missing barrier" in hazards[0] and "partials" in hazards[0]
    with pytest.raises(ValueError, match="racy.*refuses"):
        racy.interpret({"x": x, "w": x}, {"rows": rows})


def test_bad_input_raises_named_errors():
    k = tile.Builder("bad", 1)
    with pytest.raises(ValueError, match=r"tile `h`.*bf17"):
        k.tile("h", "bf17", 1, 256)
    with pytest.raises(ValueError, match=r"tensor `x`.*\"sideways\""):
        k.global_("x", "f32", [("n", 4)], "sideways")
    other = tile.Builder("other", 1).tile("a", "f32", 1, 256)
    t = k.tile("t", "f32", 1, 256)
    with pytest.raises(ValueError, match="mul: tile `a` belongs to another Builder"):
        k.mul(t, other, 1.0)
    with pytest.raises(TypeError):
        k.mul(t, "t", 1.0)
    # A shape mismatch is the Rust validator's error, naming the op.
    m = tile.Builder("mismatch", 1)
    a, b = m.tile("a", "f32", 16, 16, "row", "16x16"), m.tile("b", "f32", 1, 256)
    m.add(a, a, b)
    with pytest.raises(ValueError, match=r"op #0 \(add\).*1x256"):
        m.finish()
    with pytest.raises(ValueError, match="finished"):
        m.finish()
    with pytest.raises(ValueError, match="finished"):
        m.barrier()
    # The register budget: one wave per row of 4096 is refused for sm_90a, naming the tiles.
    with pytest.raises(ValueError, match=r"register budget on sm_90a.*`h`"):
        rmsnorm(4096, 1).lower("sm_90a")
    p = swiglu(1024)
    with pytest.raises(ValueError, match="parameter \"rows\" not given"):
        p.interpret({"x": np.ones((4, 2048))}, {})
    with pytest.raises(ValueError, match="unknown parameter \"cols\""):
        p.race_check({"rows": 4, "cols": 1})
    with pytest.raises(ValueError, match="tensor `x` not given"):
        p.interpret({}, {"rows": 4})
    with pytest.raises(ValueError, match="needs at least"):
        p.interpret({"x": np.ones(10)}, {"rows": 4})
    with pytest.raises(ValueError, match="target \"sm_99\""):
        p.lower("sm_99")


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
def test_lowering_reports(target):
    for p in (rmsnorm(1024, 2), swiglu(1024)):
        r = kittens.compile(p).report(target)
        assert r["target"] == target and p.name in r["entry"] and "__global__" in r["source"]
        assert 0 < r["regs_estimate"] <= r["reg_budget"]
        if r["compiler"].startswith("none"):
            # The toolchain is not installed here (scripts/install-nvrtc.sh, the ROCm clang).
            if os.environ.get("CI") == "true":
                pytest.fail(f"{target}: {r['compiler']}")
            continue
        assert r["spills"] == 0
        assert (r["registers"] if target == "sm_90a" else r["vgpr"]) > 0
