//! The strided attention programs (`kittens_kernels::attn::strides`: each tensor's batch, head and
//! sequence strides kernel parameters) on every target, built the way a run builds them
//! (`KernelProblem::stages` of a problem with `attn_strides`):
//!
//! - the runner on the CPU interpreter: the forward with the AMD ping-pong's and Hopper's
//!   producer/consumer tiles (TMA ring), unsplit and with a 3-part key split (split and merge each
//!   taking its parameters by name), the backward's one-launch program and Hopper's two launches,
//!   all judged by the rule at odd lengths;
//! - sm_90a: every launch compiled by NVRTC without spills (NVRTC runs without a GPU);
//! - gfx942/gfx950: the forward compiled without spills and run on the ISA emulator; the backward as
//!   two launches (query blocks, key blocks: `attn_bwd::BwdConfig::blocks`) compiled without spills
//!   at head dims 64 and 128 and run on the ISA emulator, strided and dense, with the lse's gradient
//!   folded in.
//!
//! Inputs are Q, K, V sliced out of one fused `(B, N, H + 2·H_kv, D)` projection; outputs are dense in
//! a permuted order (the runners poison outputs with NaN, so an output with gaps cannot be judged
//! here: `kittens-kernels/tests/attn_strides.rs` checks those on the interpreter).

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;

use amd_common::{assert_compiles_without_spills, clang_for};
use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_kernels::attn::strides::AttnStrides;
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::AttnConfig;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_runtime::runner::{self, Interpreter, IsaEmu};

/// A fused-projection problem: Q, K, V read at row stride `(H + 2·H_kv)·D`, O, dO, dQ in
/// `(B, N, H, D)` order, dK, dV dense `(B, H_kv, N, D)`.
fn fused(heads: usize, heads_kv: usize, seq: usize, dim: usize) -> AttnProblem {
    let w = (heads + 2 * heads_kv) * dim;
    let fused = [seq * w, dim, w];
    let bshd = [seq * heads * dim, dim, heads * dim];
    let bhsd = [heads_kv * seq * dim, seq * dim, dim];
    AttnProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 2,
                heads,
                heads_kv,
                seq,
                dim,
                layout: AttnLayout::Bhsd,
            },
            ..Default::default()
        },
        attn_strides: Some(AttnStrides {
            q: fused,
            k: fused,
            v: fused,
            o: bshd,
            d_o: bshd,
            dq: bshd,
            dk: bhsd,
            dv: bhsd,
        }),
        run: RunSettings {
            input_scale: 2.0,
            seed: 5,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    }
}

/// The backward of the forward problem `f`, with `variant` and (with `dlse`) the lse's gradient.
fn bwd(f: &AttnProblem, variant: Option<&'static str>, dlse: bool) -> BwdProblem {
    BwdProblem {
        attn_strides: f.attn_strides,
        dlse,
        run: RunSettings { variant, ..f.run },
        ..BwdProblem::with(f.args)
    }
}

fn entry(name: &str) -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name(name).unwrap()
}

fn assert_passes(name: &str, p: &dyn KernelProblem, backend: &dyn runner::Backend, what: &str) {
    let r = runner::run(entry(name), p, backend).unwrap_or_else(|e| panic!("{what}: {e}"));
    for o in &r.outputs {
        eprintln!("{what}: {} {:?} baseline {:?}", o.name, o.error, o.baseline);
    }
    assert!(
        !r.outputs.is_empty() && r.passed,
        "{what}: {:?}",
        r.failures()
    );
}

#[test]
fn strided_attention_on_the_interpreter() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    for (tiles, what) in [
        (AttnConfig::default(), "ping-pong"),
        (AttnConfig::for_gpu(h100), "producer/consumer"),
    ] {
        for splits in [1, 3] {
            let mut p = fused(4, 2, 77, 64);
            p.attn_cfg = tiles;
            p.lse = true;
            p.args.causal = true;
            p.kv_splits = KvSplits::Fixed(splits);
            assert_passes(
                "attn_fwd",
                &p,
                &Interpreter,
                &format!("fwd {what} split {splits}"),
            );
        }
    }
    for variant in [None, Some("dq")] {
        let mut f = fused(4, 2, 77, 64);
        f.args.causal = true;
        assert_passes(
            "attn_bwd",
            &bwd(&f, variant, false),
            &Interpreter,
            &format!("bwd {variant:?}"),
        );
    }
}

