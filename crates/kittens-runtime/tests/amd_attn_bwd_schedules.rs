//! The attention backward's AMD schedules of the key blocks, the registry's `interleave4` (HipKittens
//! §3.3.2's 4-wave interleave with §4's mixed MFMA shapes and §3.2.1's pinned AGPRs) and `pingpong8`
//! (the 8-wave ping-pong), on both CDNA targets:
//!
//! - the causal kernels compile with no spills (the registry's own build of each variant is in
//!   `amd_no_spills`), also with Debian's clang-19 for gfx942, and their hot loop is the key loop with
//!   the MFMAs the configuration implies: for `interleave4` the score products' 16-row MFMAs read K
//!   and V from AGPRs and the gradient products' 32-row MFMAs accumulate dK and dV in AGPRs, with no
//!   copy between the register files in the loop; for `pingpong8` every cluster ends in a barrier and
//!   the compute clusters raise the wave's priority;
//! - the lowered HIP on the host emulation (`hip-emu`) and the code object on the ISA emulator
//!   (`isa-emu`) pass the test rule on every gradient against the f64 gradients at odd lengths
//!   (77 queries and 45 keys, and the other way round), GQA, both causal alignments, head dims 64 and
//!   128 and logits past ±64: each variant meets every one of these on each backend, split over the
//!   two targets so that no test builds more than two kernels.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_hw::{Arch, Target};
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape, Causal};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_bwd::{build, problem::variant, BwdConfig};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::{analyze, AmdgpuClang, CodeObjectReport};
use kittens_runtime::runner::{run, Backend, HipEmu, IsaEmu};

/// The variant `v` of `target`'s configuration with a mask and head dimension.
fn config(target: Target, v: &str, causal: Causal, dim: u32) -> BwdConfig {
    let gpu = target.gpu().unwrap();
    BwdConfig {
        causal,
        dim,
        layout: AttnLayout::Bhsd,
        ..variant(BwdConfig::for_gpu(gpu), v).unwrap()
    }
}

/// Compiled with `clang`: no spills, no scratch, LDS within the budget; the report and assembly.
fn compile(clang: &AmdgpuClang, cfg: &BwdConfig, target: Target) -> (CodeObjectReport, String) {
    let arch = target.arch().unwrap();
    let k = build(cfg).unwrap();
    let lowered = kittens_codegen::lower(&k, target).unwrap();
    let asm = clang.compile_to_asm(&lowered.source, arch).unwrap();
    let r = analyze(&asm, arch, Some(&lowered.entry)).unwrap();
    eprintln!(
        "{:?} {target}: {}",
        cfg.schedule,
        serde_json::to_string(&r).unwrap()
    );
    let spills = (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes);
    assert_eq!(spills, (0, 0, 0), "{:?} {target}", cfg.schedule);
    assert!(r.within_budget(), "{r:?}");
    (r, asm)
}

/// The instructions of the loop whose body starts at `label` (to its backward branch).
fn loop_body<'a>(asm: &'a str, label: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = asm.lines().map(str::trim).collect();
    let start = lines
        .iter()
        .position(|l| l.split_whitespace().next() == Some(&format!("{label}:")))
        .expect("the loop's label");
    let end = (start..lines.len())
        .find(|&i| {
            let mut w = lines[i].split_whitespace();
            let op = w.next().unwrap_or("");
            (op.starts_with("s_cbranch") || op == "s_branch") && w.next() == Some(label)
        })
        .expect("the loop's backward branch");
    lines[start + 1..=end]
        .iter()
        .copied()
        .filter(|l| !l.is_empty() && !l.starts_with(['.', ';']))
        .collect()
}

/// MFMA opcodes of the score products (16 rows) and of the gradient products (32 rows).
fn mfmas(arch: Arch) -> (&'static str, &'static str) {
    match arch {
        Arch::Cdna4 => ("v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16"),
        _ => ("v_mfma_f32_16x16x16_bf16", "v_mfma_f32_32x32x8_bf16"),
    }
}

