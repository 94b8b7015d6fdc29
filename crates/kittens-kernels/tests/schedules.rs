//! Schedule analysis of the attention kernel and of the warp-specialised GEMM.

use kittens_ir::analysis::{analyze, Options};
use kittens_kernels::attn_fwd::{build, AttnConfig};

#[test]
fn attention_schedule_has_no_hazard() {
    for causal in [false, true] {
        let cfg = AttnConfig {
            dim: 64,
            q_rows: 16,
            kv_block: 32,
            causal,
            ..AttnConfig::default()
        };
        let k = build(&cfg).unwrap();
        // batch 1, 2 heads sharing one KV head, 200 keys: 7 KV blocks, the last one partial.
        let r = analyze(
            &k,
            &Options {
                params: vec![1, 2, 1, 200, 200],
                block: vec![0, 1, 1],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(r.hazards.is_empty(), "causal={causal}: {:?}", r.hazards);
        assert!(r.waits.iter().all(|w| w.max_outstanding <= 4));
    }
}

/// The GEMM in `schedule`: its small configuration checked hazard-free by the schedule analysis at
/// 128 × 128 × 160, and its full configuration returned for the target checks.
fn gemm_hazard_free(schedule: kittens_kernels::gemm::GemmSchedule) -> kittens_ir::Kernel {
    use kittens_kernels::gemm::{build, GemmConfig};
    let k = build(&GemmConfig {
        schedule,
        ..GemmConfig::small()
    })
    .unwrap();
    let r = analyze(
        &k,
        &Options {
            params: vec![128, 128, 32 * 5],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(r.hazards.is_empty(), "{schedule:?}: {:?}", r.hazards);
    build(&GemmConfig {
        schedule,
        ..GemmConfig::default()
    })
    .unwrap()
}

/// The warp-specialised GEMM: hazard-free, refused on AMD (shared `mma` operands), within H100 budgets.
#[test]
fn producer_consumer_gemm_schedule() {
    let full = gemm_hazard_free(kittens_kernels::gemm::GemmSchedule::ProducerConsumer);
    let h100 = kittens_ir::check_target(&full, kittens_hw::gpu("h100").unwrap()).unwrap();
    assert_eq!(h100.shared_bytes, 3 * (128 + 256) * 64 * 2);
    assert!(kittens_ir::check_target(&full, kittens_hw::gpu("mi355x").unwrap()).is_err());
}

/// Per-target configurations fit their GPU: shared memory, registers, and the schedule's rules.
#[test]
fn gemm_config_per_gpu_fits() {
    use kittens_kernels::gemm::{build, GemmConfig, GemmSchedule};
    for g in kittens_hw::gpu::ALL {
        let cfg = GemmConfig::for_gpu(g);
        let k = build(&cfg).unwrap();
        let r = kittens_ir::check_target(&k, g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        assert!(r.shared_bytes <= g.shared_bytes_per_block);
        assert_eq!(
            cfg.schedule == GemmSchedule::ProducerConsumer,
            !g.arch.is_amd()
        );
    }
    // HipKittens E.1: K step 64 on both CDNA targets; MI325X/MI300X (64 KiB LDS) stage the next K step in
    // registers, MI355X double-buffers it in LDS.
    use kittens_kernels::gemm::Staging;
    for (name, staging) in [
        ("mi300x", Staging::Registers),
        ("mi325x", Staging::Registers),
        ("mi355x", Staging::Lds),
    ] {
        let g = kittens_hw::gpu(name).unwrap();
        let cfg = GemmConfig::for_gpu(g);
        assert_eq!(
            (cfg.k_step, cfg.block, cfg.staging),
            (64, 256, staging),
            "{name}"
        );
        let r = kittens_ir::check_target(&build(&cfg).unwrap(), g).unwrap();
        assert_eq!(r.shared_bytes, cfg.shared_bytes(), "{name}");
    }
}

/// The default attention tiles fit CDNA3 and CDNA4 (K/V double buffers, registers).
#[test]
fn attention_fits_cdna() {
    use kittens_kernels::attn_fwd::{build, AttnConfig};
    let k = build(&AttnConfig::default()).unwrap();
    for name in ["mi300x", "mi355x"] {
        let r = kittens_ir::check_target(&k, kittens_hw::gpu(name).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.shared_bytes, 2 * 2 * 32 * 128 * 2);
        assert!(r.regs_per_wave <= 256, "{name}: {}", r.regs_per_wave);
    }
}

/// The 4-wave interleave GEMM: hazard-free, and one wave per SIMD gets the whole 512-register file.
#[test]
fn interleave_gemm_schedule() {
    let full = gemm_hazard_free(kittens_kernels::gemm::GemmSchedule::Interleave4);
    let t = kittens_ir::check_target(&full, kittens_hw::gpu("mi355x").unwrap()).unwrap();
    assert_eq!(t.reg_budget, 512);
    assert!(
        t.regs_per_wave > 256,
        "needs more than a ping-pong wave could have: {}",
        t.regs_per_wave
    );
}

/// The Hopper attention program: hazard-free at a ragged length for both head dimensions (ring of 2
/// slots at 128, more at 64), within the H100's budgets, refused on AMD (shared `mma` operands).
#[test]
fn producer_consumer_attention_schedule() {
    use kittens_kernels::attn_fwd::AttnSchedule;
    let h100 = kittens_hw::gpu("h100").unwrap();
    for dim in [64, 128] {
        for causal in [false, true] {
            let cfg = AttnConfig {
                dim,
                causal,
                pingpong: causal,
                ..AttnConfig::for_gpu(h100)
            };
            assert_eq!(cfg.schedule, AttnSchedule::ProducerConsumer);
            let k = build(&cfg).unwrap();
            // 2 heads on one KV head, 700 keys: 6 key blocks of 128, the last one partial; the
            // second-to-last query block (blocks are visited last-first).
            for qb in [0, 4] {
                let r = analyze(
                    &k,
                    &Options {
                        params: vec![1, 2, 1, 700, 700],
                        // The grid is [batch, heads, query blocks]: head 1, query block `qb`.
                        block: vec![0, 1, qb],
                        ..Default::default()
                    },
                )
                .unwrap();
                assert!(
                    r.hazards.is_empty(),
                    "dim {dim} causal={causal}: {:?}",
                    r.hazards
                );
            }
            let fit = kittens_ir::check_target(&k, h100).unwrap();
            assert!(fit.shared_bytes <= h100.shared_bytes_per_block, "{fit:?}");
            assert!(kittens_ir::check_target(&k, kittens_hw::gpu("mi355x").unwrap()).is_err());
        }
    }
}

/// gfx950's attention (`AttnConfig::for_gpu`): HipKittens E.3's 64-key block in a ring of three K/V
/// slots, hazard-free at a ragged length, causal or not; inside the K/V loop every wait on the async
/// queue leaves the two loads of block j + 2 outstanding (the block prefetched in this iteration is
/// awaited in the next), where the two-slot ring drains its prefetch (`wait_async(0)`) in the same
/// iteration.
#[test]
fn gfx950_attention_prefetches_a_block_ahead() {
    use kittens_ir::{Op, WaitCount, WaitQueue};
    let g = kittens_hw::gpu("mi355x").unwrap();
    for causal in [false, true] {
        let cfg = AttnConfig {
            causal,
            ..AttnConfig::for_gpu(g)
        };
        assert_eq!(cfg.kv_block, 64);
        let k = build(&cfg).unwrap();
        // Registers: `reg_estimate` counts a tile as live through the whole loop only when its value
        // crosses the back edge (it counted every loop tile so until the budgets were checked at
        // lowering: 362 here, over the 256 of 8 waves); K and V, loaded afresh every step and never
        // live together, fit in 256 without spills (kittens-runtime amd_registry).
        let slots: Vec<u32> = k.shared.iter().map(|s| s.count).collect();
        assert_eq!(slots, vec![3, 3], "K and V rings");
        let r = analyze(
            &k,
            &Options {
                params: vec![1, 2, 1, 333, 333],
                block: vec![0, 1, 1],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(r.hazards.is_empty(), "causal={causal}: {:?}", r.hazards);
        let mut in_loop = vec![];
        k.for_each_op(|o| {
            if let Op::Wait {
                queue: WaitQueue::Async,
                count: WaitCount::Outstanding(n),
            } = o.op
            {
                if o.depth > 1 {
                    in_loop.push(*n);
                }
            }
        });
        assert_eq!(in_loop, vec![2], "causal={causal}");
    }
    let two = build(&AttnConfig::for_gpu(kittens_hw::gpu("mi300x").unwrap())).unwrap();
    let mut drains = 0;
    two.for_each_op(|o| {
        if matches!(
            o.op,
            Op::Wait {
                queue: WaitQueue::Async,
                count: WaitCount::Outstanding(0)
            }
        ) && o.depth > 1
        {
            drains += 1;
        }
    });
    assert_eq!(drains, 1, "gfx942: the prefetch lands within its iteration");
}
