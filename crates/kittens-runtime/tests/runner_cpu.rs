//! The two example kernels on the CPU interpreter (the runner's `cpu` backend) against f64 references,
//! on random inputs of several shapes including ones that are not multiples of the tile.

use kittens_kernels::attn::{AttnArgs, AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::gemm::problem::GemmProblem;
use kittens_kernels::gemm::GemmConfig;
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{self, Interpreter, RunReport};

fn run(name: &str, p: &dyn KernelProblem) -> Result<RunReport, runner::RunError> {
    runner::run(kittens_kernels::by_name(name)?, p, &Interpreter)
}

/// bf16 output rounding alone is a relative error of up to 2^-9 per element; a Frobenius error of 1e-2
/// leaves room for fp32 accumulation order and bf16 P in attention, and catches any indexing mistake
/// (which gives errors of order 1).
const TOL: f64 = 1e-2;

fn gemm(m: usize, n: usize, k: usize, gemm: GemmConfig) -> f64 {
    let r = run(
        "gemm_bf16",
        &GemmProblem {
            m,
            n,
            k,
            gemm,
            run: RunSettings {
                seed: (m * 31 + n * 7 + k) as u64,
                ..RunSettings::default()
            },
            ..GemmProblem::default()
        },
    )
    .unwrap();
    assert!(r.error.rel_err < TOL, "gemm {m}x{n}x{k}: {:?}", r.error);
    assert!(r.passed && r.tolerance == TOL, "gemm {m}x{n}x{k}: {r:?}");
    r.error.rel_err
}

#[test]
fn gemm_small_tiles_several_shapes() {
    for (m, n, k) in [
        (128, 128, 64),
        (200, 136, 100),
        (64, 300, 32),
        (129, 257, 33),
    ] {
        gemm(m, n, k, GemmConfig::small());
    }
}

#[test]
fn gemm_seed_tiles() {
    let e = gemm(256, 256, 192, GemmConfig::default());
    assert!(e > 0.0, "bf16 output rounding must show");
}

/// Runs the attention and judges it by the test rule (`reference::check_rule`: at most 2x the error of
/// PyTorch-style bf16 attention against the same f64 reference, plus a floor) on `rel_err` and
/// `max_rel`; at `scale` 8 and head dim 64 the logits must reach ±64.
fn attn_at(p: AttnProblem, scale: f32) {
    let p = AttnProblem {
        run: RunSettings {
            input_scale: scale,
            ..p.run
        },
        ..p
    };
    let r = run("attn_fwd", &p).unwrap();
    let what = format!(
        "attn {:?} causal={} scale {scale}: {:?}, baseline {:?}",
        p.args.attn, p.args.causal, r.error, r.baseline
    );
    eprintln!("{what}, max |logit| {:?}", r.max_abs_logit);
    let metrics: Vec<&str> = r.checks.iter().map(|c| c.metric).collect();
    assert_eq!(metrics, ["rel_err", "max_rel"], "{what}");
    for c in &r.checks {
        assert!(c.verdict.baseline.is_some(), "{what}: judged by the rule");
        assert!(c.verdict.passed, "{what}: {c:?}");
    }
    assert!(r.passed);
    if scale >= 8.0 {
        let l = r.max_abs_logit.unwrap();
        assert!(l >= 64.0, "{what}: logits reach only {l}");
    }
}

fn attn(batch: usize, heads: usize, heads_kv: usize, seq: usize, layout: AttnLayout, causal: bool) {
    let attn = AttnShape {
        batch,
        heads,
        heads_kv,
        seq,
        dim: 64,
        layout,
    };
    let p = AttnProblem {
        args: AttnArgs {
            attn,
            causal,
            ..Default::default()
        },
        run: RunSettings {
            seed: seq as u64,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    };
    for scale in [1.0, 8.0] {
        attn_at(p, scale);
    }
}

#[test]
fn attention_non_causal_gqa_layouts() {
    attn(1, 4, 2, 128, AttnLayout::Bshd, false);
    attn(2, 2, 1, 100, AttnLayout::Bhsd, false);
    attn(1, 4, 2, 77, AttnLayout::Bhsd, false);
}

#[test]
fn attention_causal_ragged() {
    attn(1, 2, 2, 150, AttnLayout::Bshd, true);
    attn(1, 4, 1, 64, AttnLayout::Bhsd, true);
    attn(1, 4, 2, 33, AttnLayout::Bshd, true);
}

/// The default tile sizes: 32 queries per wave (HipKittens E.3), 32-key blocks, head dimension 128.
#[test]
fn attention_seed_tiles() {
    use kittens_kernels::attn_fwd::AttnConfig;
    let attn = AttnShape {
        batch: 1,
        heads: 2,
        heads_kv: 1,
        seq: 320,
        dim: 128,
        layout: AttnLayout::Bhsd,
    };
    for causal in [false, true] {
        let p = AttnProblem {
            args: AttnArgs {
                attn,
                causal,
                ..Default::default()
            },
            attn_cfg: AttnConfig::default(),
            run: RunSettings {
                seed: 9,
                ..RunSettings::default()
            },
            ..AttnProblem::default()
        };
        for scale in [1.0, 8.0] {
            attn_at(p, scale);
        }
    }
}

/// The rule is not loose: the same run judged against a fixed tolerance far below its error fails, and
/// `passed` says so.
#[test]
fn attention_out_of_tolerance_fails() {
    let p = AttnProblem {
        run: RunSettings {
            tolerance: Some(1e-6),
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    };
    let r = run("attn_fwd", &p).unwrap();
    assert!(!r.passed && r.tolerance == 1e-6, "{r:?}");
    assert!(r.error.rel_err > 1e-6);
}

/// The GEMM with another schedule: small tiles at whole and partial sizes, then the default tiles.
fn gemm_schedule(schedule: kittens_kernels::gemm::GemmSchedule, big: (usize, usize, usize)) {
    let small = GemmConfig {
        schedule,
        ..GemmConfig::small()
    };
    for (m, n, k) in [(128, 128, 64), (200, 136, 100)] {
        gemm(m, n, k, small);
    }
    let default = GemmConfig {
        schedule,
        ..GemmConfig::default()
    };
    gemm(big.0, big.1, big.2, default);
}

/// The same GEMM warp-specialised (the Hopper schedule), on the interpreter.
#[test]
fn gemm_producer_consumer() {
    use kittens_kernels::gemm::GemmSchedule;
    gemm_schedule(GemmSchedule::ProducerConsumer, (256, 512, 192));
}

/// The same GEMM with the 4-wave interleave schedule.
#[test]
fn gemm_interleave4() {
    use kittens_kernels::gemm::GemmSchedule;
    gemm_schedule(GemmSchedule::Interleave4, (256, 256, 192));
}

/// The gfx942 variant (one LDS buffer, the next K step staged in registers, HipKittens E.1 MI325X) on the
/// interpreter: whole tiles, partial tiles in every dimension, a K shorter than one step.
#[test]
fn gemm_register_staging() {
    use kittens_kernels::gemm::Staging;
    let cfg = GemmConfig {
        staging: Staging::Registers,
        ..GemmConfig::default()
    };
    for (m, n, k) in [(256, 256, 192), (264, 300, 136), (100, 40, 40)] {
        gemm(m, n, k, cfg);
    }
    // What `for_gpu` picks for gfx942 is this variant.
    let mi300x = GemmConfig::for_gpu(kittens_hw::gpu("mi300x").unwrap());
    assert_eq!(mi300x.staging, Staging::Registers);
    gemm(129, 257, 72, mi300x);
}

/// The Hopper program (producer/consumer: TMA ring, `wgmma` S = Q·Kᵀ from shared memory, P from
/// registers for P·V) on the interpreter, by the same rule: odd lengths, causal and not, GQA, head
/// dimensions 64 and 128, both layouts, logits to ±64.
#[test]
fn attention_producer_consumer() {
    use kittens_kernels::attn_fwd::{AttnConfig, AttnSchedule};
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cfg = AttnConfig::for_gpu(h100);
    assert_eq!(cfg.schedule, AttnSchedule::ProducerConsumer);
    for (dim, seq, heads, heads_kv, layout, causal, kv_block) in [
        (64, 150, 4, 2, AttnLayout::Bshd, false, 64),
        (64, 77, 2, 1, AttnLayout::Bhsd, true, 128),
        (128, 200, 2, 2, AttnLayout::Bhsd, false, 128),
        (128, 131, 4, 1, AttnLayout::Bshd, true, 64),
    ] {
        let attn = AttnShape {
            batch: 1,
            heads,
            heads_kv,
            seq,
            dim,
            layout,
        };
        // The key loop rotated (P·V of block j−1 beside the softmax of block j) and not.
        for overlap in [true, false] {
            let p = AttnProblem {
                args: AttnArgs {
                    attn,
                    causal,
                    ..Default::default()
                }, // The causal ones with the warpgroups' turns on Q·Kᵀ (compute clusters; same
                // values).
                attn_cfg: AttnConfig {
                    kv_block,
                    pingpong: causal,
                    overlap,
                    ..cfg
                },
                run: RunSettings {
                    seed: seq as u64 + dim as u64,
                    ..RunSettings::default()
                },
                ..AttnProblem::default()
            };
            for scale in [1.0, 8.0] {
                attn_at(p, scale);
            }
        }
    }
}

/// Every Hopper block shape (`gemm::shapes::TILES`: 64, 128 or 256 rows, 128 or 256 columns) of
/// the producer/consumer program on the interpreter, at sizes with partial blocks along M, N and K
/// (fewer rows than one 64-row block, a ragged second block, K past a 64 step).
#[test]
fn gemm_every_hopper_block_shape() {
    use kittens_kernels::gemm::shapes::TILES;
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    for tile in TILES {
        let cfg = tile.config(h100);
        for (m, n, k) in [
            (40, 136, 72),
            (tile.rows as usize + 24, tile.cols as usize + 8, 136),
        ] {
            gemm(m, n, k, cfg);
        }
    }
}

/// `cp.async` slot fills (`GemmConfig::loads`, for rows off 128-byte lines on Hopper) are a lowering
/// choice: the tile program is the same but for A's and B's `slot_fill`, and the interpreter
/// computes the same C, checked against f64 at edge shapes (partial blocks, K no multiple of 64).
#[test]
fn gemm_cp_async_loads_change_no_result() {
    use kittens_ir::SlotFill;
    use kittens_kernels::gemm::{build, shapes::TILES};
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    for tile in [TILES[0], TILES[5]] {
        let tma = tile.config(h100);
        let cp = GemmConfig {
            loads: SlotFill::CpAsync,
            ..tma
        };
        let (kt, kc) = (build(&tma).unwrap(), build(&cp).unwrap());
        assert_eq!(kt.body, kc.body, "{tile}");
        let fills: Vec<_> = kc
            .globals
            .iter()
            .map(|g| (g.name.as_str(), g.slot_fill))
            .collect();
        assert_eq!(
            fills,
            [
                ("a", SlotFill::CpAsync),
                ("b", SlotFill::CpAsync),
                ("c", SlotFill::Tma)
            ],
            "{tile}"
        );
        for (m, n, k) in [(129, 264, 72), (200, 136, 100)] {
            assert_eq!(gemm(m, n, k, tma), gemm(m, n, k, cp), "{tile} {m}x{n}x{k}");
        }
    }
}

/// Split-K through the registry's own launches (`KernelProblem::stages`: the GEMM writing its
/// slices' f32 partial sums, then the reduction), on the interpreter at shapes that are no multiple
/// of the tiles, with slices of unequal length (K steps not a multiple of the split).
#[test]
fn gemm_split_k_stages() {
    use kittens_kernels::gemm::GemmSchedule;
    for (m, n, k, split) in [(200, 136, 1000, 3), (64, 72, 520, 4)] {
        let cfg = GemmConfig {
            schedule: GemmSchedule::ProducerConsumer,
            split_k: split,
            ..GemmConfig::small()
        };
        let p = GemmProblem {
            m,
            n,
            k,
            gemm: cfg,
            run: RunSettings {
                seed: (m * 31 + n * 7 + k) as u64,
                ..RunSettings::default()
            },
            ..GemmProblem::default()
        };
        let r = run("gemm_bf16", &p).unwrap();
        assert_eq!(r.then.len(), 1, "{m}x{n}x{k}/k{split}: {:?}", r.then);
        assert!(
            r.then[0].contains("reduce"),
            "the second launch is the reduction: {:?}",
            r.then
        );
        assert!(
            r.passed && r.error.rel_err < TOL,
            "{m}x{n}x{k}/k{split}: {r:?}"
        );
    }
}
