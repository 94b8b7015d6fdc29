//! SwiGLU written from scratch (docs/writing-kernels.md): `out[r, j] = silu(g[r, j]) · u[r, j]` where
//! `g` and `u` are the two halves of each row of `x` (`[rows, 2F]`, gate first) and
//! `silu(v) = v · sigmoid(v) = v / (1 + e^(−v))`, the language's `silu` op.
//!
//! `cargo run --release -p kittens-runtime --example swiglu`: the tile program, the interpreter
//! against f64, the race check, the lowering report for gfx942, gfx950 and sm_90a, the kernel file.

mod common;

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

/// One wave per row, 4 rows per block; each row's two halves are strips of `f` columns.
fn swiglu(f: u32) -> Kernel {
    let mut k = KernelBuilder::new(&format!("swiglu_f{f}"), Schedule::Plain { waves: 4 });
    let rows = k.param("rows");
    let ff = i64::from(f);
    let x = k.global(
        "x",
        Bf16,
        &[("row", rows.clone()), ("col", Expr::c(2 * ff))],
        Access::Read,
    );
    let out = k.global(
        "out",
        Bf16,
        &[("row", rows.clone()), ("col", Expr::c(ff))],
        Access::Write,
    );
    k.grid(vec![rows.ceil_div(4)], GridOrder::RowMajor);
    let row = k.block(0) * 4 + k.wave();
    let strip =
        |k: &mut KernelBuilder, name: &str| k.tile(name, F32, 1, f, Layout::Row, BaseShape::STRIP);
    let (g, u, s) = (strip(&mut k, "g"), strip(&mut k, "u"), strip(&mut k, "s"));
    k.load_global(g, k.gview(x, vec![row.clone(), Expr::c(0)], 0, 1, 1, f));
    k.load_global(u, k.gview(x, vec![row.clone(), Expr::c(ff)], 0, 1, 1, f));
    k.silu(s, g);
    k.mul(s, s, u);
    k.store(k.gview(out, vec![row, Expr::c(0)], 0, 1, 1, f), s);
    k.finish().expect("swiglu builds")
}

fn reference(x: &[f32], rows: usize, f: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * f];
    for r in 0..rows {
        for j in 0..f {
            let (g, u) = (f64::from(x[r * 2 * f + j]), f64::from(x[r * 2 * f + f + j]));
            y[r * f + j] = g / (1.0 + (-g).exp()) * u;
        }
    }
    y
}

fn main() {
    let (rows, f) = (37usize, 1024u32);
    let k = swiglu(f);
    println!("{k}");
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(2);
    // Inputs of ±4: the sigmoid's tails, where exp(−g) is large, are exercised too.
    let x = kittens_kernels::problem::random_scaled(&mut rng, rows * 2 * f as usize, Bf16, 4.0);
    let params = [rows as i64];
    let mut t = vec![x.clone(), vec![f32::NAN; rows * f as usize]];
    kittens_ir::interp::run(&k, &params, &mut t).expect("the interpreter runs it");
    let e = kittens_kernels::reference::compare(&t[1], &reference(&x, rows, f as usize));
    println!(
        "{}: interpreter vs f64: rel_err {:.2e}, max_rel {:.2e}",
        k.name, e.rel_err, e.max_rel
    );
    assert!(e.rel_err < 1e-2, "rel_err {}", e.rel_err);
    assert_eq!(common::race_check(&k, &params), 0);
    assert_eq!(common::lowering_report(&k).len(), 3, "fits every target");
    common::write_kernel_file(&k);
}
