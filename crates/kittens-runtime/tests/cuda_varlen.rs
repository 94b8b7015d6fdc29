//! The sm_90a varlen attention forward (`kittens_kernels::attn_varlen_hopper`) lowered and compiled by
//! NVRTC without spills at every head dim it takes, causal and not: the proof available without a GPU
//! that the index reads (`Expr::Elem`) and the per-block clips lower to valid CUDA. Its numbers are
//! checked on the interpreter (`kittens-kernels/tests/attn_varlen.rs`) and on the device by
//! `python/tests/test_gpu_varlen.py`.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::ensure_nvrtc;
use kittens_hw::Target;
use kittens_kernels::attn::score::Logits;
use kittens_kernels::attn_varlen::VarlenConfig;

#[test]
fn varlen_forward_compiles_for_sm90a_without_spills() {
    ensure_nvrtc();
    for (dim, seqused_k) in [
        (64, false),
        (128, false),
        (192, false),
        (256, false),
        (64, true),
        (128, true),
    ] {
        for causal in [false, true] {
            let cfg = VarlenConfig {
                dim,
                causal,
                logits: Logits::default(),
                seqused_k,
            };
            let k = kittens_kernels::attn_varlen_hopper::build(&cfg).unwrap();
            let l = kittens_codegen::lower(&k, Target::Sm90a)
                .unwrap_or_else(|e| panic!("D{dim} causal {causal}: {e}"));
            let image = kittens_runtime::cuda::compile(
                &l.source,
                &l.entry,
                "sm_90a",
                l.dynamic_shared_bytes(),
            )
            .unwrap_or_else(|e| panic!("D{dim} causal {causal}: {e}"));
            assert_eq!(
                image.report.spill_stores, 0,
                "D{dim} causal {causal}: {:?}",
                image.report
            );
            eprintln!("{} D{dim}: {:?}", k.name, image.report);
        }
    }
}
