//! The CPU interpreter's semantics: mma forms, elementwise and reduction ops, rounding modes, bounds,
//! and async loads that land only at a covering wait.

use kittens_hw::dtype::DType::{self, Bf16, F32};
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::*;
use kittens_tile::{BaseShape, Layout, Swizzle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut SmallRng, n: usize, dt: DType) -> Vec<f32> {
    (0..n)
        .map(|_| round(rng.gen_range(-1.0f32..1.0), dt, Rounding::Rtne))
        .collect()
}

fn mat(k: &mut KernelBuilder, name: &str, dt: DType, r: i64, c: i64, access: Access) -> GlobalId {
    k.global(name, dt, &[("r", Expr::c(r)), ("c", Expr::c(c))], access)
}

/// Every mma form on a one-wave kernel against an f64 product of the same bf16 inputs.
#[test]
fn mma_forms_match_f64() {
    let (m, n, kk) = (32usize, 16usize, 64usize);
    let mut rng = SmallRng::seed_from_u64(1);
    for form in [MmaForm::Ab, MmaForm::Abt, MmaForm::Atb, MmaForm::Atbt] {
        let (ar, ac) = if form.a_transposed() {
            (kk, m)
        } else {
            (m, kk)
        };
        let (br, bc) = if form.b_transposed() {
            (n, kk)
        } else {
            (kk, n)
        };
        let la = if form.a_transposed() {
            Layout::Col
        } else {
            Layout::Row
        };
        let lb = if form.b_transposed() {
            Layout::Row
        } else {
            Layout::Col
        };
        let mut k = KernelBuilder::new("mma", Schedule::Plain { waves: 1 });
        let ga = mat(&mut k, "a", Bf16, ar as i64, ac as i64, Access::Read);
        let gb = mat(&mut k, "b", Bf16, br as i64, bc as i64, Access::Read);
        let gc = mat(&mut k, "c", F32, m as i64, n as i64, Access::Write);
        let base = |l| {
            if l == Layout::Row {
                BaseShape::S16X32
            } else {
                BaseShape::S32X16
            }
        };
        let a = k.tile("a", Bf16, ar as u32, ac as u32, la, base(la));
        let b = k.tile("b", Bf16, br as u32, bc as u32, lb, base(lb));
        let c = k.tile("c", F32, m as u32, n as u32, Layout::Col, BaseShape::S16X16);
        k.load_global(a, k.gtile(ga, ar as u32, ac as u32, 0, 0));
        k.load_global(b, k.gtile(gb, br as u32, bc as u32, 0, 0));
        k.mma(form, c, MmaOperand::Reg(a), MmaOperand::Reg(b), None);
        k.store(k.gtile(gc, m as u32, n as u32, 0, 0), c);
        let kernel = k.finish().unwrap();
        let (va, vb) = (
            random(&mut rng, ar * ac, Bf16),
            random(&mut rng, br * bc, Bf16),
        );
        let mut t = vec![va.clone(), vb.clone(), vec![0.0; m * n]];
        interp::run(&kernel, &[], &mut t).unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..kk)
                    .map(|x| {
                        let a = if form.a_transposed() {
                            va[x * ac + i]
                        } else {
                            va[i * ac + x]
                        };
                        let b = if form.b_transposed() {
                            vb[j * bc + x]
                        } else {
                            vb[x * bc + j]
                        };
                        a as f64 * b as f64
                    })
                    .sum();
                assert!(
                    (t[2][i * n + j] as f64 - want).abs() < 1e-5,
                    "{form:?} ({i},{j})"
                );
            }
        }
    }
}