fn interleave4_compiles(target: Target) {
    let arch = target.arch().unwrap();
    let cfg = config(target, "interleave4", Causal::TopLeft, 128);
    let (r, asm) = compile(&clang_for(arch), &cfg, target);
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let (score, grad) = mfmas(arch);
    // Per 16-query step, 32 keys per wave, D128: Sᵀ and dPᵀ are 2·(32/16)·(16/16)·(128/32) MFMAs of
    // K 32 (twice as many of K 16 on gfx942); dVᵀ and dKᵀ 2·(128/32)·(32/32)·(16/16) of K 16 (8).
    let k_split = if arch == Arch::Cdna4 { 1 } else { 2 };
    let (kr, qs, d) = (cfg.key_rows, cfg.key_step, cfg.dim);
    let n_score = 2 * (kr / 16) * (qs / 16) * (d / 32) * k_split;
    let n_grad = 2 * (d / 32) * (kr / 32) * (qs / 16) * k_split;
    assert_eq!(hot.mix.opcodes.get(score), Some(&n_score), "{target}");
    assert_eq!(hot.mix.opcodes.get(grad), Some(&n_grad), "{target}");
    let body = loop_body(&asm, &hot.label);
    for l in &body {
        let ops: Vec<&str> = l.split_whitespace().collect();
        let arg = |i: usize| ops.get(i).map_or("", |o| o.trim_end_matches(','));
        if ops[0] == score {
            // K, V: the A operand, read from their pinned AGPRs.
            assert!(arg(2).starts_with("a["), "{target}: {l}");
        } else if ops[0] == grad {
            // dK, dV: accumulated in AGPRs.
            assert!(
                arg(1).starts_with("a[") && arg(4).starts_with("a["),
                "{target}: {l}"
            );
        }
        // No move between the register files in the loop: nothing pinned is copied in or out.
        assert!(!ops[0].starts_with("v_accvgpr"), "{target}: {l}");
    }
    assert_eq!(hot.mix.s_barrier, 1, "{target}: one barrier per step");
    // The prefetch (global→LDS) and both kinds of LDS read are in the loop with the MFMAs.
    assert!(hot.mix.buffer > 0 && hot.mix.ds > 0, "{target}: {hot:?}");
    if arch == Arch::Cdna3 {
        if let Some(clang) = debian_clang19() {
            compile(&clang, &cfg, target);
        }
    }
}

#[test]
fn interleave4_compiles_for_gfx950() {
    interleave4_compiles(Target::Gfx950);
}

#[test]
fn interleave4_compiles_for_gfx942() {
    interleave4_compiles(Target::Gfx942);
}

fn pingpong8_compiles(target: Target) {
    let arch = target.arch().unwrap();
    let cfg = config(target, "pingpong8", Causal::BottomRight, 128);
    let (r, asm) = compile(&clang_for(arch), &cfg, target);
    assert_eq!(r.waves_per_simd, 2, "{target}: two waves per SIMD fit");
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    // Three memory and three compute clusters per step, each ending in a barrier.
    assert_eq!(hot.mix.s_barrier, 6, "{target}: {hot:?}");
    let (score, _) = mfmas(arch);
    let k_split = if arch == Arch::Cdna4 { 1 } else { 2 };
    let (kr, qs, d) = (cfg.key_rows, cfg.key_step, cfg.dim);
    let n = 4 * (kr / 16) * (qs / 32) * (d / 16) * k_split;
    assert_eq!(hot.mix.opcodes.get(score), Some(&n), "{target}");
    let prio = loop_body(&asm, &hot.label)
        .iter()
        .filter(|l| l.starts_with("s_setprio"))
        .count();
    assert_eq!(
        prio, 6,
        "{target}: priority up and down around each compute cluster"
    );
    if arch == Arch::Cdna3 {
        if let Some(clang) = debian_clang19() {
            compile(&clang, &cfg, target);
        }
    }
}

#[test]
fn pingpong8_compiles_for_gfx950() {
    pingpong8_compiles(Target::Gfx950);
}

#[test]
fn pingpong8_compiles_for_gfx942() {
    pingpong8_compiles(Target::Gfx942);
}

