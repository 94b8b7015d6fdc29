//! FlashAttention's options (`kittens_kernels::attn::score`: any softmax scale, a soft cap, a sliding
//! window) on the sm_90a programs, built the way a run builds them (`KernelProblem::build`), lowered
//! and compiled by NVRTC without spills, stack or ptxas performance warnings: the forward and the
//! Hopper backward's launches with each option and all together at both head dimensions. NVRTC runs
//! without a GPU.

#[path = "attn_support/options.rs"]
mod attn_options;
#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;

use attn_options::options;
use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_bwd::BwdConfig;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::problem::{KernelProblem, RunSettings};

#[test]
fn attn_fwd_with_options_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = test_cache("attn-features-fwd");
    let mut n = 0;
    for (what, a) in options() {
        for dim in [64, 128] {
            let mut p = AttnProblem::with(a);
            p.args.attn.dim = dim;
            let k = p
                .build(Target::Sm90a)
                .unwrap_or_else(|e| panic!("{what} D{dim}: {e}"));
            let l = kittens_codegen::lower(&k, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{what} D{dim}: {e}"));
            // Kept as text (here and below): the masks and the ALiBi bias are plain integer and float
            // arithmetic in the PTX; their results are the runner_attn_*.rs tests' on the interpreter
            // and the HIP emulation, and the GPU's.
            if p.args.window.is_some() {
                assert!(
                    l.source.contains("col >= row + ("),
                    "{what}: no window mask"
                );
            }
            assert_eq!(p.args.alibi, l.source.contains("// alibi"), "{what}: ALiBi");
            // The cap is one special-function tanh per score (FlashAttention's form), not a
            // division; ALiBi's distances convert no integer per element (lower_frag.rs says why).
            let capped = p.args.logits.softcap.is_some();
            assert_eq!(
                capped,
                l.source.contains("= kt::tanh_approx("),
                "{what}: cap"
            );
            assert!(!l.source.contains("(float)abs("), "{what}: ALiBi's I2F");
            let r = compile_clean(&l, &cache, &format!("{what} D{dim}"));
            eprintln!("{} {what} D{dim}: {r:?}", l.entry);
            n += 1;
        }
    }
    assert_eq!(n, 10);
}

/// The forward with two query tiles per block as one key stream (`AttnConfig::tile_pairs`): every
/// option, dense and causal at head dim 128, the window with the log-sum-exp and at head dim 64.
#[test]
fn attn_fwd_tile_pairs_compile_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = test_cache("attn-features-pairs");
    let base = kittens_kernels::attn::score::AttnArgs::default();
    let causal = kittens_kernels::attn::score::AttnArgs {
        causal: true,
        bottom_right: true,
        ..base
    };
    let mut cases: Vec<(String, usize, AttnProblem)> = options()
        .into_iter()
        .chain([("dense", base), ("causal", causal)])
        .map(|(what, a)| (format!("pairs {what} D128"), 128, AttnProblem::with(a)))
        .collect();
    let window = options()[2].1;
    for (dim, lse) in [(128, true), (64, false)] {
        let p = AttnProblem {
            lse,
            ..AttnProblem::with(window)
        };
        cases.push((format!("pairs window D{dim} lse {lse}"), dim, p));
    }
    for (what, dim, mut p) in cases {
        p.args.attn.dim = dim;
        p.tile_pairs = Some(true);
        let k = p
            .build(Target::Sm90a)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(k.name.ends_with("_pairs"), "{what}: {}", k.name);
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = compile_clean(&l, &cache, &what);
        eprintln!("{} {what}: {r:?}", l.entry);
    }
}

/// The forward at head dims 32 and 96 (tiles padded to 64 and 128 columns,
/// `attn_fwd::padded_dim`) and 192 and 256 (64-key blocks, `AttnConfig::fit_hopper`): dense, with
/// the log-sum-exp, a 3-part key split, and every option with a causal mask.
#[test]
fn attn_fwd_head_dims_192_and_256_compile_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = test_cache("attn-features-dims");
    let all = AttnProblem::with(options().pop().expect("the all-options case").1);
    for dim in [32, 96, 192, 256] {
        let cases = [
            ("dense", AttnProblem::default()),
            (
                "lse",
                AttnProblem {
                    lse: true,
                    ..AttnProblem::default()
                },
            ),
            (
                "split 3",
                AttnProblem {
                    lse: true,
                    kv_splits: kittens_kernels::attn_fwd::split::KvSplits::Fixed(3),
                    ..AttnProblem::default()
                },
            ),
            ("all, causal", all),
        ];
        for (what, mut p) in cases {
            p.args.attn.dim = dim;
            let what = format!("{what} D{dim}");
            for stage in p
                .stages(Target::Sm90a, &p.plan(Target::Sm90a).unwrap())
                .unwrap_or_else(|e| panic!("{what}: {e}"))
            {
                let l = kittens_codegen::lower(&stage.kernel, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let r = compile_clean(&l, &cache, &what);
                eprintln!("{} {what}: {r:?}", l.entry);
            }
        }
    }
}

/// The Hopper backward's launches — the query blocks (`dq`), the key blocks (the default) and the
/// key blocks adding dQ atomically (`atomic`) — with each option and all together, at head
/// dimensions 64, 96 and 128; the atomic form refuses a soft cap past 64.
#[test]
fn attn_bwd_with_options_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = test_cache("attn-features-bwd");
    let mut lowered = Vec::new();
    for (what, a) in options() {
        for dim in [64, 96, 128] {
            let mut p = BwdProblem::with(a);
            p.args.attn.dim = dim;
            for variant in [Some("dq"), None, Some("atomic")] {
                let p = BwdProblem {
                    run: RunSettings { variant, ..p.run },
                    ..p
                };
                let what = format!("{what} D{dim} {variant:?}");
                let k = p.build(Target::Sm90a);
                if variant == Some("atomic") && dim > 64 && p.args.logits.softcap.is_some() {
                    // Refused by name: too few registers for the atomic form with a cap.
                    let err = k.unwrap_err().to_string();
                    assert!(err.contains("softcap") && err.contains("atomic"), "{err}");
                    continue;
                }
                let k = k.unwrap_or_else(|e| panic!("{what}: {e}"));
                let l = kittens_codegen::lower(&k, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(p.args.alibi, l.source.contains("// alibi"), "{what}: ALiBi");
                if p.args.window.is_some() {
                    let mask = ["col >= row + (", "row >= col + ("];
                    assert!(
                        mask.iter().any(|m| l.source.contains(m)),
                        "{what}: no window mask"
                    );
                }
                lowered.push((what, l));
            }
        }
    }
    assert_eq!(lowered.len(), 41);
    parallel::each(lowered, |(what, l)| {
        let r = compile_clean(&l, &cache, &what);
        eprintln!("{} {what}: {r:?}", l.entry);
    });
    // The configuration the runs build carries each option into the program.
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let plain = kittens_kernels::attn_bwd::build(&BwdConfig::for_gpu(h100)).unwrap();
    for (what, p) in options() {
        let cfg = BwdConfig {
            logits: p.logits,
            window: p.window,
            alibi: p.alibi,
            ..BwdConfig::for_gpu(h100)
        };
        let k = kittens_kernels::attn_bwd::build(&cfg).unwrap();
        assert_ne!(
            format!("{:?}", plain.body),
            format!("{:?}", k.body),
            "{what}"
        );
    }
}
