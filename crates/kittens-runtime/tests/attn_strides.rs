//! The strided attention programs (`kittens_kernels::attn_strides`: each tensor's batch, head and
//! sequence strides kernel parameters) on every target, built the way a run builds them
//! (`KernelProblem::stages` of a problem with `attn_strides`):
//!
//! - the runner on the CPU interpreter: the forward with the AMD ping-pong's and Hopper's
//!   producer/consumer tiles (TMA ring), unsplit and with a 3-part key split (split and merge each
//!   taking its parameters by name), the backward's one-launch program and Hopper's two launches,
//!   all judged by the rule at odd lengths;
//! - sm_90a: every launch compiled by NVRTC without spills (NVRTC runs without a GPU);
//! - gfx942/gfx950: the forward compiled without spills and run on the ISA emulator; the backward
//!   refused by name (its 24 stride parameters spill scalar registers there); the dense backward with
//!   the lse's gradient folded in compiled and run on the ISA emulator.
//!
//! Inputs are Q, K, V sliced out of one fused `(B, N, H + 2·H_kv, D)` projection; outputs are dense in
//! a permuted order (the runners poison outputs with NaN, so an output with gaps cannot be judged
//! here: `kittens-kernels/tests/attn_strides.rs` checks those on the interpreter).

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "cuda_support/common.rs"]
mod cuda_common;

use amd_common::{assert_compiles_without_spills, clang_for};
use cuda_common::{compile_clean, ensure_nvrtc, fresh_cache};
use kittens_hw::Target;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
use kittens_kernels::attn_strides::AttnStrides;
use kittens_kernels::problem::Problem;
use kittens_kernels::reference::AttnShape;
use kittens_runtime::runner::{self, Interpreter, IsaEmu};

/// A fused-projection problem: Q, K, V read at row stride `(H + 2·H_kv)·D`, O, dO, dQ in
/// `(B, N, H, D)` order, dK, dV dense `(B, H_kv, N, D)`.
fn fused(heads: usize, heads_kv: usize, seq: usize, dim: usize) -> Problem {
    let w = (heads + 2 * heads_kv) * dim;
    let fused = [seq * w, dim, w];
    let bshd = [seq * heads * dim, dim, heads * dim];
    let bhsd = [heads_kv * seq * dim, seq * dim, dim];
    Problem {
        attn: AttnShape {
            batch: 2,
            heads,
            heads_kv,
            seq,
            dim,
            layout: AttnLayout::Bhsd,
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
        input_scale: 2.0,
        seed: 5,
        ..Problem::default()
    }
}

fn entry(name: &str) -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name(name).unwrap()
}

fn assert_passes(name: &str, p: &Problem, backend: &dyn runner::Backend, what: &str) {
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
            let p = Problem {
                attn_cfg: tiles,
                lse: true,
                causal: true,
                kv_splits: KvSplits::Fixed(splits),
                ..fused(4, 2, 77, 64)
            };
            assert_passes(
                "attn_fwd",
                &p,
                &Interpreter,
                &format!("fwd {what} split {splits}"),
            );
        }
    }
    for variant in [None, Some("dq")] {
        let p = Problem {
            variant,
            causal: true,
            ..fused(4, 2, 77, 64)
        };
        assert_passes("attn_bwd", &p, &Interpreter, &format!("bwd {variant:?}"));
    }
}

/// The lse's gradient folded into the backward's preprocessing (`BwdConfig::dlse`, the problem's
/// `lse`): the one-launch program and Hopper's query/key launches on the interpreter, dense and
/// strided, against the f64 backward with the lse term (`reference_bwd::backward_dlse`).
#[test]
fn lse_gradient_folded_on_the_interpreter() {
    for strided in [false, true] {
        for variant in [None, Some("dq")] {
            let base = fused(2, 1, 83, 64);
            let p = Problem {
                variant,
                causal: true,
                lse: true,
                attn_strides: base.attn_strides.filter(|_| strided),
                ..base
            };
            let what = format!("bwd dlse {variant:?} strided {strided}");
            assert_passes("attn_bwd", &p, &Interpreter, &what);
        }
    }
}

#[test]
fn strided_attention_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let cache = fresh_cache("attn-strides");
    let mut n = 0;
    for dim in [64, 128] {
        let base = fused(4, 2, 300, dim);
        let cases = [
            ("attn_fwd", "plain", base),
            ("attn_fwd", "lse", Problem { lse: true, ..base }),
            (
                "attn_fwd",
                "split 3",
                Problem {
                    lse: true,
                    kv_splits: KvSplits::Fixed(3),
                    ..base
                },
            ),
            (
                "attn_bwd",
                "two",
                Problem {
                    variant: Some("dq"),
                    ..base
                },
            ),
            (
                "attn_bwd",
                "two, dlse",
                Problem {
                    variant: Some("dq"),
                    lse: true,
                    ..base
                },
            ),
            (
                "attn_bwd",
                "atomic, dlse",
                Problem {
                    variant: Some("atomic"),
                    causal: true,
                    lse: true,
                    ..base
                },
            ),
            (
                "attn_bwd",
                "atomic, dlse, dense",
                Problem {
                    variant: Some("atomic"),
                    lse: true,
                    attn_strides: None,
                    ..base
                },
            ),
        ];
        for (name, what, p) in cases {
            let def = entry(name).problem();
            let plan = def
                .plan(&p, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{name} {what}: {e}"));
            for stage in def.stages(&p, Target::Sm90a, &plan).unwrap() {
                assert!(
                    p.attn_strides.is_none()
                        || stage.kernel.params.iter().any(|x| x.name.ends_with("_ss")),
                    "{name} {what}: {} takes no stride parameters",
                    stage.kernel.name
                );
                let l = kittens_codegen::lower(&stage.kernel, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{name} {what} D{dim}: {e}"));
                let r = compile_clean(&l, &cache, &format!("{name} {what} D{dim}"));
                eprintln!("{} {what} D{dim}: {r:?}", l.entry);
                n += 1;
            }
        }
    }
    // Per head dim: 1 + 1 + 2 forward launches, 2 + 2 + 3 + 3 backward.
    assert_eq!(n, 28);
}

#[test]
fn strided_attention_on_amd() {
    for t in [Target::Gfx950, Target::Gfx942] {
        clang_for(t.arch().unwrap());
        let p = Problem {
            causal: true,
            lse: true,
            ..fused(2, 1, 150, 64)
        };
        let k = entry("attn_fwd").problem().build(&p, t).unwrap();
        assert_compiles_without_spills(&k, t, &format!("attn_fwd {t} strided"));
        let emu = IsaEmu::new(t).unwrap();
        assert_passes(
            "attn_fwd",
            &p,
            &emu,
            &format!("attn_fwd {t} strided, ISA emulator"),
        );
        // The lse's gradient folded into the dense backward's preprocessing: compiled and run.
        let dense = Problem {
            attn_strides: None,
            ..p
        };
        let k = entry("attn_bwd").problem().build(&dense, t).unwrap();
        assert_compiles_without_spills(&k, t, &format!("attn_bwd {t} dlse"));
        assert_passes(
            "attn_bwd",
            &dense,
            &emu,
            &format!("attn_bwd {t} dlse, ISA emulator"),
        );
        let e = entry("attn_bwd")
            .problem()
            .build(&p, t)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("attn_bwd") && e.contains("strides") && e.contains(&t.to_string()),
            "{e}"
        );
    }
}