/// The lse's gradient folded into the backward's preprocessing (`BwdConfig::dlse`, the problem's
/// `dlse`): the one-launch program and Hopper's query/key launches on the interpreter, dense and
/// strided, against the f64 backward with the lse term (`reference_bwd::backward_dlse`).
#[test]
fn lse_gradient_folded_on_the_interpreter() {
    for strided in [false, true] {
        for variant in [None, Some("dq")] {
            let mut f = fused(2, 1, 83, 64);
            f.args.causal = true;
            if !strided {
                f.attn_strides = None;
            }
            let what = format!("bwd dlse {variant:?} strided {strided}");
            assert_passes("attn_bwd", &bwd(&f, variant, true), &Interpreter, &what);
        }
    }
}

#[test]
fn strided_attention_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = test_cache("attn-strides");
    let mut lowered = Vec::new();
    for dim in [64, 128] {
        let base = fused(4, 2, 300, dim);
        let mut lse = base;
        lse.lse = true;
        let mut split = lse;
        split.kv_splits = KvSplits::Fixed(3);
        let mut causal = base;
        causal.args.causal = true;
        let mut dense = base;
        dense.attn_strides = None;
        let cases: Vec<(&str, Box<dyn KernelProblem>)> = vec![
            ("fwd plain", Box::new(base)),
            ("fwd lse", Box::new(lse)),
            ("fwd split 3", Box::new(split)),
            ("bwd two", Box::new(bwd(&base, Some("dq"), false))),
            ("bwd two, dlse", Box::new(bwd(&base, Some("dq"), true))),
            (
                "bwd atomic, dlse",
                Box::new(bwd(&causal, Some("atomic"), true)),
            ),
            (
                "bwd atomic, dlse, dense",
                Box::new(bwd(&dense, Some("atomic"), true)),
            ),
        ];
        for (what, p) in cases {
            let plan = p
                .plan(Target::Sm90a)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            for stage in p.stages(Target::Sm90a, &plan).unwrap() {
                assert!(
                    what.ends_with("dense")
                        || stage.kernel.params.iter().any(|x| x.name.ends_with("_ss")),
                    "{what}: {} takes no stride parameters",
                    stage.kernel.name
                );
                let l = kittens_codegen::lower(&stage.kernel, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{what} D{dim}: {e}"));
                lowered.push((format!("{what} D{dim}"), l));
            }
        }
    }
    // Per head dim: 1 + 1 + 2 forward launches, 2 + 2 + 3 + 3 backward.
    assert_eq!(lowered.len(), 28);
    parallel::each(lowered, |(what, l)| {
        let r = compile_clean(&l, &cache, &what);
        eprintln!("{} {what}: {r:?}", l.entry);
    });
}

