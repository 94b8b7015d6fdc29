"""A tiled GEMM over K in the Python tile language: c = a @ b, a of m x k and b of k x n in bf16, c in f32,
all three sizes run-time parameters. Each one-wave block computes one 16 x 16 tile of c, accumulating
16 x 32 by 32 x 16 matrix-instruction tiles along K in a loop: each step copies its tiles of a and b
global -> shared asynchronously, waits, and loads them into registers (reads past the edges are zero).
It lowers for gfx942/gfx950 (MFMA) and sm_90a (mma.sync per warp; docs/writing-kernels.md).
crates/kittens-runtime/examples/matmul.rs builds the same kernel in Rust."""
from kittens import tile

BM, BN, BK = 16, 16, 32


def matmul() -> tile.Program:
    k = tile.Builder(f"matmul_{BM}x{BN}x{BK}", waves=1)
    m, n, kk = k.param("m"), k.param("n"), k.param("k")
    a = k.global_("a", "bf16", [("m", m), ("k", kk)], "read")
    b = k.global_("b", "bf16", [("k", kk), ("n", n)], "read")
    c = k.global_("c", "f32", [("m", m), ("n", n)], "write")
    k.grid([m.ceil_div(BM), n.ceil_div(BN)], "row_major")
    i, j = k.block(0) * BM, k.block(1) * BN
    sa, sb = k.shared("sa", "bf16", BM, BK), k.shared("sb", "bf16", BK, BN)
    at = k.tile("a", "bf16", BM, BK, "row", "16x32")
    bt = k.tile("b", "bf16", BK, BN, "col", "32x16")
    acc = k.tile("acc", "f32", BM, BN, "col", "16x16")
    k.zero(acc)

    def step(s):  # acc += a[i:i+BM, s*BK:(s+1)*BK] @ b[s*BK:(s+1)*BK, j:j+BN]
        k.load_async(k.smem(sa, 0), k.gview(a, [i, s * BK], 0, 1, BM, BK))
        k.load_async(k.smem(sb, 0), k.gview(b, [s * BK, j], 0, 1, BK, BN))
        k.wait_async(0)
        k.barrier()  # the copies are visible to every wave of the block
        k.load(at, k.smem(sa, 0))
        k.load(bt, k.smem(sb, 0))
        k.wait_shared(0)
        k.barrier()  # every wave has read the tiles before the next step's copies overwrite them
        k.mma_ab(acc, at, bt, acc)

    k.for_range("s", 0, kk.ceil_div(BK), step)
    k.store(k.gview(c, [i, j], 0, 1, BM, BN), acc)
    return k.finish()


if __name__ == "__main__":
    import numpy as np

    m, n, kk = 37, 45, 100
    rng = np.random.default_rng(5)
    # Multiples of 1/64 below 2 in magnitude: exact in bf16 (the kernel reads bf16).
    a, b = rng.integers(-127, 128, (m, kk)) / 64, rng.integers(-127, 128, (kk, n)) / 64
    kern = tile.compile(matmul())
    got = kern.run({"a": a, "b": b}, m=m, n=n, k=kk)["c"]
    print(kern.name, "max |err| vs f64:", float(np.abs(got - a @ b).max()))
