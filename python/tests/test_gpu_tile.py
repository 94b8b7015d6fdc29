"""kittens.tile on an H100/H200: the Python-built RMSNorm and SwiGLU (python/examples) launched on CUDA
tensors through the prepared-call path, against the CPU interpreter (bit for bit) and against torch
(FlashAttention's rule vs float64), repeated calls reusing the prepared launch, and named errors; the
row sum (a loop with a conditional on its variable) and a plain-schedule GEMM with mma (mma.sync
on Hopper) likewise, and the kittens_ir crate's 16x16 example; a loop of calls prepared once, its host
time per call printed next to torch's for the same work (run with -s to see it).

Skips without a CUDA device of compute capability 9.0 (CI has none); the lead runs it on the GPU.
"""

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90a GPU", allow_module_level=True)

import kittens  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from matmul import matmul  # noqa: E402
from rmsnorm import EPS, rmsnorm  # noqa: E402
from row_sum import row_sum  # noqa: E402
from swiglu import swiglu  # noqa: E402

BF = torch.bfloat16


def rand(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).to(BF).cuda()


def rule(ours, ref64, plain, floor=1e-6):
    e_ours = (ours.double() - ref64).abs().max().item()
    e_plain = (plain.double() - ref64).abs().max().item()
    assert e_ours <= 2 * e_plain + floor, (e_ours, e_plain)


def test_rmsnorm_lowering_limit_is_named():
    """D = 1000 with one wave per row runs on the interpreter but not on sm_90a: refused by name."""
    kern = kittens.compile(rmsnorm(1000, 1))
    x = rand(37, 1000, seed=1)
    with pytest.raises((RuntimeError, ValueError), match="column broadcast"):
        kern({"x": x, "w": rand(1000, seed=2).expand(37, 1000), "y": torch.empty_like(x)}, rows=37)


@pytest.mark.parametrize("rows,dim,waves_per_row", [(37, 1024, 1), (37, 1024, 2), (1031, 4096, 2)])
def test_rmsnorm_cuda(rows, dim, waves_per_row):
    kern = kittens.compile(rmsnorm(dim, waves_per_row))
    x, w = rand(rows, dim, scale=3, seed=1), rand(dim, scale=2, seed=2)
    y = torch.full((rows, dim), float("nan"), dtype=BF, device="cuda")
    kern({"x": x, "w": w.expand(rows, dim), "y": y}, rows=rows)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": x.cpu(), "w": w.cpu()}, rows=rows)["y"])
    # The row sums' f32 order differs (warp shuffles and shared partials vs the interpreter's lanes):
    # at most one bf16 rounding step apart, element by element.
    step = cpu.abs().clamp_min(1e-30) * 2.0**-7
    assert ((y.float().cpu() - cpu).abs() <= step).all(), "CUDA differs from the interpreter by > 1 bf16 step"
    x64, w64 = x.double(), w.double()
    ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w64
    plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
    rule(y, ref, plain)
    rule(y, ref, torch.nn.functional.rms_norm(x, (dim,), w, EPS))
    y2 = torch.empty_like(y)
    kern({"x": x, "w": w.expand(rows, dim), "y": y2}, rows=rows)  # the prepared launch, reused
    assert torch.equal(y, y2)


@pytest.mark.parametrize("rows,f", [(37, 1000), (1027, 1024)])
def test_swiglu_cuda(rows, f):
    kern = kittens.compile(swiglu(f))
    x = rand(rows, 2 * f, scale=4, seed=3)
    out = torch.full((rows, f), float("nan"), dtype=BF, device="cuda")
    kern({"x": x, "out": out}, rows=rows)
    torch.cuda.synchronize()
    cpu = kern.run({"x": x.cpu()}, rows=rows)["out"]
    assert torch.equal(out.float().cpu(), torch.from_numpy(cpu)), "CUDA differs from the interpreter"
    g, u = x[:, :f], x[:, f:]
    ref = torch.nn.functional.silu(g.double()) * u.double()
    rule(out, ref, torch.nn.functional.silu(g) * u)


def test_cuda_errors_name_the_tensor():
    kern = kittens.compile(swiglu(1024))
    x = rand(8, 2048)
    with pytest.raises(ValueError, match="tensor `out` not given"):
        kern({"x": x}, rows=8)
    with pytest.raises(ValueError, match="`out` is not a CUDA tensor"):
        kern({"x": x, "out": torch.empty(8, 1024, dtype=BF)}, rows=8)
    with pytest.raises((ValueError, RuntimeError), match="out"):
        kern({"x": x, "out": torch.empty(8, 512, dtype=BF, device="cuda")}, rows=8)


