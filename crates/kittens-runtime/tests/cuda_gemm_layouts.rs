//! The Hopper GEMM with A transposed (stored `K × M`: wgmma's transpose-A immediate), B either way and
//! leading-dimension strides, lowered for sm_90a and compiled by NVRTC without spills or serialised
//! wgmmas, for every block height (A's slot of one, two and four 64-column atoms), in clusters, and through the
//! registry problem with split-K (the reduction writing a strided C). The strides reach the tensor
//! maps as parameters: the map geometry at given `lda, ldb, ldc` is checked too.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::{build, ALayout, BLayout, GemmConfig, LeadingDims};
use kittens_kernels::problem::KernelProblem;
use kittens_runtime::cuda::args::map_geometry;

#[test]
fn every_operand_order_compiles_for_sm_90a() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("gemm-layouts");
    // Block rows x columns, and thread-block clusters (B multicast to row tiles in pairs, as the
    // registry picks where B's rows straddle 128-byte lines).
    let tiles = [(128, 256, 1), (64, 128, 1), (256, 128, 1), (128, 192, 2)];
    for (a, b) in [
        (ALayout::Km, BLayout::Kn),
        (ALayout::Km, BLayout::Nk),
        (ALayout::Mk, BLayout::Kn),
    ] {
        for (rows, cols, cluster) in tiles {
            let cfg = GemmConfig {
                a_layout: a,
                b_layout: b,
                strided: true,
                cluster,
                ..HopperTile { rows, cols }.config(h100)
            };
            let what = format!("{a:?} {b:?} {rows}x{cols} cluster {cluster}");
            let k = build(&cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
            let l =
                kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{what}: {e}"));
            // A's wgmma reads it M-major (transpose-A set) exactly when it is stored K x M, B's
            // N-major exactly when stored K x N.
            let code = ptx::of(&l);
            let tb = u32::from(b == BLayout::Kn);
            let wgmmas = ptx::stream(&code);
            assert!(
                ptx::has_wgmma(&wgmmas, &[1, 1, u32::from(a == ALayout::Km), tb]),
                "{what}"
            );
            assert!(
                !ptx::has_wgmma(&wgmmas, &[1, 1, u32::from(a != ALayout::Km), tb]),
                "{what}"
            );
            assert_eq!(l.tma_maps().len(), 3, "{what}");
            for p in ["lda", "ldb", "ldc"] {
                let arg = kittens_codegen::KernelArg::Param { name: p.into() };
                assert!(l.args.contains(&arg), "{what}: no parameter `{p}`");
            }
            // The maps take the strides at launch: A's rows `lda` elements apart.
            let values = [
                ("m", 300),
                ("n", 200),
                ("k", 100),
                ("lda", 328),
                ("ldb", 264),
                ("ldc", 216),
            ];
            let g = map_geometry(&l, &l.tma_maps()[0], &values).unwrap();
            assert_eq!((g.tensor.as_str(), g.strides[0]), ("a", 328 * 2), "{what}");
            let r = compile_clean(&l, &cache, &what);
            eprintln!("{what}: {} registers", r.registers);
        }
    }
}

/// What the registry runs on Hopper for a strided, transposed problem with too few blocks for the
/// SMs: split-K, the GEMM then the reduction, both taking the leading dimensions.
#[test]
fn strided_split_k_through_the_registry_compiles() {
    ensure_nvrtc();
    let cache = test_cache("gemm-layouts-split");
    let mut p = GemmProblem::new(GemmKind::Bf16, 64, 512, 8192);
    p.run.sms = Some(132);
    p.gemm.a_layout = ALayout::Km;
    p.gemm.b_layout = BLayout::Kn;
    p.ld = Some(LeadingDims {
        a: 128,
        b: 1024,
        c: 520,
    });
    let plan = p.plan(Target::Sm90a).unwrap();
    let stages = p.stages(Target::Sm90a, &plan).unwrap();
    assert_eq!(stages.len(), 2, "split-K and its reduction");
    assert_eq!(plan.launch.params, [64, 512, 8192, 128, 1024, 520]);
    assert_eq!(stages[1].launch.params, [64, 512, 520]);
    for s in &stages {
        let l = kittens_codegen::lower(&s.kernel, Target::Sm90a).unwrap();
        compile_clean(&l, &cache, &s.kernel.name);
    }
}
