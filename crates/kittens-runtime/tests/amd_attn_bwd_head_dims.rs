//! The AMD attention backward (the registry's plain program) at the head dims issue 36 adds beside
//! 64 and 128: compiled with the AMD compiler, 32 and 96 take no spills on gfx942 and gfx950, and 192
//! none on gfx950; the others are refused by name (`attn_bwd::problem`): at 192 and 256 on gfx942
//! the rings need more than its 64 KiB of LDS (the lowering's budget check), at 256 on gfx950 the
//! compiler spilled 96 VGPRs. The code objects at 32 and 96 (gfx942) and 192 (gfx950) on the ISA
//! emulator against the f64 gradients at odd lengths, GQA, causal.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::clang_for;
use kittens_hw::Target;
use kittens_kernels::attn::{AttnArgs, AttnLayout, AttnShape, Causal};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_bwd::{build, BwdConfig};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::analyze;
use kittens_runtime::runner::{run, IsaEmu};

#[test]
fn plain_backward_head_dims_on_cdna() {
    for (target, fits) in [
        (Target::Gfx942, &[32, 96][..]),
        (Target::Gfx950, &[32, 96, 192][..]),
    ] {
        let arch = target.arch().unwrap();
        let clang = clang_for(arch);
        for &dim in fits {
            let cfg = BwdConfig {
                dim,
                causal: Causal::TopLeft,
                layout: AttnLayout::Bhsd,
                ..BwdConfig::for_gpu(target.gpu().unwrap())
            };
            let k = build(&cfg).unwrap_or_else(|e| panic!("{dim}: {e}"));
            let lowered = kittens_codegen::lower(&k, target).unwrap();
            let asm = clang.compile_to_asm(&lowered.source, arch).unwrap();
            let r = analyze(&asm, arch, Some(&lowered.entry)).unwrap();
            eprintln!("{target} dim {dim}: {}", serde_json::to_string(&r).unwrap());
            let spills = (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes);
            assert_eq!(spills, (0, 0, 0), "{target} dim {dim}");
            assert!(r.within_budget(), "{r:?}");
        }
    }
    // gfx942 past 128: the lowering's shared-memory budget names the limit.
    let cfg = BwdConfig {
        dim: 192,
        ..BwdConfig::for_gpu(Target::Gfx942.gpu().unwrap())
    };
    let e = kittens_codegen::lower(&build(&cfg).unwrap(), Target::Gfx942).unwrap_err();
    assert!(e.to_string().contains("65536"), "{e}");
}

fn problem(heads: usize, seq_q: usize, seq_kv: usize, dim: usize) -> BwdProblem {
    BwdProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads,
                heads_kv: 1,
                seq: seq_q,
                dim,
                layout: AttnLayout::Bshd,
            },
            seq_kv: Some(seq_kv),
            causal: true,
            bottom_right: true,
            ..Default::default()
        },
        run: RunSettings {
            input_scale: 2.0,
            seed: (seq_q * 7 + seq_kv) as u64,
            ..RunSettings::default()
        },
        ..BwdProblem::default()
    }
}

/// The ISA emulator, every gradient by the rule; the refused head dims by name.
#[test]
fn plain_backward_head_dims_on_the_isa_emulator() {
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    for (target, dim) in [
        (Target::Gfx942, 32),
        (Target::Gfx942, 96),
        (Target::Gfx950, 192),
    ] {
        let emu = IsaEmu::new(target).unwrap();
        let r = run(entry, &problem(2, 45, 37, dim), &emu)
            .unwrap_or_else(|e| panic!("{target} {dim}: {e}"));
        for o in &r.outputs {
            eprintln!(
                "{target} dim {dim}: {} {:?} baseline {:?}",
                o.name, o.error, o.baseline
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
    for (target, dim, needle) in [
        (Target::Gfx942, 192, "64 KiB"),
        (Target::Gfx950, 256, "spills 96 VGPRs"),
    ] {
        let emu = IsaEmu::new(target).unwrap();
        let e = run(entry, &problem(1, 40, 40, dim), &emu).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("head dim {dim}")) && msg.contains(needle),
            "{msg}"
        );
    }
}
