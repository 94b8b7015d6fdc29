//! Split-K and accumulator promotion are the Hopper GEMM tile program with other parameters: on the
//! interpreter, against an f64 product of the same operands, at sizes with partial blocks along M, N
//! and K (and K slices that end inside a K step, or past K altogether).

use kittens_hw::dtype::DType;
use kittens_kernels::exec::interpret;
use kittens_kernels::gemm::shapes::{HopperTile, NARROW, TILES};
use kittens_kernels::gemm::split_k::{self, build_reduce, PARTIAL};
use kittens_kernels::gemm::{build, BLayout, GemmConfig, GemmTypes, Scales};
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

/// Runs the GEMM of `cfg` and, with split-K, the reduction after it; returns C.
fn run(cfg: &GemmConfig, inputs: Vec<Vec<f32>>, (m, n, k): (usize, usize, usize)) -> Vec<f32> {
    let gemm = build(cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let params = [m as i64, n as i64, k as i64];
    let s = cfg.split_k as usize;
    if s == 1 {
        return interpret(&gemm, &params, inputs, &[m * n]).expect("gemm").0;
    }
    assert_eq!(gemm.globals.last().map(|g| g.name.as_str()), Some(PARTIAL));
    let (partial, _) = interpret(&gemm, &params, inputs, &[s * m * n]).expect("gemm");
    // Every plane was written (the output was poisoned with NaN).
    assert!(partial.iter().all(|x| x.is_finite()), "{cfg:?}");
    let reduce = build_reduce(cfg.split_k, cfg.types.output, 32).expect("reduce");
    interpret(&reduce, &params[..2], vec![partial], &[m * n])
        .expect("reduce")
        .0
}

/// Every block shape (and the FP8 small-M model's 64×32) with K cut in 2, 3 and 5 slices, bf16 and f32 output: the slices' partial sums
/// add up to A·Bᵀ. With f32 output only accumulation order separates C from f64; with bf16 the one
/// rounding of the sum shows (about 2^-9 of the largest element).
#[test]
fn split_k_on_every_block_sums_to_the_product() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rng = SmallRng::seed_from_u64(5);
    for tile in TILES.into_iter().chain([NARROW]) {
        for (split, output) in [(2, DType::F32), (3, DType::Bf16), (5, DType::F32)] {
            let cfg = GemmConfig {
                split_k: split,
                types: GemmTypes {
                    output,
                    ..GemmTypes::BF16
                },
                ..tile.config(h100)
            };
            // K of 5 whole steps and a partial one: 3 slices of 2 steps, 5 of 2 (the last two
            // slices past K, loading zeros).
            for (m, n, k) in [(40, 136, 5 * 64 + 24), (tile.rows as usize + 24, 72, 200)] {
                let (a, b) = (operand(m * k, &mut rng), operand(n * k, &mut rng));
                let c = run(&cfg, vec![a.clone(), b.clone()], (m, n, k));
                let e = rel_err(&c, &a, &b, (m, n, k), 1.0);
                let bound = if output == DType::F32 { 1e-5 } else { 2e-2 };
                assert!(e < bound, "{tile} split {split} {m}x{n}x{k}: {e:e}");
            }
        }
    }
}

/// Split-K with B stored K × N (`C = A·B`, read in place): the slices index B's rows.
#[test]
fn split_k_with_b_as_k_by_n() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rng = SmallRng::seed_from_u64(8);
    let cfg = GemmConfig {
        split_k: 3,
        b_layout: BLayout::Kn,
        types: GemmTypes {
            output: DType::F32,
            ..GemmTypes::BF16
        },
        ..TILES[2].config(h100)
    };
    let (m, n, k) = (72, 136, 5 * 64 + 8);
    let (a, b) = (operand(m * k, &mut rng), operand(k * n, &mut rng));
    let c = run(&cfg, vec![a.clone(), b.clone()], (m, n, k));
    // Bᵀ as N × K for the reference.
    let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
    let e = rel_err(&c, &a, &bt, (m, n, k), 1.0);
    assert!(e < 1e-5, "{e:e}");
}

