//! Split-K reduced by the last block to finish each tile (`GemmConfig::last_block_reduces`, the
//! `Stmt::LastArrival` hand-off) on the interpreter: C equals the two-launch form's bit for bit (the
//! same sums in the same plane order) and meets the f64 rule, at sizes with partial tiles along M, N
//! and K; the counters are left zero; and the interpreter's model of the hand-off shows a read of
//! another block's stores made without it (it sees the launch's input, not the store).

use kittens_hw::dtype::DType;
use kittens_ir::{interp, Access, Expr, GridOrder, KernelBuilder, Schedule, Scope};
use kittens_kernels::exec::interpret;
use kittens_kernels::gemm::shapes::TILES;
use kittens_kernels::gemm::split_k::{build_reduce, COUNTERS, PARTIAL};
use kittens_kernels::gemm::{build, GemmConfig, GemmTypes, Scales};
use kittens_tile::{BaseShape, Layout};
use rand::{rngs::SmallRng, Rng, SeedableRng};

/// bf16-exact random values in [-1, 1).
fn operand(len: usize, rng: &mut SmallRng) -> Vec<f32> {
    (0..len)
        .map(|_| {
            let x: f32 = rng.gen_range(-1.0..1.0);
            f32::from_bits(x.to_bits() & 0xffff_0000)
        })
        .collect()
}

/// max |C − ref| / rms(ref) with `ref = scale · A·Bᵀ` in f64 (B `n × k`).
fn rel_err(c: &[f32], a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), scale: f64) -> f64 {
    let (mut worst, mut r2) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let exact: f64 = scale
                * (0..k)
                    .map(|p| a[i * k + p] as f64 * b[j * k + p] as f64)
                    .sum::<f64>();
            worst = worst.max((c[i * n + j] as f64 - exact).abs());
            r2 += exact * exact;
        }
    }
    worst / (r2 / (m * n) as f64).sqrt()
}

/// C of the one-launch form (checking that it declares partials, C and counters, and leaves the
/// counters zero) and of the two-launch form of the same configuration.
fn both_forms(
    cfg: &GemmConfig,
    inputs: &[Vec<f32>],
    (m, n, k): (usize, usize, usize),
) -> (Vec<f32>, Vec<f32>) {
    let params = [m as i64, n as i64, k as i64];
    let s = cfg.split_k as usize;
    let one = build(&GemmConfig {
        last_block_reduces: true,
        ..*cfg
    })
    .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let names: Vec<&str> = one.globals.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names[names.len() - 3..],
        ["c", PARTIAL, COUNTERS],
        "{names:?}"
    );
    let tiles = m.div_ceil(cfg.block_rows as usize) * n.div_ceil(cfg.block as usize);
    let mut t = inputs.to_vec();
    t.push(vec![f32::NAN; m * n]);
    t.push(vec![f32::NAN; s * m * n]);
    t.push(vec![0.0; tiles]);
    interp::run(&one, &params, &mut t).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let counters = t.pop().expect("counters");
    assert!(counters.iter().all(|&x| x == 0.0), "{counters:?}");
    t.pop().expect("partials");
    let c_one = t.pop().expect("c");

    let two = build(cfg).expect("two-launch gemm");
    let (partial, _) = interpret(&two, &params, inputs.to_vec(), &[s * m * n]).expect("gemm");
    let reduce = build_reduce(cfg.split_k, cfg.types.output, 32).expect("reduce");
    let (c_two, _) = interpret(&reduce, &params[..2], vec![partial], &[m * n]).expect("reduce");
    (c_one, c_two)
}

/// The 64- and 128-row blocks of the small-M shapes, split 2, 3 and 4, bf16 and f32 output: the
/// same C as the reduction launch, within the rule of the two-launch test (f32: accumulation order
/// only; bf16: the one rounding of the sum).
#[test]
fn the_last_block_reduces_as_the_second_launch_did() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rng = SmallRng::seed_from_u64(37);
    for tile in TILES.iter().filter(|t| t.rows <= 128) {
        for (split, output) in [(2, DType::Bf16), (3, DType::F32), (4, DType::Bf16)] {
            let cfg = GemmConfig {
                split_k: split,
                types: GemmTypes {
                    output,
                    ..GemmTypes::BF16
                },
                ..tile.config(h100)
            };
            for (m, n, k) in [(40, 136, 5 * 64 + 24), (tile.rows as usize + 24, 72, 200)] {
                let (a, b) = (operand(m * k, &mut rng), operand(n * k, &mut rng));
                let (one, two) = both_forms(&cfg, &[a.clone(), b.clone()], (m, n, k));
                let same = one
                    .iter()
                    .zip(&two)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{tile} split {split} {m}x{n}x{k}: C differs");
                let e = rel_err(&one, &a, &b, (m, n, k), 1.0);
                let bound = if output == DType::F32 { 1e-5 } else { 2e-2 };
                assert!(e < bound, "{tile} split {split} {m}x{n}x{k}: {e:e}");
            }
        }
    }
}