@pytest.mark.parametrize("rows,cols", [(37, 1000), (1029, 4096)])
def test_row_sum_loop_cuda(rows, cols):
    kern = kittens.compile(row_sum(256))
    x = rand(rows, cols, scale=4, seed=5)
    y = torch.full((rows, 1), float("nan"), dtype=torch.float32, device="cuda")
    kern({"x": x, "y": y}, rows=rows, cols=cols)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": x.cpu()}, rows=rows, cols=cols)["y"])
    # The f32 sums' order differs (warp shuffles vs the interpreter's lanes): apart by at most 2^-16 of
    # the row's absolute sum (one bf16 step is 2^-8).
    bound = x.float().abs().sum(1, keepdim=True).cpu() * 2.0**-16
    assert ((y.cpu() - cpu).abs() <= bound).all(), "CUDA differs from the interpreter"
    rule(y[:, 0], x.double().sum(1), x.sum(1))


def test_a_loop_of_calls_prepares_once_and_costs_a_lookup():
    import time

    rows, f = 64, 1024
    kern = kittens.compile(swiglu(f))
    x = rand(rows, 2 * f, scale=4, seed=6)
    out = torch.empty(rows, f, dtype=BF, device="cuda")
    args = {"x": x, "out": out}
    kern(args, rows=rows)  # prepares
    first = out.clone()
    n = 2000

    def per_call(fn):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        return host

    ours = per_call(lambda: kern(args, rows=rows))
    g, u = x[:, :f], x[:, f:]
    theirs = per_call(lambda: torch.mul(torch.nn.functional.silu(g), u, out=out))
    kern(args, rows=rows)
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    assert len(kern._handles) == 1, "one configuration, one prepared launch"
    print(f"\nhost time per call: kittens.tile swiglu {ours * 1e6:.1f} us, "
          f"torch silu(g)*u {theirs * 1e6:.1f} us ({n} calls, {rows}x{f})")
    assert ours < 3 * theirs + 10e-6, (ours, theirs)


@pytest.mark.parametrize("m,n,k", [(37, 45, 100), (257, 130, 1000), (16, 16, 32)])
def test_plain_matmul_mma_cuda(m, n, k):
    """A plain tile program with mma (python/examples/matmul.py) on sm_90a: mma.sync per warp."""
    kern = kittens.compile(matmul())
    a, b = rand(m, k, scale=2, seed=7), rand(k, n, scale=2, seed=8)
    c = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    kern({"a": a, "b": b, "c": c}, m=m, n=n, k=k)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"a": a.cpu(), "b": b.cpu()}, m=m, n=n, k=k)["c"])
    # The f32 sums' order differs (the tensor cores' vs the interpreter's K order): apart by at most
    # 2^-20 of the sum of |a||b| per element (f32 steps are 2^-24 each, K terms).
    bound = (a.float().abs() @ b.float().abs()).cpu() * 2.0**-20
    assert ((c.cpu() - cpu).abs() <= bound).all(), "CUDA differs from the interpreter"
    ref = a.double() @ b.double()
    rule(c, ref, (a @ b).float())


def test_doc_example_exp2_cuda():
    """The kittens_ir crate's own example (one wave, a 16x16 f32 tile, plain schedule) on sm_90a."""
    from kittens import tile

    k = tile.Builder("exp2", waves=1)
    n = k.param("n")
    x = k.global_("x", "f32", [("r", n), ("c", n)], "read")
    y = k.global_("y", "f32", [("r", n), ("c", n)], "write")
    t = k.tile("t", "f32", 16, 16, "row", "16x16")
    k.load_global(t, k.gview(x, [0, 0], 0, 1, 16, 16))
    k.exp2(t, t)
    k.store(k.gview(y, [0, 0], 0, 1, 16, 16), t)
    kern = kittens.compile(k.finish())
    g = torch.Generator().manual_seed(9)
    xs = (torch.rand(37, 37, generator=g) * 8 - 4).cuda()
    ys = torch.zeros(37, 37, device="cuda")
    kern({"x": xs, "y": ys}, n=37)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": xs.cpu()}, n=37)["y"])
    # CUDA's exp2f is within 2 ulp (CUDA C++ Programming Guide, "Mathematical Functions"); Rust's
    # f32::exp2 on the interpreter is correctly rounded or nearly.
    got = ys[:16, :16].cpu()
    assert ((got - cpu[:16, :16]).abs() <= cpu[:16, :16].abs() * 2.0**-21).all()
    assert (ys[16:] == 0).all() and (ys[:, 16:] == 0).all(), "stored outside the 16x16 tile"
    x16 = xs[:16, :16]
    rule(ys[:16, :16], torch.exp2(x16.double()), torch.exp2(x16.to(BF)).float())