/// `heads`/`heads_kv` heads, `seq_q` queries, `seq_kv` keys, `dim`, the mask (`Some(bottom_right)`),
/// inputs scaled by 8 (logits past ±64).
fn problem(
    v: &'static str,
    (heads, heads_kv): (usize, usize),
    (seq_q, seq_kv): (usize, usize),
    dim: usize,
    causal: Option<bool>,
) -> BwdProblem {
    BwdProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads,
                heads_kv,
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
            seed: (seq_q * 7 + seq_kv + dim) as u64,
            variant: Some(v),
            ..RunSettings::default()
        },
        ..BwdProblem::default()
    }
}

/// Runs `p` on `backend`: every gradient passes the rule against the f64 gradients, with an error
/// above zero, at logits past ±64.
fn passes(backend: &dyn Backend, p: &BwdProblem) {
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    let r = run(entry, p, backend).unwrap_or_else(|e| panic!("{:?}: {e}", p.run.variant));
    for o in &r.outputs {
        eprintln!(
            "{} {:?} {}: {} {:?} baseline {:?}",
            r.kernel, p.run.variant, r.shape, o.name, o.error, o.baseline
        );
    }
    assert_eq!(r.outputs.len(), 3);
    for c in &r.checks {
        assert!(c.verdict.baseline.is_some() && c.verdict.passed, "{c:?}");
    }
    assert!(r.outputs.iter().all(|o| o.error.rel_err > 0.0));
    assert!(r.max_abs_logit.unwrap() >= 64.0, "{:?}", r.max_abs_logit);
    assert!(r.passed);
}

/// The problems: GQA without a mask at D64 with more queries than keys; causal top-left at D128 with
/// more queries than keys; causal bottom-right at D64 (more keys than queries, GQA) and at D128 (MHA
/// of three heads).
fn gqa_d64(v: &'static str) -> BwdProblem {
    problem(v, (4, 2), (77, 45), 64, None)
}
fn top_left_d128(v: &'static str) -> BwdProblem {
    problem(v, (2, 1), (77, 45), 128, Some(false))
}
fn bottom_right_d64(v: &'static str) -> BwdProblem {
    problem(v, (2, 2), (45, 70), 64, Some(true))
}
fn bottom_right_d128(v: &'static str) -> BwdProblem {
    problem(v, (3, 1), (45, 77), 128, Some(true))
}

// The host emulation: one kernel per test (a host compile is 10-16 s), each variant's two problems
// split over the targets.

#[test]
fn interleave4_on_hip_emu_gfx950() {
    passes(
        &HipEmu::new(Target::Gfx950).unwrap(),
        &gqa_d64("interleave4"),
    );
}

#[test]
fn interleave4_on_hip_emu_gfx942() {
    passes(
        &HipEmu::new(Target::Gfx942).unwrap(),
        &bottom_right_d128("interleave4"),
    );
}

#[test]
fn pingpong8_on_hip_emu_gfx950() {
    passes(
        &HipEmu::new(Target::Gfx950).unwrap(),
        &bottom_right_d128("pingpong8"),
    );
}

#[test]
fn pingpong8_on_hip_emu_gfx942() {
    passes(&HipEmu::new(Target::Gfx942).unwrap(), &gqa_d64("pingpong8"));
}

/// The code objects on the ISA emulator (loads landing late in random order, registers poisoned
/// until they land): GQA at D64 on every target, and one causal kernel, each alignment on one target
/// per variant.
fn on_isa_emu(target: Target, problems: &[BwdProblem]) {
    clang_for(target.arch().unwrap());
    let emu = IsaEmu::new(target).unwrap();
    for p in problems {
        passes(&emu, p);
    }
}

#[test]
fn interleave4_on_isa_emu_gfx950() {
    let v = "interleave4";
    on_isa_emu(Target::Gfx950, &[gqa_d64(v), top_left_d128(v)]);
}

#[test]
fn interleave4_on_isa_emu_gfx942() {
    let v = "interleave4";
    on_isa_emu(Target::Gfx942, &[gqa_d64(v), bottom_right_d64(v)]);
}

#[test]
fn pingpong8_on_isa_emu_gfx950() {
    let v = "pingpong8";
    on_isa_emu(Target::Gfx950, &[gqa_d64(v), bottom_right_d64(v)]);
}

#[test]
fn pingpong8_on_isa_emu_gfx942() {
    let v = "pingpong8";
    on_isa_emu(Target::Gfx942, &[gqa_d64(v), top_left_d128(v)]);
}
