//! A tiled GEMM over K (docs/writing-kernels.md): `c = a·b`, `a` of `m × k` and `b` of `k × n` in
//! bf16, `c` in f32, all three sizes run-time parameters. Each one-wave block computes one 16×16 tile
//! of `c`, accumulating 16×32 by 32×16 products along K in a loop: each step copies its tiles of `a`
//! and `b` global → shared asynchronously, waits, and loads them into registers (reads past the
//! edges are zero). A plain program: it lowers for gfx942/gfx950 (MFMA) and for sm_90a (`mma.sync`
//! per warp, `kittens_codegen::strip::lower_plain`).
//!
//! `cargo run --release -p kittens-runtime --example matmul`: the tile program, the interpreter
//! against f64, the race check, the lowering report for every target, the kernel file
//! (python/examples/matmul.py builds the same kernel from Python; python/tests/test_tile.py compares
//! the two files).

mod common;

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

const BM: u32 = 16;
const BN: u32 = 16;
const BK: u32 = 32;

fn matmul() -> Kernel {
    let mut k = KernelBuilder::new(
        &format!("matmul_{BM}x{BN}x{BK}"),
        Schedule::Plain { waves: 1 },
    );
    let (m, n, kk) = (k.param("m"), k.param("n"), k.param("k"));
    let a = k.global(
        "a",
        Bf16,
        &[("m", m.clone()), ("k", kk.clone())],
        Access::Read,
    );
    let b = k.global(
        "b",
        Bf16,
        &[("k", kk.clone()), ("n", n.clone())],
        Access::Read,
    );
    let c = k.global(
        "c",
        F32,
        &[("m", m.clone()), ("n", n.clone())],
        Access::Write,
    );
    k.grid(
        vec![m.ceil_div(i64::from(BM)), n.ceil_div(i64::from(BN))],
        GridOrder::RowMajor,
    );
    let (i, j) = (k.block(0) * i64::from(BM), k.block(1) * i64::from(BN));
    let sa = k.shared("sa", Bf16, BM, BK, Swizzle::None, 1);
    let sb = k.shared("sb", Bf16, BK, BN, Swizzle::None, 1);
    let at = k.tile("a", Bf16, BM, BK, Layout::Row, BaseShape::S16X32);
    let bt = k.tile("b", Bf16, BK, BN, Layout::Col, BaseShape::S32X16);
    let acc = k.tile("acc", F32, BM, BN, Layout::Col, BaseShape::S16X16);
    k.zero(acc);
    // acc += a[i:i+BM, s·BK:(s+1)·BK] · b[s·BK:(s+1)·BK, j:j+BN]
    k.for_range("s", 0, kk.ceil_div(i64::from(BK)), |k, s| {
        let s = s * i64::from(BK);
        k.load_async(
            k.smem(sa, 0),
            k.gview(a, vec![i.clone(), s.clone()], 0, 1, BM, BK),
        );
        k.load_async(k.smem(sb, 0), k.gview(b, vec![s, j.clone()], 0, 1, BK, BN));
        k.wait_async(0);
        k.barrier(); // the copies are visible to every wave of the block
        k.load(at, k.smem(sa, 0));
        k.load(bt, k.smem(sb, 0));
        k.wait_shared(0);
        k.barrier(); // every wave has read the tiles before the next step's copies overwrite them
        k.mma_ab(acc, at, bt, acc);
    });
    k.store(k.gview(c, vec![i, j], 0, 1, BM, BN), acc);
    k.finish().expect("matmul builds")
}

fn main() {
    let (m, n, kk) = (37usize, 45usize, 100usize);
    let k = matmul();
    println!("{k}");
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(5);
    let a = kittens_kernels::problem::random_scaled(&mut rng, m * kk, Bf16, 2.0);
    let b = kittens_kernels::problem::random_scaled(&mut rng, kk * n, Bf16, 2.0);
    let params = [m as i64, n as i64, kk as i64];
    let mut t = vec![a.clone(), b.clone(), vec![f32::NAN; m * n]];
    kittens_ir::interp::run(&k, &params, &mut t).expect("the interpreter runs it");
    let want: Vec<f64> = (0..m * n)
        .map(|x| {
            let (r, c) = (x / n, x % n);
            (0..kk)
                .map(|q| f64::from(a[r * kk + q]) * f64::from(b[q * n + c]))
                .sum()
        })
        .collect();
    let e = kittens_kernels::reference::compare(&t[2], &want);
    println!(
        "{}: interpreter vs f64: rel_err {:.2e}, max_rel {:.2e}",
        k.name, e.rel_err, e.max_rel
    );
    assert!(e.rel_err < 1e-5, "rel_err {}", e.rel_err);
    assert_eq!(common::race_check(&k, &params), 0);
    assert_eq!(common::lowering_report(&k).len(), 3, "fits every target");
    common::write_kernel_file(&k);
}
