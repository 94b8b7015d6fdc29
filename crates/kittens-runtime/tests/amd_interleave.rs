//! The GEMMs' 4-wave interleave (HipKittens §3.3.2) on gfx950, as the registry builds it
//! (`interleave4`): compiled by the AMDGPU clang it has no spills, keeps the K step's MFMA, LDS-read and
//! global-load counts, and its hot loop alternates LDS reads (and the prefetch) with short runs of
//! MFMAs instead of issuing them in one block; through the host emulation it is right at ragged shapes.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::clang_for;
use kittens_codegen::hip::lower;
use kittens_hw::{Arch, Target};
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::{analyze, CodeObjectReport};
use kittens_runtime::runner::{run, HipEmu};

fn compiled(name: &str) -> CodeObjectReport {
    let e = kittens_kernels::by_name(name).unwrap();
    let k = e
        .build_variant(Target::Gfx950, Some("interleave4"))
        .unwrap();
    let src = lower(&k, Arch::Cdna4).expect("lowers").source;
    let asm = clang_for(Arch::Cdna4)
        .compile_to_asm(&src, Arch::Cdna4)
        .unwrap();
    let r = analyze(&asm, Arch::Cdna4, Some(name)).unwrap();
    eprintln!("{name}: {}", serde_json::to_string(&r.hot_loop).unwrap());
    assert_eq!(
        (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
        (0, 0, 0),
        "{name}"
    );
    assert!(r.within_budget(), "{name}: {r:?}");
    r
}

/// bf16, 256×256 block, K step 64: per K step and wave 4·4·4·2 = 128 `v_mfma_f32_16x16x32_bf16`, the
/// wave's 128 rows of A and of B by 64 columns in 32 `ds_read_b128`, its quarter of the 64 KiB step in 16
/// `buffer_load_dwordx4 … lds`. The K step runs as two sub-steps whose MFMAs each overlap the other
/// sub-step's 16 reads: no run of MFMAs is longer than 8 (the hint asks for 4 per read) and there are
/// at least 32 runs, where the schedule that read everything first issued all 64 of a sub-step in one
/// run.
#[test]
fn bf16_interleave_alternates_reads_and_mfmas() {
    let r = compiled("gemm_bf16");
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let count = |op: &str| hot.mix.opcodes.get(op).copied().unwrap_or(0);
    assert_eq!(count("v_mfma_f32_16x16x32_bf16"), 128);
    assert_eq!(count("ds_read_b128"), 32);
    assert_eq!(count("buffer_load_dwordx4"), 16);
    assert_eq!(hot.mix.s_barrier, 1, "one barrier per K step");
    assert!(hot.longest_mfma_run <= 8, "{hot:?}");
    assert!(hot.mfma_runs >= 32, "{hot:?}");
    assert!(hot.mfma_share > 0.0 && hot.mfma_share < 1.0);
}

/// OCP fp8, K step 128 (one `v_mfma_f32_16x16x128_f8f6f4` K): the step cannot be split, so the one
/// register set rolls per operand tile, each read beside the MFMAs of a product that does not need it:
/// no spills, the step's counts (4·4·4 MFMAs, 32 reads, 16 loads), and the reads spread between the
/// MFMAs (at least 24 runs of MFMAs; reading each step's operands before its MFMAs gave 19, and the
/// one product with no read beside it is a run of 16).
#[test]
fn fp8_interleave_compiles_without_spills() {
    let r = compiled("gemm_fp8");
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let count = |op: &str| hot.mix.opcodes.get(op).copied().unwrap_or(0);
    assert_eq!(count("v_mfma_f32_16x16x128_f8f6f4"), 64);
    assert_eq!(count("ds_read_b128"), 32);
    assert_eq!(count("buffer_load_dwordx4"), 16);
    assert_eq!(hot.mix.s_barrier, 1, "one barrier per K step");
    assert!(hot.mfma_runs >= 24, "{hot:?}");
    assert!(hot.longest_mfma_run <= 16, "{hot:?}");
}

/// Both GEMMs' interleave through the runner's `hip-emu` backend (`kittens run … --schedule
/// interleave4`) at shapes that are not multiples of the 256×256 block or of the K step, judged against
/// f64 by the kernel's tolerance.
#[test]
fn interleave_is_right_at_ragged_shapes_on_the_emulation() {
    let emu = HipEmu::new(Target::Gfx950).unwrap();
    for name in ["gemm_bf16", "gemm_fp8"] {
        let entry = kittens_kernels::by_name(name).unwrap();
        let kind = match name {
            "gemm_fp8" => GemmKind::Fp8,
            _ => GemmKind::Bf16,
        };
        for (m, n, k) in [(77, 33, 5), (200, 136, 300), (257, 64, 131)] {
            let p = GemmProblem {
                m,
                n,
                k,
                run: RunSettings {
                    seed: (m * 3 + n + k) as u64,
                    variant: Some("interleave4"),
                    ..RunSettings::default()
                },
                ..GemmProblem::of(kind)
            };
            let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("{name} {m}x{n}x{k}: {e}"));
            assert!(r.passed, "{name} {m}x{n}x{k}: {r:?}");
            assert!(r.error.rel_err < 5e-3, "{name} {m}x{n}x{k}: {r:?}");
            assert_eq!(
                r.shape["schedule"], "4-wave interleave",
                "{name}: {:?}",
                r.shape
            );
        }
    }
}
