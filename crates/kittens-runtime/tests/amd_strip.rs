//! The memory-bound kernels (`layernorm`, `rotary`: strip programs, `kittens_codegen::strip`) on both
//! CDNA targets: they compile with zero spills (gfx942 also with Debian's clang-19), and their lowered
//! HIP, run on the host emulation, matches the f64 reference at odd shapes — and draws the dropout mask
//! the interpreter draws, bit for bit (the residual plane `h = residual + x·keep/(1 − p)` is computed
//! in the same order on both, so any mask difference shows as a differing element).

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_hw::{Arch, Target};
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::layernorm::problem::LayerNormProblem;
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_kernels::reference::compare;
use kittens_kernels::rotary::problem::RotaryProblem;
use kittens_kernels::rows::NormShape;
use kittens_runtime::amd::analyze;
use kittens_runtime::runner::{self, Backend, HipEmu, Interpreter, Job};
use rand::rngs::SmallRng;
use rand::SeedableRng;

const TARGETS: [Target; 2] = [Target::Gfx950, Target::Gfx942];

fn arch(t: Target) -> Arch {
    t.gpu().unwrap().arch
}

#[test]
fn strip_kernels_compile_without_spills() {
    for name in ["layernorm", "rotary"] {
        let e = kittens_kernels::by_name(name).unwrap();
        for t in TARGETS {
            let k = e.build_for(t).unwrap();
            let src = kittens_codegen::hip::lower(&k, arch(t)).unwrap().source;
            let mut clangs = vec![clang_for(arch(t))];
            if t == Target::Gfx942 {
                clangs.extend(debian_clang19());
            }
            for c in clangs {
                let asm = c.compile_to_asm(&src, arch(t)).unwrap();
                let r =
                    analyze(&asm, arch(t), Some(&kittens_codegen::cexpr::ident(&k.name))).unwrap();
                eprintln!("{name} {t}: {}", serde_json::to_string(&r).unwrap());
                assert_eq!(
                    (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
                    (0, 0, 0),
                    "{name} {t}"
                );
            }
        }
    }
}

/// The interleaved rotary pair moves as 16-byte vectors in the code clang builds for gfx950, not element
/// by element: at D128 a chunk of 8 pairs is 32 contiguous bytes, written as two `global_store_dwordx4`,
/// and every global load is 16 bytes wide (x's two halves and the table rows), for every layout and
/// along either rows (heads, positions).
#[test]
fn interleaved_rotary_moves_pairs_as_16_byte_vectors_on_gfx950() {
    use kittens_kernels::rotary::{self, RotaryConfig, RotaryRows};
    let arch = Arch::Cdna4;
    for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
        for along in [RotaryRows::Heads, RotaryRows::Positions] {
            let cfg = RotaryConfig {
                along,
                ..RotaryConfig::new(128, layout, true)
            };
            let k = rotary::build(&cfg).unwrap();
            let src = kittens_codegen::hip::lower(&k, arch).unwrap().source;
            let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
            let r = analyze(&asm, arch, Some(&kittens_codegen::cexpr::ident(&k.name))).unwrap();
            let global = |prefix: &str| -> Vec<(&str, u32)> {
                let ops = r.instructions.iter();
                ops.filter(|(o, _)| o.starts_with(prefix))
                    .map(|(o, n)| (o.as_str(), *n))
                    .collect()
            };
            assert_eq!(
                global("global_store"),
                [("global_store_dwordx4", 2)],
                "{cfg:?}"
            );
            let loads = global("global_load");
            assert!(
                !loads.is_empty() && loads.iter().all(|(o, _)| *o == "global_load_dwordx4"),
                "{cfg:?}: {loads:?}"
            );
            assert!(global("buffer_").is_empty(), "{cfg:?}");
        }
    }
}

/// Runs `name` at `p` on the emulation of `t` and on the interpreter, on the same inputs.
fn both(name: &str, p: &dyn KernelProblem, t: Target) -> (Vec<f32>, Vec<f32>, Vec<f64>) {
    both_built(name, p, t, p.build(t).unwrap())
}

/// As [`both`], with `ke` (a configuration of the problem's program) on the emulation.
fn both_built(
    name: &str,
    p: &dyn KernelProblem,
    t: Target,
    ke: kittens_ir::Kernel,
) -> (Vec<f32>, Vec<f32>, Vec<f64>) {
    let e = kittens_kernels::by_name(name).unwrap();
    let emu = HipEmu::new(t).unwrap();
    let plan = runner::validate(e, p, &emu).unwrap();
    let ki = p.build(Target::Cpu).unwrap();
    let mut rng = SmallRng::seed_from_u64(p.settings().seed);
    let inputs = p.draw(&ke, &plan.launch, &mut rng);
    let job = |kernel| Job {
        kernel,
        launch: &plan.launch,
        inputs: &inputs,
    };
    let a = emu.execute(&job(&ke)).unwrap().output;
    let b = Interpreter.execute(&job(&ki)).unwrap().output;
    (a, b, p.reference(&inputs).values)
}