def test_bf16_registers_at_16_bits_cuda():
    """bf16 register tiles kept at 16 bits on sm_90a (two per 32-bit register, f32 math per element):
    o = silu(g) * u in bf16, then o / rowsum(o), against the interpreter (one bf16 step: the row sums'
    order differs) and f64."""
    from kittens import tile

    f = 1024
    k = tile.Builder("swiglu_bf16_regs", waves=4)
    rows = k.param("rows")
    x = k.global_("x", "bf16", [("row", rows), ("col", 2 * f)], "read")
    out = k.global_("out", "bf16", [("row", rows), ("col", f)], "write")
    k.grid([rows.ceil_div(4)], "row_major")
    row = k.block(0) * 4 + k.wave()
    g, u = k.tile("g", "bf16", 1, f, "row", "strip"), k.tile("u", "bf16", 1, f, "row", "strip")
    t, o = k.tile("t", "f32", 1, f, "row", "strip"), k.tile("o", "bf16", 1, f, "row", "strip")
    s = k.row_vec("sum", o, "f32")
    k.load_global(g, k.gview(x, [row, 0], 0, 1, 1, f))
    k.load_global(u, k.gview(x, [row, f], 0, 1, 1, f))
    k.silu(t, g)
    k.mul(o, t, u)
    k.row_sum(s, o)
    k.div_row(o, o, s)
    k.store(k.gview(out, [row, 0], 0, 1, 1, f), o)
    kern = kittens.compile(k.finish())
    assert "ks::bf16_regs<32>" in kern.report("sm_90a")["source"]
    n = 37
    xs = (rand(n, 2 * f, scale=4, seed=11).float().abs() + 0.5).to(BF)  # positive: no tiny row sums
    y = torch.full((n, f), float("nan"), dtype=BF, device="cuda")
    kern({"x": xs, "out": y}, rows=n)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": xs.cpu()}, rows=n)["out"])
    step = cpu.abs().clamp_min(1e-30) * 2.0**-7
    assert ((y.float().cpu() - cpu).abs() <= step).all(), "CUDA differs from the interpreter by > 1 bf16 step"
    g64, u64 = xs[:, :f].double(), xs[:, f:].double()
    o64 = torch.nn.functional.silu(g64) * u64
    gb, ub = xs[:, :f], xs[:, f:]
    ob = torch.nn.functional.silu(gb) * ub
    rule(y, o64 / o64.sum(1, keepdim=True), ob / ob.sum(1, keepdim=True))


def test_row_split_rmsnorm_cuda():
    """The rmsnorm configured by its row length alone (tile.row_split: one program for 32- and 64-lane
    waves) on sm_90a, against the interpreter (one bf16 step) and f64."""
    from kittens import tile

    dim = 4096
    w, cols = tile.row_split(dim, 32, 4)
    assert (w, cols) == (4, 1024)
    kern = kittens.compile(rmsnorm(dim, w))
    rows = 37
    x, wt = rand(rows, dim, scale=3, seed=12), rand(dim, scale=2, seed=13)
    y = torch.full((rows, dim), float("nan"), dtype=BF, device="cuda")
    kern({"x": x, "w": wt.expand(rows, dim), "y": y}, rows=rows)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": x.cpu(), "w": wt.cpu()}, rows=rows)["y"])
    step = cpu.abs().clamp_min(1e-30) * 2.0**-7
    assert ((y.float().cpu() - cpu).abs() <= step).all()
    x64, w64 = x.double(), wt.double()
    ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w64
    rule(y, ref, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * wt)


def test_mask_random_convert_cuda():
    """kittens.tile's mask, random and convert (RTZ into a bf16 register) on sm_90a: bit for bit the
    interpreter's (no summation: every backend rounds each op once)."""
    from kittens import tile

    k = tile.Builder("mask_random_convert", waves=1)
    n = k.param("n")
    x = k.global_("x", "f32", [("r", n), ("c", 64)], "read")
    y = k.global_("y", "f32", [("r", n), ("c", 64)], "write")
    k.grid([n.ceil_div(16)], "row_major")
    r0 = k.block(0) * 16
    t = k.tile("t", "f32", 16, 64, "row", "strip")
    u = k.tile("u", "f32", 16, 64, "row", "strip")
    b = k.tile("b", "bf16", 16, 64, "row", "strip")
    k.load_global(t, k.gview(x, [r0, 0], 0, 1, 16, 64))
    k.random(u, (1234, 5), (6, 0), r0 * 64, 64)
    k.add(t, t, u)
    k.mask(t, "causal", r0, 0, -1.0, offset=3)
    k.convert(b, t, "rtz")
    k.store(k.gview(y, [r0, 0], 0, 1, 16, 64), b)
    kern = kittens.compile(k.finish())
    g = torch.Generator().manual_seed(14)
    xs = (torch.rand(45, 64, generator=g) * 8 - 4).cuda()
    ys = torch.full((45, 64), float("nan"), device="cuda")
    kern({"x": xs, "y": ys}, n=45)
    torch.cuda.synchronize()
    cpu = torch.from_numpy(kern.run({"x": xs.cpu()}, n=45)["y"])
    assert torch.equal(ys.cpu(), cpu), "CUDA differs from the interpreter"
