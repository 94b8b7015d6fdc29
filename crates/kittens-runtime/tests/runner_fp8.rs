//! `gemm_fp8` (the GEMM tile program with fp8 types) on the CPU interpreter (the runner's `cpu`
//! backend) against f64 on the fp8-rounded inputs, in both fp8 formats, every schedule, both scale
//! layouts and both output dtypes, at shapes that are not multiples of the tile.

use kittens_hw::dtype::DType;
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::gemm::{GemmConfig, GemmSchedule, GemmTypes, Scales, Staging};
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{self, Interpreter, RunReport};

fn run(name: &str, p: &dyn KernelProblem) -> Result<RunReport, runner::RunError> {
    runner::run(kittens_kernels::by_name(name)?, p, &Interpreter)
}

/// Runs `gemm_fp8` with `cfg` and returns `rel_err` against f64 on the same fp8 inputs and scales.
fn fp8(m: usize, n: usize, k: usize, cfg: GemmConfig) -> f64 {
    let r = run(
        "gemm_fp8",
        &GemmProblem {
            m,
            n,
            k,
            gemm: cfg,
            run: RunSettings {
                seed: (m * 31 + n * 7 + k) as u64,
                ..RunSettings::default()
            },
            ..GemmProblem::of(GemmKind::Fp8)
        },
    )
    .unwrap_or_else(|e| panic!("gemm_fp8 {m}x{n}x{k} {cfg:?}: {e}"));
    assert_eq!(r.kernel, "gemm_fp8");
    r.error.rel_err
}

fn types(input: DType, output: DType, scales: Scales) -> GemmTypes {
    GemmTypes {
        input,
        output,
        scales: Some(scales),
    }
}

/// The small tiles (128 block) with fp8 operands; the K step is one 128-wide OCP base tile, two
/// 32-wide FNUZ ones plus another pair (64 would do; 128 also exercises several base tiles in K).
fn small(schedule: GemmSchedule, t: GemmTypes) -> GemmConfig {
    GemmConfig {
        schedule,
        k_step: 128,
        types: t,
        ..GemmConfig::small()
    }
}

/// With f32 output the only error left is fp32 accumulation order (about √k·2^-24 relative): the kernel
/// reads exactly the fp8 values the reference multiplies, and applies both scales. A lost or doubled
/// scale (drawn in [0.5, 2)) or any wrong element gives errors of order 0.1 to 1.
const F32_TOL: f64 = 1e-5;
/// bf16 output: at most 2^-9 relative per element, rounding shows.
const BF16_TOL: f64 = 1e-2;