/// `softmax` along rows with `row_max`, `sub_row`, `exp2`, `row_sum`, `div_row` against f64.
#[test]
fn row_softmax_matches_f64() {
    let (r, c) = (16usize, 48usize);
    let mut k = KernelBuilder::new("softmax", Schedule::Plain { waves: 1 });
    let gx = mat(&mut k, "x", F32, r as i64, c as i64, Access::Read);
    let gy = mat(&mut k, "y", F32, r as i64, c as i64, Access::Write);
    let x = k.tile("x", F32, r as u32, c as u32, Layout::Row, BaseShape::S16X16);
    let mx = k.row_vec("mx", x, F32);
    let sum = k.row_vec("sum", x, F32);
    k.load_global(x, k.gtile(gx, r as u32, c as u32, 0, 0));
    k.row_max(mx, x);
    k.sub_row(x, x, mx);
    k.exp2(x, x);
    k.row_sum(sum, x);
    k.div_row(x, x, sum);
    k.store(k.gtile(gy, r as u32, c as u32, 0, 0), x);
    let kernel = k.finish().unwrap();
    let v = random(&mut SmallRng::seed_from_u64(2), r * c, F32);
    let mut t = vec![v.clone(), vec![0.0; r * c]];
    interp::run(&kernel, &[], &mut t).unwrap();
    for i in 0..r {
        let row = &v[i * c..(i + 1) * c];
        let m = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let s: f64 = row.iter().map(|&x| (x as f64 - m).exp2()).sum();
        for j in 0..c {
            let want = (row[j] as f64 - m).exp2() / s;
            assert!((t[1][i * c + j] as f64 - want).abs() < 1e-6);
        }
    }
}

/// `convert` rounds with the op's mode, exactly as `numerics::round` does.
#[test]
fn convert_uses_the_rounding_mode() {
    let n = 32usize;
    let mut v = random(&mut SmallRng::seed_from_u64(3), n * 16, F32);
    // Exact ties between two bf16 values (7 mantissa bits): RTNE and RTNA part ways only there.
    v[0] = 1.0 + 2f32.powi(-8);
    v[1] = -(0.5 + 2f32.powi(-9));
    let mut outs = Vec::new();
    for mode in Rounding::ALL {
        let mut k = KernelBuilder::new("cvt", Schedule::Plain { waves: 1 });
        let gx = mat(&mut k, "x", F32, n as i64, 16, Access::Read);
        let gy = mat(&mut k, "y", F32, n as i64, 16, Access::Write);
        let x = k.tile("x", F32, n as u32, 16, Layout::Row, BaseShape::S16X16);
        let y = k.tile("y", Bf16, n as u32, 16, Layout::Row, BaseShape::S16X16);
        k.load_global(x, k.gtile(gx, n as u32, 16, 0, 0));
        k.convert(y, x, mode);
        k.store(k.gtile(gy, n as u32, 16, 0, 0), y);
        let kernel = k.finish().unwrap();
        let mut t = vec![v.clone(), vec![0.0; n * 16]];
        interp::run(&kernel, &[], &mut t).unwrap();
        let want: Vec<f32> = v.iter().map(|&x| round(x, Bf16, mode)).collect();
        assert_eq!(t[1], want, "{mode:?}");
        outs.push(t.pop().unwrap());
    }
    assert!(
        outs[0] != outs[2] && outs[0] != outs[1],
        "the modes must disagree somewhere on these inputs"
    );
}

/// Every storage dtype: a register tile of that dtype holds exactly the RTNE-rounded f32 values, and a
/// store to an f32 tensor keeps them (fp8 included, HipKittens §4).
#[test]
fn register_tiles_hold_their_dtype() {
    let v = random(&mut SmallRng::seed_from_u64(5), 16 * 16, F32);
    for dt in [Bf16, DType::F16, DType::Fp8E4m3, DType::Fp8E5m2] {
        let mut k = KernelBuilder::new("dt", Schedule::Plain { waves: 1 });
        let gx = mat(&mut k, "x", F32, 16, 16, Access::Read);
        let gy = mat(&mut k, "y", F32, 16, 16, Access::Write);
        let y = k.tile("y", dt, 16, 16, Layout::Row, BaseShape::S16X16);
        k.load_global(y, k.gtile(gx, 16, 16, 0, 0));
        k.store(k.gtile(gy, 16, 16, 0, 0), y);
        let mut t = vec![v.clone(), vec![0.0; 256]];
        interp::run(&k.finish().unwrap(), &[], &mut t).unwrap();
        let want: Vec<f32> = v.iter().map(|&x| round(x, dt, Rounding::Rtne)).collect();
        assert_eq!(t[1], want, "{dt}");
        assert_ne!(t[1], v, "{dt} must lose precision");
    }
}

