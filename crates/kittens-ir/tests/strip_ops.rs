//! The ops the memory-bound kernels added: `random` (Philox uniforms at stream indices), the `ge` and
//! `rsqrt` maps, and vectors moved to and from global views; their validation.

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::*;
use kittens_tile::{BaseShape, Layout};

fn strip(k: &mut KernelBuilder, name: &str, dt: kittens_hw::dtype::DType, r: u32, c: u32) -> RegId {
    k.tile(name, dt, r, c, Layout::Row, BaseShape::STRIP)
}

/// Element (i, j) of a `random` tile is the Philox stream's uniform at `index0 + i·row_stride + j`,
/// with the seed and offset given as 32-bit words (a negative word is its bit pattern).
#[test]
fn random_draws_the_philox_stream_at_its_indices() {
    let mut k = KernelBuilder::new("rng", Schedule::Plain { waves: 1 });
    let w = [k.param("s0"), k.param("s1"), k.param("o0"), k.param("o1")];
    let out = k.global(
        "u",
        F32,
        &[("r", Expr::c(3)), ("c", Expr::c(10))],
        Access::Write,
    );
    let t = strip(&mut k, "u", F32, 3, 10);
    k.random(
        t,
        [w[0].clone(), w[1].clone()],
        [w[2].clone(), w[3].clone()],
        5,
        17,
    );
    k.store(k.gtile(out, 3, 10, 0, 0), t);
    let kernel = k.finish().unwrap();
    let (seed, offset) = (0x89ab_cdef_0123_4567u64, 0x0000_0002_ffff_fff0u64);
    let word = |v: u64, hi: bool| i64::from((if hi { v >> 32 } else { v }) as u32 as i32);
    let params = [
        word(seed, false),
        word(seed, true),
        word(offset, false),
        word(offset, true),
    ];
    let mut tensors = vec![vec![f32::NAN; 30]];
    interp::run(&kernel, &params, &mut tensors).unwrap();
    for i in 0..3u64 {
        for j in 0..10u64 {
            let want = philox::uniform(philox::stream(seed, offset, 5 + i * 17 + j));
            assert_eq!(tensors[0][(i * 10 + j) as usize], want, "({i}, {j})");
        }
    }
    // Uniforms in [0, 1), and not all equal.
    assert!(tensors[0].iter().all(|u| (0.0..1.0).contains(u)));
    assert!(tensors[0].iter().any(|u| *u != tensors[0][0]));
}

#[test]
fn ge_and_rsqrt_maps() {
    let mut k = KernelBuilder::new("maps", Schedule::Plain { waves: 1 });
    let x = k.global(
        "x",
        F32,
        &[("r", Expr::c(1)), ("c", Expr::c(4))],
        Access::Read,
    );
    let y = k.global(
        "y",
        F32,
        &[("r", Expr::c(2)), ("c", Expr::c(4))],
        Access::Write,
    );
    let t = strip(&mut k, "t", F32, 1, 4);
    let g = strip(&mut k, "g", F32, 1, 4);
    k.load_global(t, k.gtile(x, 1, 4, 0, 0));
    k.ge(g, t, 0.5);
    k.rsqrt(t, t);
    k.store(k.gtile(y, 1, 4, 0, 0), g);
    k.store(k.gtile(y, 1, 4, 1, 0), t);
    let kernel = k.finish().unwrap();
    let mut tensors = vec![vec![0.25, 0.5, 4.0, 0.49], vec![0.0; 8]];
    interp::run(&kernel, &[], &mut tensors).unwrap();
    assert_eq!(
        tensors[1],
        vec![
            0.0,
            1.0,
            1.0,
            0.0,
            2.0,
            1.0 / 0.5f32.sqrt(),
            0.5,
            1.0 / 0.49f32.sqrt()
        ]
    );
}

/// A column vector loads one row of a view and broadcasts along the columns of a tile.
#[test]
fn column_vectors_load_a_row_and_broadcast() {
    let mut k = KernelBuilder::new("bias", Schedule::Plain { waves: 1 });
    let x = k.global(
        "x",
        F32,
        &[("r", Expr::c(2)), ("c", Expr::c(3))],
        Access::Read,
    );
    let b = k.global(
        "b",
        F32,
        &[("r", Expr::c(1)), ("c", Expr::c(3))],
        Access::Read,
    );
    let y = k.global(
        "y",
        F32,
        &[("r", Expr::c(2)), ("c", Expr::c(3))],
        Access::Write,
    );
    let t = strip(&mut k, "t", F32, 2, 3);
    let v = k.col_vec("b", t, F32);
    k.load_global(t, k.gtile(x, 2, 3, 0, 0));
    k.load_global(v, k.gtile(b, 1, 3, 0, 0));
    k.add_col(t, t, v);
    k.store(k.gtile(y, 2, 3, 0, 0), t);
    let kernel = k.finish().unwrap();
    let mut tensors = vec![
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        vec![10.0, 20.0, 30.0],
        vec![0.0; 6],
    ];
    interp::run(&kernel, &[], &mut tensors).unwrap();
    assert_eq!(tensors[2], vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
}

#[test]
fn validation_refuses_narrow_random_and_misshapen_vector_loads() {
    let mut k = KernelBuilder::new("bad", Schedule::Plain { waves: 1 });
    let t = strip(&mut k, "t", Bf16, 1, 8);
    k.random(t, [Expr::c(0), Expr::c(0)], [Expr::c(0), Expr::c(0)], 0, 8);
    let e = k.finish().unwrap_err().to_string();
    assert!(e.contains("random destination"), "{e}");

    let mut k = KernelBuilder::new("bad", Schedule::Plain { waves: 1 });
    let g = k.global(
        "b",
        F32,
        &[("r", Expr::c(1)), ("c", Expr::c(8))],
        Access::Read,
    );
    let t = strip(&mut k, "t", F32, 1, 8);
    let v = k.col_vec("b", t, F32);
    k.load_global(v, k.gtile(g, 1, 4, 0, 0));
    let e = k.finish().unwrap_err().to_string();
    assert!(e.contains("global view of a vector"), "{e}");
}
