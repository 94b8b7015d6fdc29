//! The interpreter's contract on tensors: a store to a read-only tensor is refused before anything
//! runs, read-only tensors are never modified (not even rounded), and sizes that overflow are errors.

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::interp::{self, InterpError};
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::*;
use kittens_tile::{BaseShape, Layout};

const R: u32 = 16;
const C: u32 = 32;

/// `y = x` over one 16×32 tile, and, when `overwrite_input`, also `x = 2·x`: the deliberately bad
/// kernel whose output would overwrite its input (and make an f64 check computed from the tensors after
/// the run compare the output with itself).
fn copy_kernel(x_dtype: kittens_hw::dtype::DType, overwrite_input: bool) -> Kernel {
    let mut k = KernelBuilder::new("copy", Schedule::Plain { waves: 1 });
    let dims = [("r", Expr::c(R as i64)), ("c", Expr::c(C as i64))];
    let gx = k.global("x", x_dtype, &dims, Access::Read);
    let gy = k.global("y", F32, &dims, Access::Write);
    let t = k.tile("t", F32, R, C, Layout::Row, BaseShape::S16X32);
    k.load_global(t, k.gtile(gx, R, C, 0, 0));
    k.store(k.gtile(gy, R, C, 0, 0), t);
    if overwrite_input {
        k.mul(t, t, 2.0);
        k.store(k.gtile(gx, R, C, 0, 0), t);
    }
    k.finish()
        .expect("the builder accepts it; the interpreter must not")
}

fn inputs() -> Vec<Vec<f32>> {
    let n = (R * C) as usize;
    let x = (0..n).map(|i| (i as f32 - 200.0) / 64.0).collect();
    vec![x, vec![0.0; n]]
}

#[test]
fn store_to_read_only_tensor_is_refused() {
    let k = copy_kernel(F32, true);
    let mut t = inputs();
    let before = t.clone();
    let e = interp::run(&k, &[], &mut t).unwrap_err();
    match &e {
        InterpError::WriteToReadOnly { tensor, op, .. } => {
            assert_eq!(tensor, "x");
            assert!(matches!(k.op(*op), Some(Op::StoreGlobal { .. })), "{e}");
        }
        other => panic!("expected WriteToReadOnly, got {other:?}"),
    }
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(t, before, "nothing ran");
    // The same kernel without the bad store runs.
    let mut t = inputs();
    interp::run(&copy_kernel(F32, false), &[], &mut t).unwrap();
    assert_eq!(t[1], t[0]);
}

/// A read-only bf16 tensor holding values bf16 cannot represent: the kernel reads them rounded (as a
/// device buffer of bf16 would hold them), and the caller's buffer is left exactly as it was.
#[test]
fn read_only_tensor_is_read_rounded_and_left_untouched() {
    let k = copy_kernel(Bf16, false);
    let mut t = inputs();
    t[0][0] = 1.0 + 2f32.powi(-10); // between two bf16 values: rounds to 1.0
    t[0][1] = 3.0e-3;
    let before = t[0].clone();
    assert_ne!(round(t[0][0], Bf16, Rounding::Rtne), t[0][0]);
    interp::run(&k, &[], &mut t).unwrap();
    assert_eq!(t[0], before, "read-only input modified");
    assert_eq!(t[1][0], 1.0);
    for (y, x) in t[1].iter().zip(&before) {
        assert_eq!(*y, round(*x, Bf16, Rounding::Rtne));
    }
}

/// A tensor whose extent overflows i64 is an error before any buffer is looked at or allocated; so is
/// a grid whose block count overflows.
#[test]
fn overflowing_sizes_are_errors() {
    let mut k = KernelBuilder::new("big", Schedule::Plain { waves: 1 });
    let n = k.param("n");
    let g = k.global(
        "x",
        F32,
        &[("r", n.clone()), ("c", n.clone())],
        Access::Write,
    );
    let t = k.tile("t", F32, R, C, Layout::Row, BaseShape::S16X32);
    k.grid(vec![n.clone(), n.clone()], GridOrder::RowMajor);
    k.zero(t);
    k.store(k.gtile(g, R, C, 0, 0), t);
    let kernel = k.finish().unwrap();
    let e = interp::run(&kernel, &[1 << 40], &mut [vec![]]).unwrap_err();
    assert!(matches!(e, InterpError::Overflow { .. }), "{e:?}");
    assert!(e.to_string().contains("`x`"), "{e}");

    let mut k = KernelBuilder::new("grid", Schedule::Plain { waves: 1 });
    let n = k.param("n");
    k.global("x", F32, &[("r", Expr::c(1))], Access::Write);
    k.grid(vec![n.clone(), n.clone(), n], GridOrder::RowMajor);
    let kernel = k.finish().unwrap();
    let e = interp::run(&kernel, &[1 << 22], &mut [vec![0.0]]).unwrap_err();
    assert!(
        matches!(&e, InterpError::Overflow { what } if what.contains("grid")),
        "{e:?}"
    );
}
