//! Split-K and promoted accumulators lowered for sm_90a: the split GEMM (bf16 and fp8) stores its
//! fp32 partials with direct stores (no C tensor map), the reduction is a strip program, and each
//! compiles with NVRTC without spills, as does the operand copy; ptxas keeps the promoted fp8 GEMM's wgmmas pipelined (no
//! serialisation warning).

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::split_k::{build_reduce, PARTIAL};
use kittens_kernels::gemm::{build, GemmConfig};
use kittens_runtime::cuda::KernelCache;

fn compiles(l: &kittens_codegen::Lowered, cache: &KernelCache) {
    let r = compile_clean(l, cache, &l.entry);
    eprintln!("{}: {} registers", l.entry, r.registers);
}

#[test]
fn split_gemms_and_the_reduction_compile_for_sm_90a() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("split-k");
    let bf16 = GemmConfig {
        split_k: 4,
        ..HopperTile {
            rows: 64,
            cols: 128,
        }
        .config(h100)
    };
    let fp8 = GemmConfig {
        split_k: 6,
        ..GemmConfig::fp8_for_gpu(h100)
    };
    // A decode step's fp8 GEMM: 64-row blocks (one consumer warpgroup, promoted), split.
    let fp8_small = GemmConfig {
        split_k: 6,
        ..GemmConfig::fp8_for_shape(GemmConfig::fp8_for_gpu(h100), h100, 16)
    };
    assert_eq!((fp8_small.block_rows, fp8_small.stages), (64, 6));
    // The small-M model's narrowest block, split.
    let fp8_narrow = GemmConfig {
        block_rows: 64,
        block: 32,
        stages: HopperTile { rows: 64, cols: 32 }.stages(h100),
        split_k: 2,
        ..GemmConfig::fp8_for_gpu(h100)
    };
    // A decode step's 16 rows: A in a box of 16 rows (`GemmConfig::a_rows`), unsplit.
    assert_eq!(fp8_small.a_rows, 16);
    let fp8_boxed = GemmConfig {
        a_rows: 16,
        split_k: 1,
        ..fp8_narrow
    };
    for cfg in [
        bf16,
        fp8,
        fp8_small,
        fp8_narrow,
        fp8_boxed,
        GemmConfig::fp8_for_gpu(h100),
    ] {
        let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        let maps = l.tma_maps();
        if cfg.a_rows == 16 {
            // A's box: 16 rows.
            assert!(maps.iter().any(|m| m.box_rows == 16), "{maps:?}");
        }
        if cfg.split_k > 1 {
            // A and B only: the partials are stored directly, in f32.
            assert_eq!(maps.len(), 2, "{maps:?}");
            let partial = kittens_codegen::KernelArg::Global {
                name: PARTIAL.into(),
            };
            assert!(l.args.contains(&partial), "{:?}", l.args);
            let code = ptx::of(&l);
            assert!(ptx::count(&code, "st.global.f32") > 0, "f32 partials");
            assert_eq!(
                ptx::count(&code, "cp.async.bulk.tensor.2d.global.shared::cta"),
                0,
                "no TMA store"
            );
        } else {
            assert_eq!(maps.len(), 3, "{maps:?}");
        }
        if cfg.promote > 0 {
            // The chain starts from zero (scale-d off) each K step and is added into the sums. Kept as
            // text: scale-d is a folded predicate and the sum a plain add in the PTX.
            assert!(l.source.contains("r_sum0[i] = r_sum0[i] + r_acc0[i]"));
            assert!(l.source.contains(
                "const u64 kt_da = kt::desc_kmajor_sw128(a0 + 0u), kt_db = kt::desc_kmajor_sw128(b0 + 0u);"
            ));
            assert!(l.source.contains("k32_e4m3_ss(r_acc0, kt_da, kt_db, 0u)"));
        }
        compiles(&l, &cache);
    }
    let copy = kittens_kernels::gemm::align::build_copy(32).expect("copy");
    let l = kittens_codegen::lower(&copy, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
    compiles(&l, &cache);
    let reduce = build_reduce(4, DType::Bf16, 32).expect("reduce");
    let l = kittens_codegen::lower(&reduce, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
    assert!(l.tma_maps().is_empty());
    compiles(&l, &cache);
}

/// Promoted FP8 blocks whose registers hold more sets of accumulators run their chains in groups of 4
/// or 2 (the group's later chains issued before the first is waited for); the per-tensor scales are
/// read before the K loop (the loads' latency overlapped with the ring's first fill, not after the last
/// wgmma) where the budget still leaves room for their tile, else in the epilogue. Each block compiles
/// without spills and without serialised wgmmas; 32- and 48-column blocks (decode-sized M) store C in
/// 32- and 16-column boxes.
#[test]
fn fp8_chains_in_groups_and_scales_before_the_k_loop_where_registers_allow() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("fp8-pairs");
    // (rows, cols, chains per group, scales before the loop): 2 × 16, 2 × 24, 2 × 32, 2 × 64 and 2 × 96 floats of
    // accumulators per thread against the promoted budget of 192.
    for (rows, cols, group, early) in [
        (64, 32, 4, true),
        (64, 48, 4, true),
        (64, 64, 4, true),
        (64, 128, 2, false),
        (128, 64, 4, true),
        (128, 128, 2, false),
        (128, 192, 1, false),
    ] {
        let cfg = GemmConfig {
            block_rows: rows,
            block: cols,
            stages: HopperTile { rows, cols }.stages(h100),
            ..GemmConfig::fp8_for_gpu(h100)
        };
        let k = build(&cfg).unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        if let Ok(dir) = std::env::var("KITTENS_DUMP") {
            std::fs::write(format!("{dir}/gemm_fp8_{rows}x{cols}.cu"), &l.source).expect("dump");
        }
        // Kept as text: the kernel body after the prelude (whose wrappers name the wgmmas too).
        let body = &l.source[l.source.find("__global__").expect("entry")..];
        let scale = body.find("__ldg(g_scale_a)").expect("scale load");
        let mma = body.find("kt::wgmma_m64n").expect("wgmma");
        assert_eq!(
            scale < mma,
            early,
            "{rows}x{cols}: scales before the K loop"
        );
        // C leaves through the slab in 64-byte rows where a block's 32 columns fill no 128-byte
        // box, in 32-byte rows for 48 (`lower_tma`: 32- and 16-column boxes, the second row half
        // 512 and 256 bytes on).
        assert_eq!(
            body.contains("h * 512u"),
            cols == 32,
            "{rows}x{cols}: 32-column store boxes"
        );
        assert_eq!(
            body.contains("h * 256u"),
            cols == 48,
            "{rows}x{cols}: 16-column store boxes"
        );
        for g in 1..4 {
            assert_eq!(
                body.contains(&format!("e4m3_ss(r_acc0_{g}, ")),
                g < group,
                "{rows}x{cols}: chain {g} of a group of {group}"
            );
        }
        compiles(&l, &cache);
    }
}