/// Promotion every 1, 2 and 3 K steps (chains that end past K load zeros), with and without split-K,
/// in the FP8 GEMM's Hopper configurations (128- and, for a small M, 64-row blocks; e4m3 operands,
/// per-tensor scales), f32 output; the small-M model's narrower blocks (64, 48 or 32 columns) run their chains in pairs
/// (`producer_consumer`: a pair's count of steps rounded up, the extra chain over zeros).
#[test]
fn promoted_accumulators_sum_every_chain() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let wide = GemmConfig::fp8_for_gpu(h100);
    // 64-row blocks with A in whole 64-row boxes: this test's M (136) spans three row tiles, past
    // what a box of a decode step's rows holds (`GemmConfig::a_rows`; those are `runner_fp8`'s).
    let small = GemmConfig::fp8_for_shape(wide, h100, 64);
    assert_eq!((small.block_rows, small.a_rows), (64, 0));
    let block = |rows, cols| GemmConfig {
        block_rows: rows,
        block: cols,
        stages: HopperTile { rows, cols }.stages(h100),
        ..wide
    };
    let mut rng = SmallRng::seed_from_u64(9);
    for (promote, split, base) in [
        (1, 1, wide),
        (3, 1, wide),
        (1, 3, wide),
        (2, 2, wide),
        (1, 4, small),
        (1, 1, block(64, 64)),
        (1, 1, block(64, 32)),
        (1, 2, block(64, 32)),
        (1, 1, block(64, 48)),
        (2, 3, block(64, 128)),
        (1, 3, block(128, 64)),
        (1, 2, block(128, 128)),
    ] {
        let cfg = GemmConfig {
            promote,
            split_k: split,
            types: GemmTypes {
                output: DType::F32,
                scales: Some(Scales::PerTensor),
                ..base.types
            },
            ..base
        };
        let (m, n, k) = (136, 200, 5 * 128 + 48);
        // Small integers times 1/8 are exact in e4m3.
        let mut e4m3 = |len| -> Vec<f32> {
            (0..len)
                .map(|_| f32::from(rng.gen_range(-12i8..=12)) / 8.0)
                .collect()
        };
        let (a, b) = (e4m3(m * k), e4m3(n * k));
        let (sa, sb) = (0.75f32, 1.25f32);
        let c = run(
            &cfg,
            vec![a.clone(), b.clone(), vec![sa], vec![sb]],
            (m, n, k),
        );
        let e = rel_err(&c, &a, &b, (m, n, k), f64::from(sa) * f64::from(sb));
        assert!(e < 1e-5, "promote {promote} split {split}: {e:e}");
    }
}

/// The rule on the H100: a split where C's blocks are too few to stream B at DRAM speed or to keep
/// the SMs computing, never past one round of blocks, never where the blocks already fill the SMs.
#[test]
fn split_only_where_blocks_leave_sms_idle() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let choose = |m, n, k, block, ks, elem| split_k::choose(h100, 132, (m, n, k), block, ks, elem);
    // bf16, 64x128 blocks: 32 blocks stream B from too few SMs; 64 saturate DRAM.
    assert_eq!(choose(16, 4096, 14336, (64, 128), 64, 2), 4);
    assert_eq!(choose(16, 4096, 4096, (64, 128), 64, 2), 4);
    assert_eq!(choose(16, 8192, 8192, (64, 128), 64, 2), 1);
    assert_eq!(choose(16, 6144, 4096, (64, 128), 64, 2), 1);
    assert_eq!(choose(4096, 4096, 4096, (128, 256), 64, 2), 1);
    assert_eq!(choose(16, 28672, 4096, (64, 256), 64, 2), 1);
    // Short K: fewer than 8 steps per slice.
    assert_eq!(choose(16, 4096, 512, (64, 128), 64, 2), 1);
    // fp8, 128x192 blocks: 44 blocks of a long K loop compute on a third of the SMs.
    assert_eq!(choose(256, 4096, 14336, (128, 192), 128, 1), 3);
    for (m, n, k) in [(16, 4096, 14336), (64, 4096, 4096), (256, 4096, 14336)] {
        let s = choose(m, n, k, (64, 128), 64, 2);
        assert!(m.div_ceil(64) * n.div_ceil(128) * u64::from(s) <= 132);
    }
}

#[test]
fn bad_configurations_are_refused() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let base = TILES[0].config(h100);
    let e = build(&GemmConfig { split_k: 0, ..base })
        .unwrap_err()
        .to_string();
    assert!(e.contains("split_k 0"), "{e}");
    // 128x256 promoted: 2 x 128 floats per thread.
    let e = build(&GemmConfig { promote: 1, ..base })
        .unwrap_err()
        .to_string();
    assert!(e.contains("promoted"), "{e}");
    let e = build(&GemmConfig {
        split_k: 2,
        ..GemmConfig::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("producer/consumer"), "{e}");
    assert!(build_reduce(1, DType::Bf16, 32).is_err());
    assert!(build_reduce(4, DType::Fp8E4m3, 32).is_err());
}

/// The operand copy moves every element of a `rows × cols` matrix between row pitches (odd sizes,
/// a pitch with and one without 16-byte rows) and writes nothing past `cols`.
#[test]
fn operand_copy_changes_the_row_pitch() {
    let copy = kittens_kernels::gemm::align::build_copy(32).expect("copy");
    let mut rng = SmallRng::seed_from_u64(3);
    for (rows, cols, sp, dp) in [
        (7usize, 300usize, 301usize, 320usize),
        (5, 1000, 1000, 1024),
    ] {
        let src = operand(rows * sp, &mut rng);
        let params = [rows as i64, cols as i64, sp as i64, dp as i64];
        let (dst, _) = interpret(&copy, &params, vec![src.clone()], &[rows * dp]).expect("copy");
        for r in 0..rows {
            assert_eq!(
                &dst[r * dp..r * dp + cols],
                &src[r * sp..r * sp + cols],
                "row {r}"
            );
            assert!(dst[r * dp + cols..(r + 1) * dp].iter().all(|x| x.is_nan()));
        }
    }
}
