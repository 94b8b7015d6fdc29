"""kittens.tile's wrappers of the IR ops beyond the examples' (mask, convert, random, atomic_add,
scheduling hints, cluster_rows) and the wave-width-free row split, each run on the CPU interpreter
against a reference written here (numpy), with the named errors of bad input."""

import json
import os
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import kittens
from kittens import tile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "examples"))
from rmsnorm import rmsnorm  # noqa: E402

M32 = 0xFFFFFFFF


def one_tile(name, rows, cols, dtype="f32"):
    """A one-block kernel skeleton: x (read) and y (write), both n x n f32, and a strip tile."""
    k = tile.Builder(name, waves=1)
    n = k.param("n")
    x = k.global_("x", "f32", [("r", n), ("c", n)], "read")
    y = k.global_("y", "f32", [("r", n), ("c", n)], "write")
    t = k.tile("t", dtype, rows, cols, "row", "strip")
    return k, x, y, t


@pytest.mark.parametrize("rule,offset,limit", [
    ("causal", 2, None), ("causal_t", -1, None), ("window_start", -3, None),
    ("window_start_t", 1, None), ("cols_below", None, 11), ("rows_below", None, 5),
])
def test_mask_rules_against_numpy(rule, offset, limit):
    k, x, y, t = one_tile(f"mask_{rule}", 16, 16)
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 16, 16))
    k.mask(t, rule, 3, 4, float("-inf"), offset=offset, limit=limit)  # tile origin (3, 4)
    k.store(k.gview(y, [0, 0], 0, 1, 16, 16), t)
    xs = np.random.default_rng(1).uniform(-4, 4, (16, 16)).astype(np.float32)
    got = kittens.compile(k.finish()).run({"x": xs}, n=16)["y"]
    r, c = np.meshgrid(np.arange(16) + 3, np.arange(16) + 4, indexing="ij")
    o = offset or 0
    keep = {"causal": c <= r + o, "causal_t": r <= c + o, "window_start": c >= r + o,
            "window_start_t": r >= c + o, "cols_below": c < (limit or 0), "rows_below": r < (limit or 0)}[rule]
    assert 0 < keep.sum() < 256
    np.testing.assert_array_equal(got, np.where(keep, xs, -np.inf))


def test_mask_bad_input_names_the_tile_and_the_rule():
    k, _, _, t = one_tile("mask_bad", 16, 16)
    with pytest.raises(ValueError, match=r"mask `t`: rule \"diagonal\" is not one of"):
        k.mask(t, "diagonal", 0, 0, 0.0)
    with pytest.raises(ValueError, match=r"mask `t`: rule \"cols_below\" needs `limit`"):
        k.mask(t, "cols_below", 0, 0, 0.0)


def bf16_round(a, mode):
    """f32 -> bf16 -> f32 in numpy, by the rounding's definition on the bits (finite inputs)."""
    b = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    if mode == "rtne":
        return a.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    if mode == "rtna":
        b = b + 0x8000
    return (b & 0xFFFF0000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("mode", ["rtne", "rtna", "rtz"])
def test_convert_rounds_as_named(mode):
    k, x, y, t = one_tile(f"convert_{mode}", 4, 64)
    b = k.tile("b", "bf16", 4, 64, "row", "strip")
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 4, 64))
    k.convert(b, t, mode)
    k.store(k.gview(y, [0, 0], 0, 1, 4, 64), b)  # bf16 values are exact in f32
    rng = np.random.default_rng(2)
    xs = np.zeros((64, 64), np.float32)
    xs[:4] = rng.uniform(-3, 3, (4, 64)).astype(np.float32)
    xs[0, :4] = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-9], np.float32)  # ties
    got = kittens.compile(k.finish()).run({"x": xs}, n=64)["y"][:4]
    np.testing.assert_array_equal(got, bf16_round(xs[:4], mode))
    with pytest.raises(ValueError, match=r"convert `b`: rounding: \"rtn\" is not one of"):
        k2, _, _, t2 = one_tile("convert_bad", 4, 64)
        k2.convert(k2.tile("b", "bf16", 4, 64, "row", "strip"), t2, "rtn")


def philox_uniform(e, seed, offset):
    """Element e of the Philox 4x32-10 stream keyed by seed, offset (Random123 §3.2; the IR's
    kittens_ir::philox): counter (g low, g high, offset low, offset high) for g = e // 4, key = seed,
    uniform = (word >> 8) / 2^24 of word e % 4."""
    g = e >> 2
    c = [g & M32, g >> 32, offset[0], offset[1]]
    k0, k1 = seed
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return (c[e & 3] >> 8) / 2.0**24


@pytest.mark.parametrize("index0,row_stride", [(0, 64), (5, 101)])
def test_random_is_the_philox_stream(index0, row_stride):
    k, _, y, t = one_tile("random", 4, 64)
    seed, offset = (123456789, 42), (7, 0)
    k.random(t, seed, offset, index0, row_stride)
    k.store(k.gview(y, [0, 0], 0, 1, 4, 64), t)
    got = kittens.compile(k.finish()).run({"x": np.zeros((64, 64))}, n=64)["y"][:4]
    want = np.array([[philox_uniform(index0 + i * row_stride + j, seed, offset) for j in range(64)]
                     for i in range(4)], np.float32)
    np.testing.assert_array_equal(got, want)
    assert 0.3 < got.mean() < 0.7