#[test]
fn layernorm_on_the_emulation_draws_the_interpreters_mask() {
    // One wave per row, a row over 4 waves (partials through LDS), p = 0 and p > 0.
    for (rows, dim, p) in [(5, 1000, 0.1), (3, 4104, 0.3), (4, 776, 0.0)] {
        let norm = NormShape {
            rows,
            dim,
            p,
            dropout_seed: 0xfeed_beef_0123_4567 ^ dim as u64,
            offset: 7 << 33 | 5,
        };
        let prob = LayerNormProblem {
            norm,
            run: RunSettings {
                seed: dim as u64,
                ..RunSettings::default()
            },
            ..LayerNormProblem::default()
        };
        for t in TARGETS {
            let (emu, interp, reference) = both("layernorm", &prob, t);
            let half = rows * dim;
            assert_eq!(
                emu[half..],
                interp[half..],
                "{t} {norm:?}: residual plane differs"
            );
            let e = compare(&emu, &reference);
            assert!(
                e.rel_err < 1e-2 && e.max_rel < 1.0 / 128.0,
                "{t} {norm:?}: {e:?}"
            );
        }
    }
}

#[test]
fn rotary_on_the_emulation_matches_the_reference() {
    for (layout, interleaved, (batch, heads, seq, dim)) in [
        (AttnLayout::Bshd, false, (1, 3, 37, 64)),
        (AttnLayout::Bhsd, true, (2, 2, 9, 128)),
        (AttnLayout::Bshd, true, (1, 1, 70, 32)),
    ] {
        let p = RotaryProblem {
            attn: AttnShape {
                batch,
                heads,
                heads_kv: heads,
                seq,
                dim,
                layout,
            },
            interleaved,
            x_strides: None,
            run: RunSettings {
                seed: 11,
                ..RunSettings::default()
            },
        };
        for t in TARGETS {
            let (emu, interp, reference) = both("rotary", &p, t);
            // The same products and one rounding: identical to the interpreter.
            assert_eq!(emu, interp, "{t} {layout:?} interleaved={interleaved}");
            let e = compare(&emu, &reference);
            assert!(e.max_rel < 1.0 / 256.0, "{t}: {e:?}");
        }
    }
}

#[test]
fn rotary_arrangements_on_the_emulation_match_the_interpreter() {
    // Heads along the rows (table row broadcast to a lane group's chunks) with head counts that
    // leave part of a wave's rows empty, and positions along the rows with a ragged last block;
    // both forms (the interleaved one moves each pair as one contiguous access), both layouts.
    use kittens_kernels::rotary::{build, RotaryConfig, RotaryRows};
    for (along, rows, (batch, heads, seq, dim)) in [
        (RotaryRows::Heads, 4, (2, 5, 11, 64)),
        (RotaryRows::Heads, 16, (1, 3, 6, 32)),
        (RotaryRows::Positions, 4, (1, 3, 21, 128)),
        (RotaryRows::Positions, 2, (2, 2, 7, 48)),
    ] {
        for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
            for interleaved in [false, true] {
                let p = RotaryProblem {
                    attn: AttnShape {
                        batch,
                        heads,
                        heads_kv: heads,
                        seq,
                        dim,
                        layout,
                    },
                    interleaved,
                    x_strides: None,
                    run: RunSettings {
                        seed: 5 + dim as u64,
                        ..RunSettings::default()
                    },
                };
                let cfg = RotaryConfig {
                    along,
                    rows,
                    waves: 2,
                    ..RotaryConfig::new(dim as u32, layout, interleaved)
                };
                // One target: the strip lowering's HIP differs between the two only in its name
                // (the registry configuration runs on both above).
                let t = Target::Gfx950;
                let (emu, interp, reference) = both_built("rotary", &p, t, build(&cfg).unwrap());
                assert_eq!(emu, interp, "{t} {cfg:?}");
                let e = compare(&emu, &reference);
                assert!(
                    e.max_rel < 1.0 / 256.0 && e.rel_err > 0.0,
                    "{t} {cfg:?}: {e:?}"
                );
            }
        }
    }
}
