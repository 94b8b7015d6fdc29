//! The attention forward's key split (`kittens_kernels::attn_fwd::split`) on both AMD targets: the
//! split 8-wave ping-pong kernel, MI300X-attn's kernel split (`--variant seed001`, gfx942) and the
//! merge strip program compile with the AMDGPU clang without spills, and run as the runner's two
//! launches on the host emulation of their HIP (`hip-emu`) and as code objects on the ISA emulator
//! (`isa-emu`), judged by the same rule as the unsplit attention (O and the log-sum-exp each at most
//! 2x the PyTorch-style bf16 forward's error against f64, plus a floor) at odd lengths, both causal
//! alignments (rows with no key: O 0 and lse −∞ exactly), GQA, D64/D128, logits past ±64 and 2 to 8
//! parts, more parts than key blocks included. Lengths are shorter than the interpreter's
//! (tests/runner_attn_split.rs): every emulated lane is a host thread.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::clang_for;
use kittens_hw::Target;
use kittens_ir::Rounding;
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::problem::SEED001;
use kittens_kernels::attn_fwd::split::{build_merge, KvSplits};
use kittens_kernels::attn_fwd::{build, AttnConfig};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::analyze;
use kittens_runtime::runner::{self, Backend, HipEmu, IsaEmu};

/// `(heads, heads_kv, seq, seq_kv, dim, mask, parts, layout)`; mask `None`, or `Some(bottom_right)`.
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<bool>,
    u32,
    AttnLayout,
);

/// The registry's configuration for the target (`None`), or MI300X-attn's (`Some(SEED001)`).
type Variant = Option<&'static str>;

fn problem(c: &Case, rounding: Rounding, variant: Variant) -> AttnProblem {
    let &(heads, heads_kv, seq, seq_kv, dim, mask, parts, layout) = c;
    let mut p = AttnProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads,
                heads_kv,
                seq,
                dim,
                layout,
            },
            seq_kv: Some(seq_kv),
            causal: mask.is_some(),
            bottom_right: mask == Some(true),
            ..Default::default()
        },
        lse: true,
        kv_splits: KvSplits::Fixed(parts),
        run: RunSettings {
            input_scale: 8.0,
            seed: (seq * 31 + seq_kv * 7 + dim) as u64,
            variant,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    };
    p.attn_cfg.rounding = rounding;
    p
}

fn check(backend: &dyn Backend, c: &Case, rounding: Rounding, variant: Variant) {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let p = problem(c, rounding, variant);
    let what = format!(
        "{} {:?} {variant:?} {c:?} {rounding:?}",
        backend.about().name,
        backend.about().target
    );
    let r = runner::run(entry, &p, backend).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(r.shape["kv_splits"], c.6, "{what}");
    let program = if variant.is_some() {
        "mi300x"
    } else {
        "ping_pong8"
    };
    assert_eq!(r.shape["program"], program, "{what}");
    assert_eq!(r.then.len(), 1, "{what}: the merge runs second");
    for o in &r.outputs {
        eprintln!("{what}: {} {:?} baseline {:?}", o.name, o.error, o.baseline);
    }
    assert_eq!(r.checks.len(), 4, "{what}: O and lse, rel_err and max_rel");
    assert!(r.passed, "{what}: {:?}", r.failures());
    if c.0 * c.2 * c.3 >= 600 {
        assert!(r.max_abs_logit.unwrap_or(0.0) > 64.0, "{what}: logits");
    }
}

/// gfx950 (64-key blocks, three-slot loop): 77 queries bottom-right against 63 keys in 3 parts (14
/// rows keep no key; parts 1 and 2 have no block), and one query against 300 keys (5 blocks) in 8
/// parts at D128 with RTZ output.
#[test]
fn hip_emu_gfx950_split_passes_the_rule() {
    let emu = HipEmu::new(Target::Gfx950).unwrap();
    check(
        &emu,
        &(2, 1, 77, 63, 64, Some(true), 3, AttnLayout::Bhsd),
        Rounding::Rtne,
        None,
    );
    check(
        &emu,
        &(1, 1, 1, 300, 128, None, 8, AttnLayout::Bshd),
        Rounding::Rtz,
        None,
    );
}

/// gfx942 (32-key blocks, two-slot loop): 3 queries top-left against one key in 2 parts, and 77
/// queries top-left against 300 keys (the causal limit leaves 3 of 10 blocks) in 4 parts, GQA 4/2.
#[test]
fn hip_emu_gfx942_split_passes_the_rule() {
    let emu = HipEmu::new(Target::Gfx942).unwrap();
    check(
        &emu,
        &(2, 1, 3, 1, 64, Some(false), 2, AttnLayout::Bshd),
        Rounding::Rtne,
        None,
    );
    check(
        &emu,
        &(4, 2, 77, 300, 64, Some(false), 4, AttnLayout::Bhsd),
        Rounding::Rtna,
        None,
    );
}