/// A 16×16 tile at tile (1, 1) of a 20×20 tensor: reads past the edge are zero, stores past it dropped.
#[test]
fn out_of_bounds_reads_zero_and_stores_drop() {
    let mut k = KernelBuilder::new("edge", Schedule::Plain { waves: 1 });
    let dim = k.param("dim");
    let gx = k.global(
        "x",
        F32,
        &[("r", dim.clone()), ("c", dim.clone())],
        Access::Read,
    );
    let gy = k.global("y", F32, &[("r", dim.clone()), ("c", dim)], Access::Write);
    let x = k.tile("x", F32, 16, 16, Layout::Row, BaseShape::S16X16);
    let sum = k.row_vec("s", x, F32);
    k.load_global(x, k.gtile(gx, 16, 16, 1, 1));
    k.row_sum(sum, x);
    k.add(x, x, 1.0);
    k.store(k.gtile(gy, 16, 16, 1, 1), x);
    let kernel = k.finish().unwrap();
    let v: Vec<f32> = (0..400).map(|i| i as f32).collect();
    let mut t = vec![v.clone(), vec![-1.0; 400]];
    interp::run(&kernel, &[20], &mut t).unwrap();
    for r in 0..20 {
        for c in 0..20 {
            let want = if r >= 16 && c >= 16 {
                v[r * 20 + c] + 1.0
            } else {
                -1.0
            };
            assert_eq!(t[1][r * 20 + c], want, "({r},{c})");
        }
    }
}

