//! `C = A·B` with B stored `K × N` (`BLayout::Kn`) is the same Hopper tile program reading B in place:
//! on the interpreter, against an f64 product of the same operands, for every block shape at sizes
//! with partial blocks along M, N and K; and the schedules that cannot read it refuse it.

use kittens_kernels::exec::interpret;
use kittens_kernels::gemm::shapes::TILES;
use kittens_kernels::gemm::{build, BLayout, GemmConfig};
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

/// ‖C − A·B‖_F / ‖A·B‖_F with B `k × n` row-major, the product in f64.
fn rel_err(c: &[f32], a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize)) -> f64 {
    let (mut d2, mut r2) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let exact: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
            let d = c[i * n + j] as f64 - exact;
            d2 += d * d;
            r2 += exact * exact;
        }
    }
    (d2 / r2).sqrt()
}

#[test]
fn b_as_k_by_n_on_every_block() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rng = SmallRng::seed_from_u64(11);
    for tile in TILES {
        let cfg = GemmConfig {
            b_layout: BLayout::Kn,
            ..tile.config(h100)
        };
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{tile}: {e}"));
        for (m, n, k) in [
            (40, 136, 72),
            (tile.rows as usize + 24, tile.cols as usize + 8, 136),
        ] {
            let (a, b) = (operand(m * k, &mut rng), operand(k * n, &mut rng));
            let params = [m as i64, n as i64, k as i64];
            let (c, _) = interpret(&kernel, &params, vec![a.clone(), b.clone()], &[m * n])
                .unwrap_or_else(|e| panic!("{tile}: {e}"));
            let e = rel_err(&c, &a, &b, (m, n, k));
            // bf16 output rounding (2^-9 per element) shows; an index error is of order 1.
            assert!(e > 1e-4 && e < 1e-2, "{tile} {m}x{n}x{k}: {e}");
        }
    }
}

#[test]
fn amd_schedules_refuse_b_as_k_by_n() {
    let cfg = GemmConfig {
        b_layout: BLayout::Kn,
        ..GemmConfig::small()
    };
    let e = build(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("K x N") && e.contains("producer/consumer"),
        "{e}"
    );
}