/// The code objects clang builds, on the ISA emulator (loads landing late in random order, their
/// registers poisoned until they land): both targets, both alignments, 2 to 7 parts.
#[test]
fn isa_emu_split_passes_the_rule_on_both_targets() {
    for (t, cases) in [
        (
            Target::Gfx950,
            [
                (2, 1, 77, 63, 64, Some(true), 3, AttnLayout::Bshd),
                (2, 2, 1, 1000, 128, None, 7, AttnLayout::Bhsd),
            ],
        ),
        (
            Target::Gfx942,
            [
                (2, 1, 3, 300, 128, Some(true), 5, AttnLayout::Bhsd),
                (1, 1, 77, 63, 64, None, 2, AttnLayout::Bshd),
            ],
        ),
    ] {
        let emu = IsaEmu::new(t).unwrap();
        for c in &cases {
            check(&emu, c, Rounding::Rtne, None);
        }
    }
}

/// MI300X-attn's kernel (gfx942: 384-query blocks, 64-key steps) split as the other schedules are,
/// on the host emulation: 77 queries bottom-right against 63 keys (one key block) in 3 parts (14
/// rows keep no key; parts 1 and 2 have no block), and one query against 300 keys (5 blocks) in 4
/// parts of 2, 2, 1 and none at D128 with RTZ output.
#[test]
fn hip_emu_seed001_split_passes_the_rule() {
    check_seed001(
        &HipEmu::new(Target::Gfx942).unwrap(),
        &[
            (
                (2, 1, 77, 63, 64, Some(true), 3, AttnLayout::Bhsd),
                Rounding::Rtne,
            ),
            (
                (1, 1, 1, 300, 128, None, 4, AttnLayout::Bshd),
                Rounding::Rtz,
            ),
        ],
    );
}

/// Its code object on the ISA emulator: 3 queries bottom-right against 300 keys in 5 parts of one
/// block each, and 77 queries top-left against 150 keys in 2 parts (keys 0-127 and 128-149: the
/// rows below 128 keep no key of the second), GQA 2/1.
#[test]
fn isa_emu_seed001_split_passes_the_rule() {
    check_seed001(
        &IsaEmu::new(Target::Gfx942).unwrap(),
        &[
            (
                (2, 1, 3, 300, 128, Some(true), 5, AttnLayout::Bhsd),
                Rounding::Rtne,
            ),
            (
                (2, 1, 77, 150, 64, Some(false), 2, AttnLayout::Bshd),
                Rounding::Rtna,
            ),
        ],
    );
}

/// MI300X-attn's kernel (`--variant seed001`) on `backend`, each case with its output rounding.
fn check_seed001(backend: &dyn Backend, cases: &[(Case, Rounding)]) {
    for (c, rounding) in cases {
        check(backend, c, *rounding, Some(SEED001));
    }
}

/// Split kernels (no mask and bottom-right, D128, 8 and 2 parts; on gfx942 MI300X-attn's kernel
/// too, 2 parts unmasked and 5 bottom-right) and merges (RTZ and RTNA, with and without the
/// log-sum-exp, 2 and 16 parts) compile for both targets with no spills and no scratch.
#[test]
fn split_kernels_and_merges_compile_without_spills() {
    for t in [Target::Gfx950, Target::Gfx942] {
        let gpu = t.gpu().unwrap();
        let arch = t.arch().unwrap();
        let clang = clang_for(arch);
        let base = AttnConfig::for_gpu(gpu);
        let mut kernels = Vec::new();
        for (dim, causal, bottom_right, kv_splits) in [(128, false, false, 8), (128, true, true, 2)]
        {
            let cfg = AttnConfig {
                dim,
                causal,
                bottom_right,
                kv_splits,
                ..base
            }
            .fit_cdna(gpu);
            kernels.push(build(&cfg).unwrap());
        }
        if t == Target::Gfx942 {
            for (causal, bottom_right, layout, kv_splits) in [
                (false, false, AttnLayout::Bshd, 2),
                (true, true, AttnLayout::Bhsd, 5),
            ] {
                let cfg = AttnConfig {
                    causal,
                    bottom_right,
                    layout,
                    kv_splits,
                    ..AttnConfig::default().mi300x()
                };
                kernels.push(build(&cfg).unwrap());
            }
        }
        for (dim, lse, rounding, kv_splits) in [
            (64, false, Rounding::Rtz, 2),
            (128, true, Rounding::Rtna, 16),
        ] {
            let cfg = AttnConfig {
                dim,
                lse,
                rounding,
                kv_splits,
                ..base
            };
            kernels.push(build_merge(&cfg).unwrap());
        }
        for k in &kernels {
            let l = kittens_codegen::lower(k, t).unwrap_or_else(|e| panic!("{} {t}: {e}", k.name));
            let out = clang
                .compile(&l.source, arch)
                .unwrap_or_else(|e| panic!("{} {t}: {e}", k.name));
            let r = analyze(&out.asm, arch, Some(&l.entry)).unwrap();
            eprintln!(
                "{} {t}: {} VGPR + {} AGPR, spills {}/{}, scratch {}",
                k.name, r.vgpr, r.agpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes
            );
            assert_eq!(
                (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
                (0, 0, 0),
                "{} {t}",
                k.name
            );
            assert!(r.within_budget(), "{} {t}: {r:?}", k.name);
        }
    }
}
