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
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::gemm::{build, GemmConfig, Staging};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::amd::{analyze, CodeObjectReport};
use kittens_runtime::runner::{self, HipEmu};

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
    assert_eq!((r.vgpr_spill, r.scratch_bytes), (0, 0));
    assert_eq!(r.lds_bytes, cfg.shared_bytes());
    assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    // No spills of any kind on either target (gfx942's configuration stages the next K step in
    // registers: its LDS double buffer spilled 4 SGPRs, `GemmConfig::fp8_for_gpu`).
    assert_eq!(r.sgpr_spill, 0, "{}: {r:?}", arch.target());
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
        (DType::Fp8E4m3Fnuz, 64, Staging::Registers)
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
    let entry = kittens_kernels::by_name("gemm_fp8").unwrap();
    for target in [kittens_hw::Target::Gfx950, kittens_hw::Target::Gfx942] {
        let (emu, gpu) = (HipEmu::new(target).unwrap(), target);
        for (m, n, k) in [(200, 136, 300), (264, 40, 40)] {
            let p = GemmProblem {
                m,
                n,
                k,
                run: RunSettings {
                    seed: (m + n + k) as u64,
                    ..RunSettings::default()
                },
                ..GemmProblem::of(GemmKind::Fp8)
            };
            let r = runner::run(entry, &p, &emu).unwrap();
            assert_eq!(r.kernel, "gemm_fp8");
            // The runner drew and sent the operands in the target's own fp8 format.
            let cfg = GemmConfig::fp8_for_gpu(target.gpu().unwrap());
            assert_eq!(r.shape["input"], cfg.types.input.name(), "{}", r.shape);
            assert_eq!(r.shape["k_step"], cfg.k_step, "{}", r.shape);
            eprintln!("{gpu} {m}x{n}x{k}: {:?}", r.error);
            assert!(
                r.passed && r.error.rel_err < 1e-2,
                "{gpu} {m}x{n}x{k}: {r:?}"
            );
            assert!(r.error.rel_err > 0.0, "bf16 output rounding shows");
        }
    }
}

/// Per-row and per-column scales (the element-wise f32 loads from zero-stride tensors) and f32 output,
/// lowered for both targets and run on the emulation: with f32 output the error left is accumulation
/// order, so a scale taken from the wrong row or column (drawn in [0.5, 2)) would show at order 0.1.
#[test]
fn per_row_col_scales_and_f32_output_on_the_emulation() {
    use kittens_kernels::gemm::{GemmTypes, Scales};
    use kittens_kernels::problem::random;
    use kittens_kernels::reference;
    use kittens_runtime::amd::emulate::{Emulator, HostTensor};
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for gpu in ["mi355x", "mi325x"] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let base = GemmConfig::fp8_for_gpu(g);
        let cfg = GemmConfig {
            types: GemmTypes {
                output: DType::F32,
                scales: Some(Scales::PerRowCol),
                ..base.types
            },
            ..base
        };
        let emu = Emulator::build(&build(&cfg).unwrap(), g.arch).unwrap();
        let (m, n, k) = (200usize, 136usize, 300usize);
        let mut rng = SmallRng::seed_from_u64(7);
        let dt = cfg.types.input;
        let a = random(&mut rng, m * k, dt);
        let b = random(&mut rng, n * k, dt);
        let sa: Vec<f32> = (0..m).map(|_| rng.gen_range(0.5f32..2.0)).collect();
        let sb: Vec<f32> = (0..n).map(|_| rng.gen_range(0.5f32..2.0)).collect();
        let enc =
            |v: &[f32]| kittens_ir::numerics::to_bytes(v, dt, kittens_ir::numerics::Rounding::Rtne);
        let mut t = vec![
            HostTensor::Data(enc(&a)),
            HostTensor::Data(enc(&b)),
            HostTensor::Data(f32_bytes(&sa)),
            HostTensor::Data(f32_bytes(&sb)),
            HostTensor::Data(f32_bytes(&vec![f32::NAN; m * n])),
        ];
        emu.run(&[m as i64, n as i64, k as i64], &mut t, None)
            .unwrap();
        let HostTensor::Data(c) = &t[4] else {
            unreachable!()
        };
        let out: Vec<f32> = c
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let mut r = reference::gemm_abt(&a, &b, m, n, k);
        kittens_kernels::gemm::problem::scale_rows_cols(&mut r, n, Scales::PerRowCol, &sa, &sb);
        let e = reference::compare(&out, &r);
        eprintln!("{gpu}: {e:?}");
        assert!(e.rel_err < 1e-5, "{gpu}: {e:?}");
    }
}
