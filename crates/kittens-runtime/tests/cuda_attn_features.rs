//! FlashAttention's options (`kittens_kernels::attn_score`: any softmax scale, a soft cap, a sliding
//! window) on the sm_90a programs, built the way a run builds them (`KernelProblem::build`), lowered
//! and compiled by NVRTC without spills, stack or ptxas performance warnings: the forward with each
//! option and all together at both head dimensions, the Hopper backward's two launches with a scale
//! (it refuses a soft cap and a window, `runner_attn_features`). NVRTC runs without a GPU.

#[path = "attn_support/options.rs"]
mod attn_options;
#[path = "cuda_support/common.rs"]
mod cuda_common;

use attn_options::options;
use cuda_common::{compile_clean, ensure_nvrtc, fresh_cache};
use kittens_hw::Target;
use kittens_kernels::attn_bwd::BwdConfig;
use kittens_kernels::attn_score::Logits;
use kittens_kernels::problem::Problem;

#[test]
fn attn_fwd_with_options_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = fresh_cache("attn-features-fwd");
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let mut n = 0;
    for (what, p) in options() {
        for dim in [64, 128] {
            let mut p = p;
            p.attn.dim = dim;
            let k = entry
                .problem
                .build(&p, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{what} D{dim}: {e}"));
            let l = kittens_codegen::lower(&k, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{what} D{dim}: {e}"));
            if p.window.is_some() {
                assert!(
                    l.source.contains("col >= row + ("),
                    "{what}: no window mask"
                );
            }
            let r = compile_clean(&l, &cache, &format!("{what} D{dim}"));
            eprintln!("{} {what} D{dim}: {r:?}", l.entry);
            n += 1;
        }
    }
    assert_eq!(n, 8);
}

#[test]
fn attn_bwd_with_a_scale_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = fresh_cache("attn-features-bwd");
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    for dim in [64, 128] {
        let mut p = Problem {
            causal: true,
            logits: Logits {
                scale: Some(0.3),
                softcap: None,
            },
            ..Problem::default()
        };
        p.attn.dim = dim;
        // The query-block launch (`dq`) and the key blocks (the default).
        for variant in [Some("dq"), None] {
            let p = Problem { variant, ..p };
            let k = entry.problem.build(&p, Target::Sm90a).unwrap();
            let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap();
            let r = compile_clean(&l, &cache, &format!("{variant:?} D{dim}"));
            eprintln!("{} D{dim}: {r:?}", l.entry);
        }
    }
    // The configuration the runs build carries the scale into the program.
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cfg = BwdConfig {
        logits: Logits {
            scale: Some(0.3),
            softcap: None,
        },
        ..BwdConfig::for_gpu(h100)
    };
    let plain = kittens_kernels::attn_bwd::build(&BwdConfig::for_gpu(h100)).unwrap();
    let scaled = kittens_kernels::attn_bwd::build(&cfg).unwrap();
    assert_ne!(format!("{:?}", plain.body), format!("{:?}", scaled.body));
}
