//! RMSNorm written from scratch (docs/writing-kernels.md walks through it):
//! `y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w`, bf16 in and out, f32 inside.
//!
//! `cargo run --release -p kittens-runtime --example rmsnorm` on any machine: the tile program, the
//! CPU interpreter against an f64 reference, the race check, the lowering for gfx942, gfx950 and
//! sm_90a with the budgets (and the compilers' registers and spills where they are installed), and
//! the kernel written as a file for `kittens run|check|compile --kernel-file`.

mod common;

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

const EPS: f32 = 1e-6;

/// The tile program: `waves_per_row` waves share a row of `dim` (each a slice of `dim / waves_per_row`
/// columns, a *strip* tile: no matrix instruction, the row dealt to the lanes in 16-byte chunks), 4
/// rows per block. With several waves per row their partial sums of squares meet in shared memory.
fn rmsnorm(dim: u32, waves_per_row: u32) -> Kernel {
    let rows_per_block = 4;
    let slice = dim / waves_per_row;
    let mut k = KernelBuilder::new(
        &format!("rmsnorm_d{dim}_w{waves_per_row}"),
        Schedule::Plain {
            waves: rows_per_block * waves_per_row,
        },
    );
    // Declarations: one parameter, three tensors (the weight broadcast to every row by a zero stride).
    let rows = k.param("rows");
    let d = Expr::c(i64::from(dim));
    let shape = [("row", rows.clone()), ("col", d.clone())];
    let x = k.global("x", Bf16, &shape, Access::Read);
    let w = k.global_strided(
        "w",
        Bf16,
        &shape,
        vec![Expr::c(0), Expr::c(1)],
        Access::Read,
    );
    let y = k.global("y", Bf16, &shape, Access::Write);
    k.grid(
        vec![rows.ceil_div(i64::from(rows_per_block))],
        GridOrder::RowMajor,
    );
    // This wave's row and its slice of the columns.
    let wpr = i64::from(waves_per_row);
    let (row_in_block, part) = (k.wave() / wpr, k.wave() % wpr);
    let row = k.block(0) * i64::from(rows_per_block) + row_in_block.clone();
    let col0 = part.clone() * i64::from(slice);
    let view = |k: &KernelBuilder, g| k.gview(g, vec![row.clone(), col0.clone()], 0, 1, 1, slice);
    // Registers (per wave): the slice in f32, its squares, the weight, one value per row.
    let h = k.tile("h", F32, 1, slice, Layout::Row, BaseShape::STRIP);
    let sq = k.tile("sq", F32, 1, slice, Layout::Row, BaseShape::STRIP);
    let wv = k.col_vec("wv", h, F32);
    let ms = k.row_vec("ms", h, F32);

    k.load_global(h, view(&k, x)); // bf16 → f32
    k.mul(sq, h, h);
    k.row_sum(ms, sq); // over this wave's slice
    if waves_per_row > 1 {
        // The block-wide row sum: each wave stores its partial, a barrier, each wave reads the row's.
        let partials = k.shared(
            "partials",
            F32,
            rows_per_block,
            waves_per_row,
            Swizzle::None,
            1,
        );
        k.row_sum_across_waves(ms, partials, 0, row_in_block, part, waves_per_row);
    }
    k.mul(ms, ms, 1.0 / dim as f32);
    k.add(ms, ms, EPS);
    k.rsqrt(ms, ms);
    k.mul_row(h, h, ms);
    k.load_global(wv, view(&k, w));
    k.mul_col(h, h, wv);
    k.store(view(&k, y), h); // rounded to bf16 (RTNE)
    k.finish().expect("rmsnorm builds")
}

/// The f64 reference on the same (bf16) inputs.
fn reference(x: &[f32], w: &[f32], rows: usize, dim: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * dim];
    for r in 0..rows {
        let xr = &x[r * dim..(r + 1) * dim];
        let ms = xr.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / dim as f64;
        let inv = 1.0 / (ms + f64::from(EPS)).sqrt();
        for c in 0..dim {
            y[r * dim + c] = f64::from(xr[c]) * inv * f64::from(w[c]);
        }
    }
    y
}

fn main() {
    let (rows, dim) = (37usize, 1024u32);
    let k = rmsnorm(dim, 1);
    println!("{k}");

    // The interpreter (which runs the race check first and refuses a racy kernel) against f64.
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
    let n = rows * dim as usize;
    let x = kittens_kernels::problem::random(&mut rng, n, Bf16);
    let w = kittens_kernels::problem::random(&mut rng, dim as usize, Bf16);
    let params = [rows as i64];
    for k in [&k, &rmsnorm(dim, 2)] {
        let mut t = vec![x.clone(), w.clone(), vec![f32::NAN; n]];
        kittens_ir::interp::run(k, &params, &mut t).expect("the interpreter runs it");
        let e = kittens_kernels::reference::compare(&t[2], &reference(&x, &w, rows, dim as usize));
        println!(
            "{}: interpreter vs f64: rel_err {:.2e}, max_rel {:.2e}",
            k.name, e.rel_err, e.max_rel
        );
        assert!(e.rel_err < 1e-2, "rel_err {}", e.rel_err);
        assert_eq!(common::race_check(k, &params), 0);
    }

    // The race check at work: without the barrier the analysis names the hazard and the interpreter
    // refuses to run the kernel (its one wave order would hide the race).
    let split = rmsnorm(dim, 2);
    let barrier = split
        .ops()
        .iter()
        .find(|o| matches!(o.op, kittens_ir::Op::Barrier { .. }))
        .map(|o| o.index)
        .expect("the split kernel has a barrier");
    let racy = split.without_op(barrier).expect("op exists");
    assert!(common::race_check(&racy, &params) > 0);
    let mut t = vec![x.clone(), w.clone(), vec![0.0; n]];
    match kittens_ir::interp::run(&racy, &params, &mut t) {
        Err(e) => println!("without op #{barrier}: {e}"),
        Ok(_) => panic!("a racy kernel ran"),
    }

    // Lowering: one wave per row of 1024 fits every target; one wave per row of 4096 (the first
    // RMSNorm of the issue) is over the register budget and refused, naming the tiles that cost
    // most; two waves per row fit.
    common::lowering_report(&k);
    assert!(common::lowering_report(&rmsnorm(4096, 1)).len() < 3);
    common::lowering_report(&rmsnorm(4096, 2));
    // One configuration for every target: the row length alone, the split over waves derived for
    // every wave width at once (at most 32 values per lane on NVIDIA's 32-lane warps, so 16 on AMD's
    // 64-lane wavefronts): the same program lowers for gfx942, gfx950 and sm_90a.
    let s = kittens_ir::strips::RowSplit::any_width(4096, 32, 4);
    println!("RowSplit::any_width(4096, 32, 4) = {s:?}");
    let one = rmsnorm(4096, s.waves_per_row);
    assert_eq!(
        common::lowering_report(&one).len(),
        3,
        "one program, every target"
    );
    common::write_kernel_file(&k);
}