#[test]
fn both_formats_every_schedule_f32_output_exact_up_to_accumulation() {
    for input in [DType::Fp8E4m3, DType::Fp8E4m3Fnuz] {
        for sched in [
            GemmSchedule::PingPong8,
            GemmSchedule::Interleave4,
            GemmSchedule::ProducerConsumer,
        ] {
            for scales in [Scales::PerTensor, Scales::PerRowCol] {
                let cfg = small(sched, types(input, DType::F32, scales));
                for (m, n, k) in [(200, 136, 300), (129, 257, 100)] {
                    let e = fp8(m, n, k, cfg);
                    assert!(
                        e < F32_TOL,
                        "{input} {sched:?} {scales:?} {m}x{n}x{k}: {e:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn bf16_output_rounds_once() {
    let cfg = small(
        GemmSchedule::PingPong8,
        types(DType::Fp8E4m3, DType::Bf16, Scales::PerTensor),
    );
    let e = fp8(200, 136, 300, cfg);
    assert!(e > F32_TOL && e < BF16_TOL, "{e:e}");
}

/// The registry's configurations: gfx950 (OCP e4m3, K step 128, LDS double buffer) and gfx942 (FNUZ,
/// K step 64, the next step staged in registers: 32 of its 64 KiB) at the paper's 256 block, ragged in
/// every dim.
#[test]
fn per_target_configurations() {
    let mi355x = GemmConfig::fp8_for_gpu(kittens_hw::gpu("mi355x").unwrap());
    assert_eq!(
        (mi355x.types.input, mi355x.k_step, mi355x.staging),
        (DType::Fp8E4m3, 128, Staging::Lds)
    );
    let mi300x = GemmConfig::fp8_for_gpu(kittens_hw::gpu("mi300x").unwrap());
    assert_eq!(
        (mi300x.types.input, mi300x.k_step, mi300x.staging),
        (DType::Fp8E4m3Fnuz, 64, Staging::Registers)
    );
    assert_eq!(mi300x.shared_bytes(), 32 * 1024);
    for cfg in [mi355x, mi300x] {
        let e = fp8(264, 300, 200, cfg);
        assert!(e < BF16_TOL, "{cfg:?}: {e:e}");
    }
}

/// A K step that is not a whole number of operand base tiles is refused, naming the limit.
#[test]
fn k_step_must_hold_whole_fp8_base_tiles() {
    let cfg = GemmConfig {
        k_step: 64,
        ..GemmConfig::fp8_default()
    };
    let err = kittens_kernels::gemm::build(&cfg).unwrap_err().to_string();
    assert!(err.contains("multiple of 128"), "{err}");
}

/// Operands scaled past the fp8 format's largest finite value would be NaN before the kernel runs: the
/// run is refused, naming the limit.
#[test]
fn input_scale_past_the_fp8_range_is_refused() {
    let p = GemmProblem {
        m: 40,
        n: 24,
        k: 36,
        gemm: GemmConfig::fp8_default(),
        run: RunSettings {
            input_scale: 500.0,
            ..RunSettings::default()
        },
        ..GemmProblem::of(GemmKind::Fp8)
    };
    let err = run("gemm_fp8", &p).unwrap_err().to_string();
    assert!(err.contains("exceeds 448"), "{err}");
    let ok = run(
        "gemm_fp8",
        &GemmProblem {
            run: RunSettings {
                input_scale: 400.0,
                ..p.run
            },
            ..p
        },
    )
    .unwrap();
    assert!(ok.passed, "{ok:?}");
}

/// The Hopper configuration the sm_90a lowering compiles (producer/consumer, 128x192 tiles, K step
/// 128, groups of 16 tile-rows, the wgmma chain promoted into fp32 sums every K step) on the interpreter: ragged in M, N and K (K below one step too), with
/// f32 output so that any wrong element or scale shows above accumulation order.
#[test]
fn hopper_configuration_on_the_interpreter() {
    let h100 = kittens_hw::gpu("h100").unwrap();
    let cfg = GemmConfig::fp8_for_gpu(h100);
    assert_eq!(
        (
            cfg.schedule,
            cfg.types.input,
            cfg.k_step,
            cfg.block,
            cfg.promote
        ),
        (GemmSchedule::ProducerConsumer, DType::Fp8E4m3, 128, 192, 1)
    );
    assert_eq!(
        cfg.remap,
        kittens_ir::GridOrder::GroupM { window: 16 },
        "the order the H100 runs chose"
    );
    let exact = GemmConfig {
        types: types(DType::Fp8E4m3, DType::F32, Scales::PerTensor),
        ..cfg
    };
    for (m, n, k) in [(200, 264, 300), (136, 40, 48)] {
        let e = fp8(m, n, k, exact);
        assert!(e < F32_TOL, "{m}x{n}x{k}: {e:e}");
        let e = fp8(m, n, k, cfg);
        assert!(e > F32_TOL && e < BF16_TOL, "{m}x{n}x{k} bf16 out: {e:e}");
    }
}

/// The small-M model's 64×32 block (`gemm::small_m::BLOCKS`: one consumer warpgroup, wgmma n32, its
/// promoted chains in groups of four) on the interpreter at decode-sized M, ragged in M, N and K:
/// f32 output exact up to accumulation order, bf16 output within its one rounding.
#[test]
fn narrow_small_m_block_on_the_interpreter() {
    let h100 = kittens_hw::gpu("h100").unwrap();
    let narrow = kittens_kernels::gemm::shapes::NARROW;
    let cfg = GemmConfig {
        block_rows: narrow.rows,
        block: narrow.cols,
        stages: narrow.stages(h100),
        ..GemmConfig::fp8_for_gpu(h100)
    };
    let exact = GemmConfig {
        types: types(DType::Fp8E4m3, DType::F32, Scales::PerTensor),
        ..cfg
    };
    for (m, n, k) in [(17, 200, 300), (5, 40, 48), (33, 72, 1000)] {
        let e = fp8(m, n, k, exact);
        assert!(e < F32_TOL, "{m}x{n}x{k}: {e:e}");
        let e = fp8(m, n, k, cfg);
        assert!(e > F32_TOL && e < BF16_TOL, "{m}x{n}x{k} bf16 out: {e:e}");
    }
    // A in a box of M's rows (`GemmConfig::a_rows`), 64x32 and 64x48, every M up to the box.
    for (cols, m, n, k) in [
        (32, 16, 200, 300),
        (32, 5, 40, 48),
        (48, 31, 100, 1000),
        (48, 8, 96, 130),
    ] {
        let a_rows = GemmConfig::a_rows_for(64, m as u64);
        let boxed = GemmConfig {
            block: cols,
            a_rows,
            ..exact
        };
        let e = fp8(m, n, k, boxed);
        assert!(e < F32_TOL, "64x{cols} a_rows {a_rows} {m}x{n}x{k}: {e:e}");
    }
}

/// A configuration that loads fewer rows of A than the problem has is refused by name.
#[test]
fn a_box_smaller_than_m_is_refused() {
    let h100 = kittens_hw::gpu("h100").unwrap();
    let cfg = GemmConfig {
        block_rows: 64,
        block: 32,
        a_rows: 16,
        ..GemmConfig::fp8_for_gpu(h100)
    };
    let p = GemmProblem {
        m: 17,
        n: 64,
        k: 128,
        gemm: cfg,
        ..GemmProblem::of(GemmKind::Fp8)
    };
    let e = run("gemm_fp8", &p).unwrap_err().to_string();
    assert!(e.contains("a_rows") && e.contains("m 17"), "{e}");
}
