"""kittens.tile's loops and conditionals on the CPU: for_range with its variable in index expressions,
if_ on the loop variable, the wave and the warpgroup, nested bodies, the example kernels with loops
(row_sum, matmul) on the interpreter against f64, and the errors of misused bodies and conditions.
(That row_sum's JSON equals the Rust example's is test_tile.py's test_same_ir_as_rust.)"""

import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import kittens
from kittens import tile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "examples"))
from matmul import matmul  # noqa: E402
from row_sum import row_sum  # noqa: E402

BF16 = ml_dtypes.bfloat16


def bf16(a):
    """`a` rounded to bf16 (RTNE), as float64: the kernel's inputs and the reference's."""
    return np.asarray(a, np.float32).astype(BF16).astype(np.float64)


@pytest.mark.parametrize("rows,cols", [(37, 1000), (5, 300), (9, 256)])
def test_row_sum_interpreter_vs_f64(rows, cols):
    x = bf16(np.random.default_rng(cols).uniform(-4, 4, (rows, cols)))
    kern = kittens.compile(row_sum(256))
    assert kern.race_check(rows=rows, cols=cols) == []
    y = kern.run({"x": x}, rows=rows, cols=cols)["y"]
    assert y.shape == (rows, 1)
    ref = x.sum(1)
    # The plain computation: torch's bf16 sum (f32 accumulation, rounded to bf16).
    plain = x.astype(np.float32).sum(1).astype(BF16).astype(np.float64)
    ours, base = np.abs(y[:, 0] - ref).max(), np.abs(plain - ref).max()
    assert ours <= 2 * base + 1e-6, (ours, base)


@pytest.mark.parametrize("m,n,k", [(37, 45, 100), (16, 16, 32), (50, 17, 333)])
def test_matmul_interpreter_vs_f64(m, n, k):
    rng = np.random.default_rng(m * n + k)
    a, b = bf16(rng.uniform(-2, 2, (m, k))), bf16(rng.uniform(-2, 2, (k, n)))
    kern = kittens.compile(matmul())
    assert kern.race_check(m=m, n=n, k=k) == []
    c = kern.run({"a": a, "b": b}, m=m, n=n, k=k)["c"]
    assert c.shape == (m, n) and np.isfinite(c).all()
    ref = a @ b
    plain = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16).astype(np.float64)
    ours, base = np.abs(c - ref).max(), np.abs(plain - ref).max()
    assert ours <= 2 * base + 1e-6, (ours, base)


def branchy():
    """Eight waves, one row each: warpgroup 1 doubles its rows; in warpgroup 0, waves 0 and 3 negate
    theirs and the others add 1; then, for every row, `reps` times (nested loops p x q), add x."""
    k = tile.Builder("branchy", waves=8)
    rows, p, q = k.param("rows"), k.param("p"), k.param("q")
    x = k.global_("x", "f32", [("row", rows), ("col", 256)], "read")
    y = k.global_("y", "f32", [("row", rows), ("col", 256)], "write")
    k.grid([rows.ceil_div(8)])
    view = lambda g: k.gview(g, [k.block(0) * 8 + k.wave(), 0], 0, 1, 1, 256)  # noqa: E731
    h = k.tile("h", "f32", 1, 256)
    o = k.tile("o", "f32", 1, 256)
    k.load_global(h, view(x))
    w = k.wave()
    k.if_(k.warpgroup() == 1, lambda: k.mul(o, h, 2.0),
          lambda: k.if_((w == 0) | (w == 3), lambda: k.mul(o, h, -1.0), lambda: k.add(o, h, 1.0)))
    k.for_range("i", 0, p, lambda i: k.for_range("j", 0, q, lambda j: k.add(o, o, h)))
    # A condition the loop variable decides: for i in 0..3, add 100 at i == 1 only (via ~ and &).
    k.for_range("t", 0, 3, lambda t: k.if_(~(t < 1) & (t <= 1), lambda: k.add(o, o, 100.0)))
    k.store(view(y), o)
    return k.finish()