#[test]
fn strided_attention_on_amd() {
    for t in [Target::Gfx950, Target::Gfx942] {
        clang_for(t.arch().unwrap());
        let mut p = fused(2, 1, 150, 64);
        p.args.causal = true;
        p.lse = true;
        let k = p.build(t).unwrap();
        assert_compiles_without_spills(&k, t, &format!("attn_fwd {t} strided"));
        let emu = IsaEmu::new(t).unwrap();
        assert_passes(
            "attn_fwd",
            &p,
            &emu,
            &format!("attn_fwd {t} strided, ISA emulator"),
        );
        // The lse's gradient folded into the dense backward's preprocessing: compiled and run.
        let mut dense = p;
        dense.attn_strides = None;
        let b = bwd(&dense, None, true);
        let k = b.build(t).unwrap();
        assert_compiles_without_spills(&k, t, &format!("attn_bwd {t} dlse"));
        assert_passes(
            "attn_bwd",
            &b,
            &emu,
            &format!("attn_bwd {t} dlse, ISA emulator"),
        );
        // The strided backward: the query blocks and the key blocks as two launches (gfx942's key
        // loop the 4-wave interleave), each compiled without spills at head dims 64 and 128, and
        // run on the ISA emulator at D64 with the lse's gradient folded in.
        for dim in [64, 128] {
            let mut f = fused(2, 1, 150, dim);
            f.args.causal = true;
            let b = bwd(&f, None, true);
            let plan = b.plan(t).unwrap();
            let stages = b.stages(t, &plan).unwrap();
            assert_eq!(stages.len(), 2, "{t}: query and key blocks");
            for st in &stages {
                assert!(st.kernel.params.iter().any(|x| x.name == "do_ss"));
                let what = format!("{} {t} strided D{dim}", st.kernel.name);
                assert_compiles_without_spills(&st.kernel, t, &what);
            }
        }
        let b = bwd(&p, None, true);
        assert_passes(
            "attn_bwd",
            &b,
            &emu,
            &format!("attn_bwd {t} strided, dlse, ISA emulator"),
        );
        // gfx942's 8-wave ping-pong (its key launch reads dK's and dV's pointers and strides at
        // the stores, `kittens_codegen::hip`'s late_args.rs), at both head dims: at 128 its query
        // launch is the interleave's.
        if t == Target::Gfx942 {
            for dim in [64, 128] {
                let mut f = fused(2, 1, 150, dim);
                f.args.causal = true;
                assert_passes(
                    "attn_bwd",
                    &bwd(&f, Some("pingpong8"), true),
                    &emu,
                    &format!("attn_bwd {t} pingpong8 strided D{dim}, dlse, ISA emulator"),
                );
            }
        }
    }
}

/// Every schedule of the strided backward (the default, `interleave4`, `pingpong8`) on both CDNA
/// targets at head dims 64 and 128, causal and not, as a run builds it: each launch compiles with no
/// spill and no scratch (clang 22; on gfx942 also Debian's clang-19), and none is refused — gfx942's
/// `pingpong8` included, which was refused while its key launch spilled SGPRs (clang-19: 2 at head
/// dim 64, 6 at 128) and its query launch at 128 VGPRs. A schedule that starts spilling fails here
/// instead of shipping.
#[test]
fn every_strided_backward_schedule_on_amd_compiles_without_spills() {
    let mut seen = std::collections::HashSet::new();
    let mut built = Vec::new();
    for t in [Target::Gfx942, Target::Gfx950] {
        clang_for(t.arch().unwrap());
        for variant in [Some("pingpong8"), None, Some("interleave4")] {
            for dim in [64, 128] {
                for causal in [false, true] {
                    let mut f = fused(2, 1, 150, dim);
                    f.args.causal = causal;
                    let b = bwd(&f, variant, false);
                    let what = format!("{t} {} D{dim}", variant.unwrap_or("default"));
                    let stages = b
                        .plan(t)
                        .and_then(|plan| b.stages(t, &plan))
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(stages.len(), 2, "{what}: query and key blocks");
                    for st in stages {
                        // gfx942's default is its interleave: each distinct kernel compiled once.
                        let src = kittens_codegen::lower(&st.kernel, t).unwrap().source;
                        if seen.insert(src) {
                            let label = format!("{} {what} causal {causal}", st.kernel.name);
                            built.push((st.kernel, t, label));
                        }
                    }
                }
            }
        }
    }
    // gfx950: 3 schedules x 2 dims x 2 masks x 2 launches; gfx942: the interleave's 8 and the
    // ping-pong's 6 more (at head dim 128 its query launch is the interleave's).
    assert_eq!(built.len(), 24 + 8 + 6);
    parallel::each(built, |(k, t, label)| {
        assert_compiles_without_spills(&k, t, &label)
    });
}
