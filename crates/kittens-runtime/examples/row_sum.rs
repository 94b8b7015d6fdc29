//! A row sum with a loop (docs/writing-kernels.md): `y[r] = Σ_c x[r, c]` for `x` of `rows × cols`,
//! both run-time parameters. One wave per row walks the row in strips of `step` columns; the first
//! strip starts the sum (`row_sum`) and the later ones add to it (`row_sum_acc`), a conditional on
//! the loop variable. Columns past `cols` read zero, so the last strip may overhang the row.
//!
//! `cargo run --release -p kittens-runtime --example row_sum`: the tile program, the interpreter
//! against f64, the race check, the lowering report for gfx942, gfx950 and sm_90a, the kernel file
//! (python/examples/row_sum.py builds the same kernel from Python; python/tests/test_tile.py
//! compares the two files).

mod common;

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

/// 4 waves (rows) per block, strips of `step` columns.
fn row_sum(step: u32) -> Kernel {
    let waves = 4;
    let mut k = KernelBuilder::new(&format!("row_sum_s{step}"), Schedule::Plain { waves });
    let (rows, cols) = (k.param("rows"), k.param("cols"));
    let x = k.global(
        "x",
        Bf16,
        &[("row", rows.clone()), ("col", cols.clone())],
        Access::Read,
    );
    let y = k.global(
        "y",
        F32,
        &[("row", rows.clone()), ("one", Expr::c(1))],
        Access::Write,
    );
    k.grid(vec![rows.ceil_div(i64::from(waves))], GridOrder::RowMajor);
    let row = k.block(0) * i64::from(waves) + k.wave();
    let t = k.tile("t", F32, 1, step, Layout::Row, BaseShape::STRIP);
    let acc = k.row_vec("acc", t, F32);
    k.for_range("c", 0, cols.ceil_div(i64::from(step)), |k, c| {
        let col = c.clone() * i64::from(step);
        k.load_global(t, k.gview(x, vec![row.clone(), col], 0, 1, 1, step));
        k.if_else(
            c.eq(0),
            |k| k.row_sum(acc, t),
            |k| k.row_sum_acc(acc, t, acc),
        );
    });
    k.store(k.gview(y, vec![row, Expr::c(0)], 0, 1, 1, 1), acc);
    k.finish().expect("row_sum builds")
}

fn main() {
    let (rows, cols, step) = (37usize, 1000usize, 256u32);
    let k = row_sum(step);
    println!("{k}");
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(3);
    let x = kittens_kernels::problem::random_scaled(&mut rng, rows * cols, Bf16, 4.0);
    let params = [rows as i64, cols as i64];
    let mut t = vec![x.clone(), vec![f32::NAN; rows]];
    kittens_ir::interp::run(&k, &params, &mut t).expect("the interpreter runs it");
    let want: Vec<f64> = (0..rows)
        .map(|r| x[r * cols..][..cols].iter().map(|&v| f64::from(v)).sum())
        .collect();
    let e = kittens_kernels::reference::compare(&t[1], &want);
    println!(
        "{}: interpreter vs f64: rel_err {:.2e}, max_rel {:.2e}",
        k.name, e.rel_err, e.max_rel
    );
    assert!(e.rel_err < 1e-5, "rel_err {}", e.rel_err);
    assert_eq!(common::race_check(&k, &params), 0);
    assert_eq!(common::lowering_report(&k).len(), 3, "fits every target");
    common::write_kernel_file(&k);
}
