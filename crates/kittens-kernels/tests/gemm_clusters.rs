//! The Hopper GEMM in thread-block clusters (`GemmConfig::cluster`) is the same tile program: the
//! cluster only tells the sm_90a lowering to multicast B, so on the interpreter the product at sizes
//! with partial blocks (an odd number of row tiles among them) is bit-identical to the unclustered
//! one and close to the f64 product; clusters other than 1, 2 and 4, and clusters with split-K, are
//! refused.

use kittens_hw::dtype::DType::Bf16;
use kittens_kernels::exec::interpret;
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::{build, BLayout, GemmConfig};
use kittens_kernels::problem::random;
use rand::{rngs::SmallRng, SeedableRng};

#[test]
fn clusters_leave_the_product_unchanged() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rng = SmallRng::seed_from_u64(29);
    let tile = HopperTile {
        rows: 128,
        cols: 128,
    };
    for b_layout in [BLayout::Nk, BLayout::Kn] {
        // 3 row tiles (odd: the last cluster's second block lies past M), partial K and N blocks.
        let (m, n, k) = (300, 136, 72);
        let (a, b) = (random(&mut rng, m * k, Bf16), random(&mut rng, n * k, Bf16));
        let params = [m as i64, n as i64, k as i64];
        let run = |cluster: u32| {
            let cfg = GemmConfig {
                b_layout,
                cluster,
                ..tile.config(h100)
            };
            let kernel = build(&cfg).unwrap_or_else(|e| panic!("cluster {cluster}: {e}"));
            assert_eq!(kernel.grid.cluster, cluster);
            interpret(&kernel, &params, vec![a.clone(), b.clone()], &[m * n])
                .unwrap_or_else(|e| panic!("cluster {cluster}: {e}"))
                .0
        };
        let plain = run(1);
        for cluster in [2, 4] {
            assert!(run(cluster) == plain, "{b_layout:?} cluster {cluster}");
        }
        // And the product is right: f64 reference, B as stored.
        let at = |j: usize, p: usize| match b_layout {
            BLayout::Nk => b[j * k + p],
            BLayout::Kn => b[p * n + j],
        };
        let (mut d2, mut r2) = (0f64, 0f64);
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = (0..k).map(|p| a[i * k + p] as f64 * at(j, p) as f64).sum();
                d2 += (plain[i * n + j] as f64 - exact).powi(2);
                r2 += exact * exact;
            }
        }
        let e = (d2 / r2).sqrt();
        assert!(e > 1e-4 && e < 1e-2, "{b_layout:?}: {e}");
    }
}

#[test]
fn unsupported_clusters_are_refused() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let base = HopperTile {
        rows: 128,
        cols: 256,
    }
    .config(h100);
    let e = build(&GemmConfig { cluster: 3, ..base })
        .unwrap_err()
        .to_string();
    assert!(e.contains("clusters of 3 blocks (1, 2 or 4)"), "{e}");
    let e = build(&GemmConfig {
        cluster: 2,
        split_k: 4,
        ..base
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("clusters of 2 with split_k 4"), "{e}");
}