/// Two async loads into the two slots of a ring; `wait_async(n)` lands all but the `n` newest.
fn stale_kernel(wait: Option<u32>) -> Kernel {
    let mut k = KernelBuilder::new("stale", Schedule::Plain { waves: 4 });
    let gx = mat(&mut k, "x", Bf16, 64, 32, Access::Read);
    let gy = mat(&mut k, "y", F32, 64, 32, Access::Write);
    let s = k.shared("s", Bf16, 32, 32, Swizzle::None, 2);
    let r = k.tile("r", Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    k.load_async(k.smem(s, 0), k.gtile(gx, 32, 32, 0, 0));
    k.load_async(k.smem(s, 1), k.gtile(gx, 32, 32, 1, 0));
    if let Some(n) = wait {
        k.wait_async(n);
    }
    k.barrier();
    // Wave w reads rows 16·(w%2).. of slot w/2 and stores them where they came from.
    let w = k.wave();
    k.load(r, k.smem(s, &w / 2).sub(16, 32, &w % 2, 0));
    k.wait_shared(0);
    k.store(k.gtile(gy, 16, 32, w, 0), r);
    k.finish().unwrap()
}

#[test]
fn async_loads_land_only_at_a_covering_wait() {
    let v = random(&mut SmallRng::seed_from_u64(4), 64 * 32, Bf16);
    // Without a wait that lands both loads the kernel is racy: `run` refuses it, so the stale
    // reads are shown with `run_unchecked`.
    let run = |wait: Option<u32>| {
        let mut t = vec![v.clone(), vec![0.0; 64 * 32]];
        let k = stale_kernel(wait);
        if wait == Some(0) {
            interp::run(&k, &[], &mut t).unwrap();
        } else {
            let e = interp::run(&k, &[], &mut t).unwrap_err();
            assert!(matches!(e, interp::InterpError::Race { .. }), "{e}");
            interp::run_unchecked(&k, &[], &mut t).unwrap();
        }
        t.pop().unwrap()
    };
    assert_eq!(run(Some(0)), v, "all landed");
    assert!(
        run(None).iter().all(|&x| x == 0.0),
        "no wait: shared memory still holds its old zeros"
    );
    let one = run(Some(1));
    assert_eq!(one[..32 * 32], v[..32 * 32], "the older load landed");
    assert!(
        one[32 * 32..].iter().all(|&x| x == 0.0),
        "the newest is still in flight"
    );
}

#[test]
fn wrong_launch_arguments_are_errors() {
    let k = stale_kernel(Some(0));
    let e = interp::run(&k, &[], &mut [vec![0.0; 10], vec![0.0; 64 * 32]]).unwrap_err();
    assert!(
        matches!(
            e,
            interp::InterpError::TensorSize {
                need: 2048,
                got: 10,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        interp::run(&k, &[1], &mut []).unwrap_err(),
        interp::InterpError::Params { .. }
    ));
}

/// Wave 1 writes a shared tile that wave 0 then reads: with the barrier wave 0 sees the data; without
/// it, wave 0 runs to its end first (waves between two barriers run in wave order) and reads zeros —
/// which is why `interp::run` refuses the kernel without the barrier.
fn handoff(barrier: bool) -> Vec<f32> {
    let mut k = KernelBuilder::new("handoff", Schedule::Plain { waves: 2 });
    let gy = mat(&mut k, "y", F32, 16, 16, Access::Write);
    let s = k.shared("s", F32, 16, 16, Swizzle::None, 1);
    let r = k.tile("r", F32, 16, 16, Layout::Row, BaseShape::S16X16);
    k.if_(k.wave().eq(1), |k| {
        k.fill(r, 7.0);
        k.store_shared(k.smem(s, 0), r);
        k.wait_shared(0);
    });
    if barrier {
        k.barrier();
    }
    k.if_(k.wave().eq(0), |k| {
        k.load(r, k.smem(s, 0));
        k.wait_shared(0);
        k.store(k.gtile(gy, 16, 16, 0, 0), r);
    });
    let mut t = vec![vec![0.0; 256]];
    let k = k.finish().unwrap();
    if barrier {
        interp::run(&k, &[], &mut t).unwrap();
    } else {
        // Racy: refused by `run`, shown with `run_unchecked`.
        assert!(interp::run(&k, &[], &mut t).is_err());
        interp::run_unchecked(&k, &[], &mut t).unwrap();
    }
    t.pop().unwrap()
}

#[test]
fn barriers_order_waves() {
    assert!(handoff(true).iter().all(|&x| x == 7.0));
    assert!(handoff(false).iter().all(|&x| x == 0.0));
}

/// Barriers that can never all be met are reported, not hung on.
#[test]
fn mismatched_barrier_scopes_deadlock() {
    let mut k = KernelBuilder::new("dead", Schedule::Plain { waves: 4 });
    k.if_else(
        k.wave().eq(0),
        |k| k.barrier_by(Scope::WarpGroup),
        |k| k.barrier(),
    );
    let e = interp::run(&k.finish().unwrap(), &[], &mut []).unwrap_err();
    assert!(e.to_string().contains("deadlock"), "{e}");
}

/// A two-wave hand-off through shared memory: wave 0 writes a row, a barrier, wave 1 reads it back
/// and stores it. Without the barrier the schedule analysis finds the race and the interpreter refuses
/// the kernel (its one wave order would hand the row over anyway and hide the bug);
/// `run_unchecked` still runs it.
#[test]
fn the_interpreter_refuses_a_kernel_with_a_race() {
    let mut k = KernelBuilder::new("handoff", Schedule::Plain { waves: 2 });
    let x = mat(&mut k, "x", F32, 1, 64, Access::Read);
    let y = mat(&mut k, "y", F32, 1, 64, Access::Write);
    let s = k.shared("s", F32, 1, 64, Swizzle::None, 1);
    let t = k.tile("t", F32, 1, 64, Layout::Row, BaseShape::STRIP);
    k.if_(k.wave().eq(0), |k| {
        k.load_global(t, k.gtile(x, 1, 64, 0, 0));
        k.store_shared(k.smem(s, 0), t);
        k.wait_shared(0);
    });
    k.barrier();
    k.if_(k.wave().eq(1), |k| {
        k.load(t, k.smem(s, 0));
        k.wait_shared(0);
        k.store(k.gtile(y, 1, 64, 0, 0), t);
    });
    let kernel = k.finish().unwrap();
    let input: Vec<f32> = (0..64).map(|i| i as f32 / 8.0).collect();
    let mut t = vec![input.clone(), vec![0.0; 64]];
    interp::run(&kernel, &[], &mut t).unwrap();
    assert_eq!(t[1], input);

    let barrier = kernel
        .ops()
        .into_iter()
        .find(|o| matches!(o.op, Op::Barrier { .. }))
        .unwrap()
        .index;
    let racy = kernel.without_op(barrier).unwrap();
    let mut t = vec![input.clone(), vec![0.0; 64]];
    let e = interp::run(&racy, &[], &mut t).unwrap_err();
    assert!(matches!(e, interp::InterpError::Race { .. }), "{e}");
    let m = e.to_string();
    assert!(m.contains("handoff") && m.contains("racy"), "{m}");
    assert!(m.contains("barrier"), "names the missing barrier: {m}");
    assert_eq!(t[1], vec![0.0; 64], "nothing ran");
    // The same verdict from the cache.
    assert!(interp::run(&racy, &[], &mut t).is_err());
    interp::run_unchecked(&racy, &[], &mut t).unwrap();
}