def test_conditionals_on_wave_warpgroup_and_loop_vars():
    rows, p, q = 21, 3, 2  # the last block has 5 of its 8 rows
    x = np.random.default_rng(11).uniform(-3, 3, (rows, 256)).astype(np.float32)
    kern = kittens.compile(branchy())
    assert kern.race_check(rows=rows, p=p, q=q) == []
    y = kern.run({"x": x}, rows=rows, p=p, q=q)["y"]
    xd = x.astype(np.float64)
    wave = np.arange(rows) % 8
    first = np.where(wave[:, None] >= 4, 2 * xd, np.where(np.isin(wave, [0, 3])[:, None], -xd, xd + 1))
    ref = first + p * q * xd + 100
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-4)


def test_comparisons_build_the_ir_conditions():
    """Each Python comparison and combinator is the IR's Cond (docs/ir.md; `a > b` is `b < a`), and the
    loop is a `for` over its variable with the bounds given."""
    import json

    k = tile.Builder("conds", 8)
    n = k.param("n")
    t = k.tile("t", "f32", 1, 256)
    w = k.wave()
    conds = [w > 2, 3 >= w, (w == 0) | ~(w != 1), (k.warpgroup() == 1) & (n <= 7)]
    for c in conds:
        k.if_(c, lambda: k.zero(t))
    k.for_range("i", 1, n + 1, lambda i: k.if_(i < n, lambda: k.zero(t)))
    body = json.loads(k.finish().json())["kernel"]["body"]
    wave, c = "wave", lambda v: {"const": v}
    assert [s["if"]["cond"] for s in body[:4]] == [
        {"lt": [c(2), wave]},
        {"le": [wave, c(3)]},
        {"or": [{"eq": [wave, c(0)]}, {"not": {"ne": [wave, c(1)]}}]},
        {"and": [{"eq": [{"bin": ["div", wave, c(4)]}, c(1)]}, {"le": [{"param": 0}, c(7)]}]},
    ]
    loop = body[4]["for"]
    assert loop["start"] == c(1) and loop["end"] == {"bin": ["add", {"param": 0}, c(1)]}
    assert loop["body"][0]["if"]["cond"] == {"lt": [{"var": loop["var"]}, {"param": 0}]}


def test_misused_bodies_and_conditions_raise():
    k = tile.Builder("bad", 1)
    n = k.param("n")
    with pytest.raises(TypeError, match="no Python truth value.*if_"):
        if n < 3:
            pass
    with pytest.raises(TypeError, match="no Python truth value"):
        k.for_range("i", 0, n, lambda i: bool(i == 0))
    # The builder that ran a failed body takes nothing more (its loop was half built).
    with pytest.raises(ValueError, match=r"body of for_range `i` raised"):
        k.barrier()
    k2 = tile.Builder("finish_inside", 1)
    with pytest.raises(ValueError, match="finish\\(\\) inside the body"):
        k2.for_range("i", 0, 4, lambda i: k2.finish())
    with pytest.raises(TypeError):
        k2.if_(True, lambda: None)  # a Python bool is no kittens Cond
    k3 = tile.Builder("body_error", 1)
    with pytest.raises(ZeroDivisionError):
        k3.if_(k3.wave() == 0, lambda: 1 / 0)
    with pytest.raises(ValueError, match=r"body of if_ raised"):
        k3.finish()


def test_matmul_lowers_for_amd_and_hopper():
    import os

    r = kittens.compile(matmul()).report("gfx942")
    assert r["shared_bytes"] == (16 * 32 + 32 * 16) * 2  # the two bf16 staging tiles
    if r["compiler"].startswith("none"):
        if os.environ.get("CI") == "true":
            pytest.fail(f"gfx942: {r['compiler']}")
    else:
        assert r["spills"] == 0 and r["vgpr"] > 0 and r["hot_loop"] > 0
    # A plain program on Hopper: mma.sync per warp (kittens_codegen::strip::lower_plain).
    r = kittens.compile(matmul()).report("sm_90a")
    assert "mma.sync.aligned.m16n8k16" in r["source"]
    if r["compiler"].startswith("none"):
        if os.environ.get("CI") == "true":
            pytest.fail(f"sm_90a: {r['compiler']}")
    else:
        assert r["spills"] == 0 and 0 < r["registers"] <= 255
