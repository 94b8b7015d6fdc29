//! The registry's `gemm_fp8` (the GEMM tile program with fp8 types), configured per GPU by
//! `GemmConfig::fp8_for_gpu`, lowered and compiled for both CDNA targets: gfx950 with OCP e4m3 and
//! `v_mfma_f32_16x16x128_f8f6f4`, gfx942 with e4m3fnuz and `v_mfma_f32_16x16x32_fp8_fp8` (also with
//! Debian's clang-19); zero spills, LDS equal to the configuration's tiles, the MFMAs of a K step in the
//! hot loop. Then the lowered source run through the host emulation against f64 on the fp8-rounded
//! inputs at shapes that are not multiples of the tile.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::lower;
use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_kernels::cpu::Problem;
use kittens_kernels::gemm_bf16::{build, GemmConfig, Staging};
use kittens_runtime::amd::{analyze, emulate, CodeObjectReport};

fn registry_source(gpu: &str) -> (GemmConfig, String, Arch) {
    let g = kittens_hw::gpu(gpu).unwrap();
    let cfg = GemmConfig::fp8_for_gpu(g);
    let src = lower(&build(&cfg).unwrap(), g.arch).expect("lowers").source;
    (cfg, src, g.arch)
}

/// Per K step each wave computes four 64×32 accumulators: 4·(4·2) base-tile products of K `k_step`,
/// i.e. 32·k_step/K MFMAs with K the instruction's (128 on gfx950, 32 on gfx942).
fn check(arch: Arch, cfg: &GemmConfig, r: &CodeObjectReport) {
    eprintln!("{}: {}", arch.target(), serde_json::to_string(r).unwrap());
    assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
    assert_eq!(r.lds_bytes, cfg.shared_bytes());
    assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let (mfma, k) = match arch {
        Arch::Cdna4 => ("v_mfma_f32_16x16x128_f8f6f4", 128),
        _ => ("v_mfma_f32_16x16x32_fp8_fp8", 32),
    };
    assert_eq!(
        hot.mix.opcodes.get(mfma).copied(),
        Some(32 * cfg.k_step / k),
        "{}",
        arch.target()
    );
    assert!(hot.mix.s_barrier >= 8, "a barrier at every cluster end");
}

#[test]
fn gemm_fp8_compiles_for_gfx950_without_spills() {
    let (cfg, src, arch) = registry_source("mi355x");
    assert_eq!(
        (cfg.types.input, cfg.k_step, cfg.staging),
        (DType::Fp8E4m3, 128, Staging::Lds)
    );
    let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
    check(arch, &cfg, &analyze(&asm, arch, Some("gemm_fp8")).unwrap());
    // Two 16-byte LDS reads per 16×128 fp8 base tile (the MFMA's two K runs per lane); per K step a
    // wave reads its 64×128 A band twice (4 base tiles) and two 32×128 B bands (2 each).
    let hot = analyze(&asm, arch, Some("gemm_fp8"))
        .unwrap()
        .hot_loop
        .unwrap();
    assert_eq!(
        hot.mix.opcodes.get("ds_read_b128").copied(),
        Some((2 * 4 + 2 * 2) * 2)
    );
}

#[test]
fn gemm_fp8_compiles_for_gfx942_without_spills() {
    let (cfg, src, arch) = registry_source("mi325x");
    assert_eq!(
        (cfg.types.input, cfg.k_step, cfg.staging),
        (DType::Fp8E4m3Fnuz, 64, Staging::Lds)
    );
    let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
    check(arch, &cfg, &analyze(&asm, arch, Some("gemm_fp8")).unwrap());
}

/// The gfx942 source also builds with Debian's clang-19 (skips locally without it; `CI=true` fails,
/// as in amd_registry.rs).
#[test]
fn gemm_fp8_gfx942_builds_with_debian_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    let (cfg, src, arch) = registry_source("mi325x");
    let out = clang
        .compile(&src, arch)
        .expect("clang-19 compiles gemm_fp8");
    check(
        arch,
        &cfg,
        &analyze(&out.asm, arch, Some("gemm_fp8")).unwrap(),
    );
}

/// The lowered source on the host emulation against f64, ragged in M, N and K (K also shorter than
/// one step), on both targets' fp8 formats.
#[test]
fn gemm_fp8_runs_right_on_the_emulation() {
    for gpu in ["mi355x", "mi325x"] {
        let g = kittens_hw::gpu(gpu).unwrap();
        for (m, n, k) in [(200, 136, 300), (264, 40, 40)] {
            let p = Problem {
                m,
                n,
                k,
                seed: (m + n + k) as u64,
                ..Problem::default()
            };
            let r = emulate::run_registry("gemm_fp8", &p, g).unwrap();
            eprintln!("{gpu} {m}x{n}x{k}: {:?}", r.error);
            assert!(
                r.passed && r.error.rel_err < 1e-2,
                "{gpu} {m}x{n}x{k}: {r:?}"
            );
            assert!(r.error.rel_err > 0.0, "bf16 output rounding shows");
        }
    }
}
