"""RMSNorm in the Python tile language, the same kernel as crates/kittens-runtime/examples/rmsnorm.rs:
y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, bf16 in and out, f32 inside. `waves_per_row` waves
share a row (a strip slice each); with several, their partial sums meet in shared memory."""
from kittens import tile

EPS = 1e-6


def rmsnorm(dim: int, waves_per_row: int, barrier: bool = True) -> tile.Program:
    rows_per_block, slice_ = 4, dim // waves_per_row
    k = tile.Builder(f"rmsnorm_d{dim}_w{waves_per_row}", waves=rows_per_block * waves_per_row)
    rows = k.param("rows")
    shape = [("row", rows), ("col", dim)]
    x = k.global_("x", "bf16", shape, "read")
    w = k.global_strided("w", "bf16", shape, [0, 1], "read")  # one weight row, broadcast
    y = k.global_("y", "bf16", shape, "write")
    k.grid([rows.ceil_div(rows_per_block)], "row_major")
    row_in_block, part = k.wave() // waves_per_row, k.wave() % waves_per_row
    row = k.block(0) * rows_per_block + row_in_block
    view = lambda g: k.gview(g, [row, part * slice_], 0, 1, 1, slice_)  # noqa: E731
    h = k.tile("h", "f32", 1, slice_, "row", "strip")
    sq = k.tile("sq", "f32", 1, slice_, "row", "strip")
    wv, ms = k.col_vec("wv", h, "f32"), k.row_vec("ms", h, "f32")
    k.load_global(h, view(x))
    k.mul(sq, h, h)
    k.row_sum(ms, sq)
    if waves_per_row > 1:  # the block-wide row sum through shared memory
        partials = k.shared("partials", "f32", rows_per_block, waves_per_row, 1)
        mine = k.tile("mine", "f32", 1, 1, "row", "strip")
        all_ = k.tile("all", "f32", 1, waves_per_row, "row", "strip")
        k.copy(mine, ms)
        k.store_shared(k.smem(partials, 0).sub(1, 1, row_in_block, part), mine)
        k.wait_shared(0)
        if barrier:
            k.barrier()
        k.load(all_, k.smem(partials, 0).sub(1, waves_per_row, row_in_block, 0))
        k.wait_shared(0)
        k.row_sum(ms, all_)
    k.mul(ms, ms, 1.0 / dim)
    k.add(ms, ms, EPS)
    k.rsqrt(ms, ms)
    k.mul_row(h, h, ms)
    k.load_global(wv, view(w))
    k.mul_col(h, h, wv)
    k.store(view(y), h)
    return k.finish()


if __name__ == "__main__":
    import numpy as np

    rows, dim = 37, 1024
    rng = np.random.default_rng(1)
    x, w = rng.uniform(-1, 1, (rows, dim)), rng.uniform(-1, 1, dim)
    kern = tile.compile(rmsnorm(dim, 2))
    y = kern.run({"x": x, "w": np.broadcast_to(w, (rows, dim))}, rows=rows)["y"]
    ref = x / np.sqrt((x.astype(np.float32).astype(np.float64) ** 2).mean(1, keepdims=True) + EPS) * w
    print(kern.name, "max |err| vs f64:", float(np.abs(y - ref).max()))
    print("sm_90a:", {k: v for k, v in kern.report("sm_90a").items() if k != "source"})
