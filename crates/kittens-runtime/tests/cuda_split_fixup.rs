//! Split-K reduced by the last block of each tile (`GemmConfig::last_block_reduces`) lowered for
//! sm_90a: one launch that stores its f32 partials directly, arrives on the tile's counter with one
//! `atom.acq_rel.gpu` per block, reads the planes back coherently (`ld.global.cg`, not the read-only
//! path) and stores C through its tensor map; bf16 and fp8 (promoted, 64-row) blocks compile with
//! NVRTC without spills.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::split_k::{COUNTERS, PARTIAL};
use kittens_kernels::gemm::{build, GemmConfig};

#[test]
fn split_gemms_reduced_by_their_last_block_compile_for_sm_90a() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("split-fixup");
    let tile = |rows, cols| HopperTile { rows, cols }.config(h100);
    let small_fp8 = GemmConfig::fp8_for_shape(GemmConfig::fp8_for_gpu(h100), h100, 16);
    let configs = [
        GemmConfig {
            split_k: 4,
            ..tile(64, 128)
        },
        GemmConfig {
            split_k: 2,
            ..tile(64, 256)
        },
        GemmConfig {
            split_k: 2,
            ..tile(128, 128)
        },
        GemmConfig {
            split_k: 2,
            block: 64,
            ..small_fp8
        },
        GemmConfig {
            split_k: 4,
            block: 128,
            ..small_fp8
        },
    ];
    for cfg in configs {
        let cfg = GemmConfig {
            last_block_reduces: true,
            ..cfg
        };
        let what = format!("{}x{}/k{}", cfg.block_rows, cfg.block, cfg.split_k);
        let k = build(&cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{what}: {e}"));
        // A, B and C's maps; the partials and counters by pointer.
        assert_eq!(l.tma_maps().len(), 3, "{what}");
        for name in [PARTIAL, COUNTERS] {
            let arg = kittens_codegen::KernelArg::Global { name: name.into() };
            assert!(l.args.contains(&arg), "{what}: {:?}", l.args);
        }
        let code = ptx::of(&l);
        assert!(
            ptx::count(&code, "st.global.f32") > 0,
            "{what}: f32 partials"
        );
        assert_eq!(
            ptx::count(&code, "atom.acq_rel.gpu.global.add.s32"),
            1,
            "{what}: one arrival"
        );
        assert!(
            ptx::count(&code, "ld.global.cg.f32") > 0,
            "{what}: coherent reads"
        );
        let r = compile_clean(&l, &cache, &what);
        eprintln!("{what}: {} registers", r.registers);
    }
}
