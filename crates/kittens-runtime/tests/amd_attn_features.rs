//! FlashAttention's options (`kittens_kernels::attn::score`: any softmax scale, a soft cap, a sliding
//! window) on the CDNA programs, built the way a run builds them (`KernelProblem::build`): compiled
//! for gfx942 and gfx950 with no spills and no scratch (forward and backward, each option and all
//! together), and their code objects run on the ISA emulator against the f64 references by the test
//! rule at ragged lengths with GQA.

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "attn_support/options.rs"]
mod attn_options;
#[path = "cases_support/parallel.rs"]
mod parallel;

use amd_common::clang_for;
use attn_options::{options, problem};
use kittens_hw::Target;
use kittens_kernels::attn::score::AttnArgs;
use kittens_kernels::attn::AttnShape;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::analyze;
use kittens_runtime::runner::{run, IsaEmu};

#[test]
fn attention_with_options_compiles_without_spills() {
    let mut cases = Vec::new();
    for kernel in ["attn_fwd", "attn_bwd"] {
        for t in [Target::Gfx950, Target::Gfx942] {
            clang_for(t.arch().unwrap()); // installed (if missing) once, before the threads
            for (what, a) in options() {
                for dim in [64, 128] {
                    cases.push((kernel, t, what, a, dim));
                }
            }
        }
    }
    parallel::each(cases, |(kernel, t, what, a, dim)| {
        let arch = t.arch().unwrap();
        let clang = clang_for(arch);
        let mut a = a;
        a.attn.dim = dim;
        let k = problem(kernel, a, RunSettings::default()).build(t).unwrap();
        let l = kittens_codegen::lower(&k, t).unwrap();
        let out = clang
            .compile(&l.source, arch)
            .unwrap_or_else(|e| panic!("{kernel} {t} {what} D{dim}: {e}"));
        let r = analyze(&out.asm, arch, Some(&l.entry)).unwrap();
        eprintln!(
            "{kernel} {t} {what} D{dim}: {} VGPR + {} AGPR, spills {}/{}, scratch {}",
            r.vgpr, r.agpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes
        );
        if (kernel, t, what, dim) == ("attn_bwd", Target::Gfx942, "all, causal", 64) {
            // The plain program spilled 13 SGPRs here: the run takes the 4-wave
            // interleave (`attn_bwd::problem::config`).
            assert!(l.entry.contains("attn_bwd"), "{}", l.entry);
            assert!(r.agpr > 0, "{kernel} {t} {what}: not the interleave: {r:?}");
        }
        assert_eq!(
            (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
            (0, 0, 0),
            "{kernel} {t} {what} D{dim}"
        );
        assert!(r.within_budget(), "{kernel} {t} {what} D{dim}: {r:?}");
    });
}

#[test]
fn attention_with_options_on_the_isa_emulator() {
    for kernel in ["attn_fwd", "attn_bwd"] {
        let entry = kittens_kernels::by_name(kernel).unwrap();
        for t in [Target::Gfx950, Target::Gfx942] {
            clang_for(t.arch().unwrap());
            let emu = IsaEmu::new(t).unwrap();
            for (what, a) in options() {
                let a = AttnArgs {
                    attn: AttnShape {
                        batch: 1,
                        heads: 2,
                        heads_kv: 1,
                        seq: 150,
                        dim: 64,
                        ..a.attn
                    },
                    seq_kv: Some(133),
                    ..a
                };
                let run_settings = RunSettings {
                    input_scale: 4.0,
                    seed: 9,
                    ..RunSettings::default()
                };
                let p = problem(kernel, a, run_settings);
                let r = run(entry, p.as_ref(), &emu)
                    .unwrap_or_else(|e| panic!("{kernel} {t} {what}: {e}"));
                for o in &r.outputs {
                    eprintln!("{kernel} {t} {what}: {} {:?}", o.name, o.error);
                }
                assert!(r.passed, "{kernel} {t} {what}: {:?}", r.failures());
            }
        }
    }
}
