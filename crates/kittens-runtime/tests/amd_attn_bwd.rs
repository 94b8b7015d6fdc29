//! The registry's attention backward lowered for both CDNA targets: compiled with no spills and no
//! scratch, LDS within the budget, the MFMAs of the query blocks' loop counted; the gfx942 source
//! also builds with Debian's clang-19; and the lowered HIP, run on the host emulation (the runner's
//! `hip-emu` backend), passes the test rule on every gradient against the f64 gradients at odd
//! lengths, both causal alignments, GQA, head dims 64 and 128 and logits past ±64.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::{bf16_mfma_opcode, lower};
use kittens_hw::{Arch, Target};
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_bwd::BwdConfig;
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::{analyze, CodeObjectReport};
use kittens_runtime::runner::{run, HipEmu};

/// No spill and no scratch; LDS within the budget; the hot loop the analysis finds is one of the two step loops with its
/// MFMAs: a query block's per key step, `Sᵀ` and `dPᵀ` (step × query_rows over d) and `dQᵀ`
/// (d × query_rows over step), 3·step·query_rows·d / (16·16·k) with k the MFMA's K; or a key
/// block's per query step, `Sᵀ`, `dPᵀ` (key_rows × step over d), `dVᵀ`, `dKᵀ` (d × key_rows over
/// step), 4·key_rows·step·d / (16·16·k).
fn check(arch: Arch, r: &CodeObjectReport) {
    eprintln!("{}: {}", arch.target(), serde_json::to_string(r).unwrap());
    let spills = (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes);
    assert_eq!(spills, (0, 0, 0), "{}", arch.target());
    assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
    let cfg = BwdConfig::default();
    let (s, qr, kr, d) = (cfg.step, cfg.query_rows, cfg.key_rows, cfg.dim);
    let k_mfma = if arch == Arch::Cdna4 { 32 } else { 16 };
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let mfma = hot
        .mix
        .opcodes
        .get(bf16_mfma_opcode(arch).unwrap())
        .copied();
    let query_loop = 3 * s * qr * d / (16 * 16 * k_mfma);
    let key_loop = 4 * kr * s * d / (16 * 16 * k_mfma);
    assert!(
        mfma == Some(query_loop) || mfma == Some(key_loop),
        "{}: {mfma:?} MFMAs, want {query_loop} or {key_loop}",
        arch.target()
    );
}

fn source(gpu: &str) -> (String, Arch) {
    let g = kittens_hw::gpu(gpu).unwrap();
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    let kernel = entry.build_for_gpu(g).unwrap();
    (
        lower(&kernel, g.arch).expect("attn_bwd lowers").source,
        g.arch,
    )
}

#[test]
fn registry_backward_compiles_for_both_targets() {
    for gpu in ["mi355x", "mi300x"] {
        let (src, arch) = source(gpu);
        let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
        let r = analyze(&asm, arch, Some("attn_bwd")).unwrap();
        check(arch, &r);
        // gfx950 reads the column-layout K of dQ with ds_read_b64_tr_b16 (HipKittens D.1).
        let tr = r
            .hot_loop
            .as_ref()
            .unwrap()
            .mix
            .opcodes
            .get("ds_read_b64_tr_b16")
            .copied();
        assert_eq!(tr.is_some(), arch == Arch::Cdna4, "{}", arch.target());
    }
}

#[test]
fn gfx942_backward_builds_with_debian_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    let (src, arch) = source("mi300x");
    let asm = clang.compile_to_asm(&src, arch).unwrap();
    let r = analyze(&asm, arch, Some("attn_bwd")).unwrap();
    check(arch, &r);
}

/// One run on the host emulation of `target`, every gradient judged by the rule.
fn emulate(target: Target, p: &dyn KernelProblem) {
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    let emu = HipEmu::new(target).unwrap();
    let r = run(entry, p, &emu).unwrap_or_else(|e| panic!("{target}: {e}"));
    for o in &r.outputs {
        eprintln!(
            "{} {target}: {} {:?} baseline {:?}",
            r.kernel, o.name, o.error, o.baseline
        );
    }
    assert_eq!(r.outputs.len(), 3);
    for c in &r.checks {
        assert!(
            c.verdict.baseline.is_some() && c.verdict.passed,
            "{target}: {c:?}"
        );
    }
    assert!(r.outputs.iter().all(|o| o.error.rel_err > 0.0));
    assert!(r.passed);
}

fn problem(
    heads: usize,
    seq_q: usize,
    seq_kv: usize,
    dim: usize,
    causal: Option<bool>,
) -> BwdProblem {
    BwdProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads,
                heads_kv: 1,
                seq: seq_q,
                dim,
                layout: if dim == 64 {
                    AttnLayout::Bshd
                } else {
                    AttnLayout::Bhsd
                },
            },
            seq_kv: Some(seq_kv),
            causal: causal.is_some(),
            bottom_right: causal == Some(true),
            ..Default::default()
        },
        run: RunSettings {
            input_scale: 8.0,
            seed: (seq_q * 7 + seq_kv) as u64,
            ..RunSettings::default()
        },
        ..BwdProblem::default()
    }
}

/// Each emulated kernel is one host compile (about 15 s): four configurations, split over the
/// targets, with the bottom-right head-dim-128 kernel on both.
#[test]
fn lowered_backward_matches_f64_gfx950() {
    emulate(Target::Gfx950, &problem(2, 53, 70, 64, None));
    emulate(Target::Gfx950, &problem(2, 45, 37, 128, Some(true)));
}

#[test]
fn lowered_backward_matches_f64_gfx942() {
    emulate(Target::Gfx942, &problem(3, 70, 29, 64, Some(false)));
    emulate(Target::Gfx942, &problem(2, 45, 37, 128, Some(true)));
}
