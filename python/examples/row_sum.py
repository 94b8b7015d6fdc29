"""A row sum with a loop, the same kernel as crates/kittens-runtime/examples/row_sum.rs: y[r] = sum of
x[r, :], for x of rows x cols (both run-time parameters). One wave per row walks it in strips of `step`
columns; the first strip starts the sum and later ones add to it (a conditional on the loop variable).
Columns past `cols` read zero, so the last strip may overhang the row."""
from kittens import tile


def row_sum(step: int = 256) -> tile.Program:
    waves = 4  # one row per wave
    k = tile.Builder(f"row_sum_s{step}", waves=waves)
    rows, cols = k.param("rows"), k.param("cols")
    x = k.global_("x", "bf16", [("row", rows), ("col", cols)], "read")
    y = k.global_("y", "f32", [("row", rows), ("one", 1)], "write")
    k.grid([rows.ceil_div(waves)], "row_major")
    row = k.block(0) * waves + k.wave()
    t = k.tile("t", "f32", 1, step, "row", "strip")
    acc = k.row_vec("acc", t, "f32")

    def strip(c):  # the loop body: c is the loop variable, an index expression
        k.load_global(t, k.gview(x, [row, c * step], 0, 1, 1, step))
        k.if_(c == 0, lambda: k.row_sum(acc, t), lambda: k.row_sum_acc(acc, t, acc))

    k.for_range("c", 0, cols.ceil_div(step), strip)
    k.store(k.gview(y, [row, 0], 0, 1, 1, 1), acc)
    return k.finish()


if __name__ == "__main__":
    import numpy as np

    rows, cols = 37, 1000
    # Multiples of 1/64 below 4 in magnitude: exact in bf16, and every partial sum exact in f32.
    x = np.random.default_rng(3).integers(-255, 256, (rows, cols)) / 64
    kern = tile.compile(row_sum())
    y = kern.run({"x": x}, rows=rows, cols=cols)["y"][:, 0]
    ref = x.sum(1)
    print(kern.name, "max |err| vs f64:", float(np.abs(y - ref).max()))