/// The FP8 GEMM's small-M configuration (64-row blocks, promotion every K step, per-tensor scales)
/// split in 3 and reduced by its last block: the scaled partials add up to the scaled product.
#[test]
fn fp8_split_reduced_by_the_last_block() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let (m, n, k) = (24, 200, 5 * 128 + 48);
    // The configuration for this M: A in a box of 32 rows (`GemmConfig::a_rows`).
    let base = GemmConfig::fp8_for_shape(GemmConfig::fp8_for_gpu(h100), h100, m as u64);
    assert_eq!(base.a_rows, 32);
    let cfg = GemmConfig {
        split_k: 3,
        block: 128,
        types: GemmTypes {
            scales: Some(Scales::PerTensor),
            ..base.types
        },
        ..base
    };
    let mut rng = SmallRng::seed_from_u64(38);
    // Small integers times 1/8 are exact in e4m3.
    let mut e4m3 = |len| -> Vec<f32> {
        (0..len)
            .map(|_| f32::from(rng.gen_range(-12i8..=12)) / 8.0)
            .collect()
    };
    let (a, b) = (e4m3(m * k), e4m3(n * k));
    let (sa, sb) = (0.75f32, 1.25f32);
    let inputs = [a.clone(), b.clone(), vec![sa], vec![sb]];
    let (one, two) = both_forms(&cfg, &inputs, (m, n, k));
    assert!(one
        .iter()
        .zip(&two)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
    let e = rel_err(&one, &a, &b, (m, n, k), f64::from(sa) * f64::from(sb));
    assert!(e < 2e-2, "{e:e}");
}

/// Two blocks each store a 16 × 16 tile and arrive on one counter; the last adds both tiles. Read
/// inside the hand-off, the other block's tile is there; read by the same block without it, the
/// interpreter gives the launch's input, as a device may (nothing orders the other block's store). A counter not zero at launch,
/// or a count of arrivals the launch does not make, is an error naming the counter.
#[test]
fn the_hand_off_is_what_makes_another_blocks_stores_visible() {
    let build_it = |hand_off: bool, arrivals: i64| {
        let mut k = KernelBuilder::new("handoff", Schedule::Plain { waves: 1 });
        let n = k.param("n");
        let rows = |r: i64| [("r", Expr::c(r)), ("c", n.clone())];
        let x = k.global("x", DType::F32, &rows(32), Access::Read);
        let part = k.global("part", DType::F32, &rows(32), Access::ReadWrite);
        let y = k.global("y", DType::F32, &rows(16), Access::Write);
        let cnt = k.global("cnt", DType::I32, &[("t", Expr::c(1))], Access::ReadWrite);
        k.grid(vec![Expr::c(2)], GridOrder::RowMajor);
        let t = k.tile("t", DType::F32, 16, 16, Layout::Row, BaseShape::S16X16);
        let u = k.tile("u", DType::F32, 16, 16, Layout::Row, BaseShape::S16X16);
        let r0 = k.block(0) * 16;
        k.load_global(t, k.gview(x, vec![r0.clone(), Expr::c(0)], 0, 1, 16, 16));
        k.store(k.gview(part, vec![r0, Expr::c(0)], 0, 1, 16, 16), t);
        let sum_tiles = move |k: &mut KernelBuilder| {
            k.load_global(t, k.gview(part, vec![Expr::c(0), Expr::c(0)], 0, 1, 16, 16));
            k.load_global(
                u,
                k.gview(part, vec![Expr::c(16), Expr::c(0)], 0, 1, 16, 16),
            );
            k.add(t, t, u);
            k.store(k.gview(y, vec![Expr::c(0), Expr::c(0)], 0, 1, 16, 16), t);
        };
        if hand_off {
            k.last_arrival(cnt, Expr::c(0), Expr::c(arrivals), Scope::Block, sum_tiles);
        } else {
            // Block 1, the last to arrive on the interpreter, but without arriving.
            let last = k.block(0).eq(1);
            k.if_(last, sum_tiles);
        }
        k.finish().expect("builds")
    };
    let x: Vec<f32> = (0..32 * 16).map(|i| i as f32).collect();
    let run = |hand_off: bool, arrivals: i64, counter: f32| {
        let mut t = vec![
            x.clone(),
            vec![-1.0; 32 * 16],
            vec![f32::NAN; 16 * 16],
            vec![counter],
        ];
        interp::run(&build_it(hand_off, arrivals), &[16], &mut t).map(|_| t[2].clone())
    };
    let want: Vec<f32> = (0..16 * 16).map(|i| (2 * i + 16 * 16) as f32).collect();
    assert_eq!(run(true, 2, 0.0).unwrap(), want);
    // Without the hand-off block 1 reads the launch's -1s: the sum of two of them.
    assert_eq!(run(false, 2, 0.0).unwrap(), vec![-2.0; 16 * 16]);
    let e = run(true, 2, 1.0).unwrap_err().to_string();
    assert!(e.contains("cnt[0]") && e.contains("zero"), "{e}");
    let e = run(true, 3, 0.0).unwrap_err().to_string();
    assert!(e.contains("cnt[0]") && e.contains("expects 3"), "{e}");
}

#[test]
fn a_last_block_reduction_needs_a_split() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let e = build(&GemmConfig {
        last_block_reduces: true,
        ..TILES[0].config(h100)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("last_block_reduces") && e.contains("split_k"),
        "{e}"
    );
}
