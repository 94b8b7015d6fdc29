//! The Hopper `gemm_bf16` tile program (kittens-kernels, producer/consumer schedule) lowered to CUDA
//! by `kittens_codegen::cuda::lower` compiles with NVRTC for sm_90a without spills, and the generated
//! code holds the Hopper machinery the schedule implies.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::{ensure_nvrtc, fresh_cache};
use kittens_codegen::cuda::gemm_bf16_sm90;
use kittens_runtime::cuda::compile_with_cache;

#[test]
fn lowered_gemm_compiles_for_sm_90a() {
    ensure_nvrtc();
    let l = gemm_bf16_sm90().unwrap_or_else(|e| panic!("{e}"));
    if let Ok(dir) = std::env::var("KITTENS_DUMP") {
        std::fs::write(format!("{dir}/{}.cu", l.name), &l.source).expect("dump");
    }
    // One TMA map per loaded tensor (A and B) and one for the TMA-store epilogue (C); one thread per
    // lane of every wave of the schedule.
    assert_eq!(l.tma_maps.len(), 3, "{:?}", l.tma_maps);
    assert_eq!(l.threads, 32 * l.ir.waves);
    for needle in [
        "setmaxnreg_dec<",
        "setmaxnreg_inc<",
        "kt::tma_load_2d(",
        "kt::wgmma_m64n",
        "kt::tma_store_2d(",
        "kt::wgmma_wait<1>()",
        "kt::mbarrier_wait(KT_EMPTY(slot)",
    ] {
        assert!(l.source.contains(needle), "generated source lacks {needle}");
    }
    // A fresh cache: the figures come from this compile, not from a cubin left by an earlier build.
    let cache = fresh_cache("lowered-gemm");
    let image = compile_with_cache(
        &l.source,
        &l.name,
        "sm_90a",
        l.dynamic_shared_bytes,
        Some(&cache),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!image.report.cached);
    let r = image.report;
    eprintln!("{}: {r:?}", l.name);
    assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{r:?}");
    assert!(r.dynamic_shared_bytes <= kittens_codegen::cuda::gemm::MAX_SHARED_PER_BLOCK);
    assert!(
        r.warnings.iter().all(|w| !w.contains("C7508")),
        "setmaxnreg ignored: {:?}",
        r.warnings
    );
}
