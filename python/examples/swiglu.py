"""SwiGLU in the Python tile language, the same kernel as crates/kittens-runtime/examples/swiglu.rs:
out[r, j] = silu(g[r, j]) * u[r, j], g and u the two halves of each row of x ([rows, 2F], gate first),
silu(v) = v * sigmoid(v), the language's silu op. One wave per row, 4 rows per block."""
from kittens import tile


def swiglu(f: int) -> tile.Program:
    k = tile.Builder(f"swiglu_f{f}", waves=4)
    rows = k.param("rows")
    x = k.global_("x", "bf16", [("row", rows), ("col", 2 * f)], "read")
    out = k.global_("out", "bf16", [("row", rows), ("col", f)], "write")
    k.grid([rows.ceil_div(4)], "row_major")
    row = k.block(0) * 4 + k.wave()
    g, u, s = (k.tile(n, "f32", 1, f, "row", "strip") for n in ("g", "u", "s"))
    k.load_global(g, k.gview(x, [row, 0], 0, 1, 1, f))
    k.load_global(u, k.gview(x, [row, f], 0, 1, 1, f))
    k.silu(s, g)  # g * sigmoid(g)
    k.mul(s, s, u)
    k.store(k.gview(out, [row, 0], 0, 1, 1, f), s)
    return k.finish()


if __name__ == "__main__":
    import numpy as np

    rows, f = 37, 1024
    x = np.random.default_rng(2).uniform(-4, 4, (rows, 2 * f))
    kern = tile.compile(swiglu(f))
    y = kern.run({"x": x}, rows=rows)["out"]
    g, u = x[:, :f].astype(np.float32).astype(np.float64), x[:, f:].astype(np.float32).astype(np.float64)
    print(kern.name, "max |err| vs f64:", float(np.abs(y - g / (1 + np.exp(-g)) * u).max()))
    print("sm_90a:", {k: v for k, v in kern.report("sm_90a").items() if k != "source"})