def test_atomic_add_sums_every_block():
    k = tile.Builder("atomic_rows", waves=1)
    rows = k.param("rows")
    x = k.global_("x", "f32", [("r", rows), ("c", 64)], "read")
    y = k.global_("y", "f32", [("r", 1), ("c", 64)], "read_write")
    k.grid([rows], "row_major")
    t = k.tile("t", "f32", 1, 64, "row", "strip")
    k.load_global(t, k.gview(x, [k.block(0), 0], 0, 1, 1, 64))
    k.atomic_add(k.gview(y, [0, 0], 0, 1, 1, 64), t)  # every block adds its row into y's one row
    rng = np.random.default_rng(3)
    xs, y0 = rng.uniform(-1, 1, (5, 64)), rng.uniform(-1, 1, (1, 64))
    xs, y0 = xs.astype(np.float32), y0.astype(np.float32)
    got = kittens.compile(k.finish()).run({"x": xs, "y": y0}, rows=5)["y"]
    np.testing.assert_allclose(got, y0 + xs.sum(0, keepdims=True), rtol=0, atol=1e-5)


def test_sched_hints_change_nothing_and_are_in_the_ir():
    k, x, y, t = one_tile("hints", 1, 64)
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 1, 64))
    for kind in ("pairs", "mma_reads", "mma_exp"):
        k.sched(kind, 1, 2, 3)
    k.exp(t, t)
    k.store(k.gview(y, [0, 0], 0, 1, 1, 64), t)
    with pytest.raises(ValueError, match=r"sched: kind \"later\" is not one of"):
        k.sched("later", 1, 1, 1)
    p = k.finish()
    hints = [o["op"]["op"]["hint"] for o in json.loads(p.json())["kernel"]["body"] if "hint" in o["op"]["op"]]
    assert hints == [{"pairs": {"mma": 1, "other": 2, "groups": 3}},
                     {"mma_reads": {"mma": 1, "reads": 2, "groups": 3}},
                     {"mma_exp": {"mma": 1, "exp": 2, "groups": 3}}]
    xs = np.random.default_rng(4).uniform(-2, 2, (64, 64)).astype(np.float32)
    got = kittens.compile(p).run({"x": xs}, n=64)["y"][0]
    np.testing.assert_allclose(got, np.exp(xs[0]), rtol=2e-6)


def test_cluster_rows_sets_the_grid_and_refuses_other_sizes():
    k, x, y, t = one_tile("cluster", 1, 64)
    k.cluster_rows(2)
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 1, 64))
    k.store(k.gview(y, [0, 0], 0, 1, 1, 64), t)
    assert json.loads(k.finish().json())["kernel"]["grid"]["cluster"] == 2
    k2, *_ = one_tile("cluster_bad", 1, 64)
    k2.cluster_rows(3)
    with pytest.raises(ValueError, match="clusters of 3 blocks"):
        k2.finish()


def test_row_split_is_one_configuration_for_every_target():
    w, cols = tile.row_split(4096, 32, 4)
    assert (w, cols) == (4, 1024)  # 32 values per lane on 32 lanes, 16 on 64
    assert tile.row_split(1024) == (4, 256)  # 8 per lane on 32 lanes by default
    with pytest.raises(ValueError, match="dim = 0"):
        tile.row_split(0)
    kern = kittens.compile(rmsnorm(4096, w))  # one program, both vendors
    for target in ("sm_90a", "gfx942"):
        r = kern.report(target)
        assert r["regs_estimate"] <= r["reg_budget"]
        if r["compiler"].startswith("none"):
            if os.environ.get("CI") == "true":
                pytest.fail(f"{target}: {r['compiler']}")
            continue
        assert r["spills"] == 0


def test_swizzled_shared_tile_round_trip():
    """A tile through a shared buffer with NVIDIA's 128-byte swizzle (bits 3, base 4, shift 3) and
    back: the swizzle moves addresses, never values; it is in the kernel file; one the tile layer
    refuses (an element swizzled outside the tile) is a build error naming the buffer."""
    k = tile.Builder("swizzle_round_trip", waves=1)
    x = k.global_("x", "bf16", [("r", 16), ("c", 64)], "read")
    y = k.global_("y", "bf16", [("r", 16), ("c", 64)], "write")
    s = k.shared("s", "bf16", 16, 64, 1, swizzle=(3, 4, 3))
    t = k.tile("t", "bf16", 16, 64, "row", "strip")
    t2 = k.tile("t2", "bf16", 8, 64, "row", "strip")
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 16, 64))
    k.store_shared(k.smem(s, 0), t)
    k.wait_shared(0)
    k.barrier()
    k.load(t2, k.smem(s, 0).sub(8, 64, 1, 0))  # rows 8..15 first: a sub-view of the swizzled tile
    k.wait_shared(0)
    k.store(k.gview(y, [0, 0], 0, 1, 8, 64), t2)
    p = k.finish()
    assert json.loads(p.json())["kernel"]["shared"][0]["tile"]["swizzle"] == {
        "kind": "xor", "bits": 3, "base": 4, "shift": 3}
    xs = np.random.default_rng(5).uniform(-2, 2, (16, 64)).astype(ml_dtypes.bfloat16).astype(np.float32)
    got = kittens.compile(p).run({"x": xs})["y"]
    np.testing.assert_array_equal(got[:8], xs[8:])
    bad = tile.Builder("swizzle_bad", waves=1)
    bad.shared("odd", "bf16", 24, 64, 1, swizzle=(3, 10, 1))
    with pytest.raises(ValueError, match="`odd`"):
        bad.finish()
