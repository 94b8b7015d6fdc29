//! Every kernel the lowerings build passes the schedule check they run first
//! (`kittens_ir::analysis::verify`: every block class at sizes chosen from the kernel), and the check
//! refuses a kernel with a barrier removed. Durations are printed (run with `--nocapture`), not asserted.

use kittens_ir::analysis::{analyze_launch, verify, Options, ScheduleError};
use kittens_ir::{Kernel, Op};
use kittens_kernels::attn_fwd::{self, AttnConfig};
use kittens_kernels::gemm::{self, GemmConfig, GemmSchedule, Staging};
use std::time::Instant;

fn kernels() -> Vec<(&'static str, Kernel)> {
    let gemm = |schedule, staging| {
        gemm::build(&GemmConfig {
            schedule,
            staging,
            ..GemmConfig::default()
        })
        .unwrap()
    };
    let attn = |causal| {
        attn_fwd::build(&AttnConfig {
            causal,
            ..AttnConfig::default()
        })
        .unwrap()
    };
    vec![
        ("gemm lds", gemm(GemmSchedule::PingPong8, Staging::Lds)),
        (
            "gemm registers",
            gemm(GemmSchedule::PingPong8, Staging::Registers),
        ),
        (
            "gemm interleave4",
            gemm(GemmSchedule::Interleave4, Staging::Lds),
        ),
        (
            "gemm producer/consumer",
            gemm(GemmSchedule::ProducerConsumer, Staging::Lds),
        ),
        ("attention", attn(false)),
        ("attention causal", attn(true)),
        ("attention sm_90a window", hopper_window(false)),
        ("attention sm_90a window, tile pairs", hopper_window(true)),
    ]
}

/// The Hopper forward with a causal window of 256 keys, one query tile per block or two as one key
/// stream (`AttnConfig::tile_pairs`).
fn hopper_window(tile_pairs: bool) -> Kernel {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    attn_fwd::build(&AttnConfig {
        causal: true,
        bottom_right: true,
        window: Some(kittens_kernels::attn::score::Window::new(256, 0).unwrap()),
        tile_pairs,
        ..AttnConfig::for_gpu(h100)
    })
    .unwrap()
}

#[test]
fn every_kernel_passes_the_schedule_check() {
    for (name, k) in kernels() {
        let t = Instant::now();
        let v = verify(&k).unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!(
            "{name}: {} sizes, {} blocks traced, {} distinct schedules, {:.3} s",
            v.param_sets,
            v.traced_blocks,
            v.classes,
            t.elapsed().as_secs_f64()
        );
    }
}

/// Causal attention's query blocks run different numbers of KV steps: each trip count is its own
/// class (the ragged last block too), and every one is clean.
#[test]
fn causal_attention_blocks_form_classes_by_trip_count() {
    let cfg = AttnConfig {
        dim: 64,
        q_rows: 16,
        kv_block: 32,
        causal: true,
        ..AttnConfig::default()
    };
    let k = attn_fwd::build(&cfg).unwrap();
    // 128 queries per block, 32 keys per step, 263 keys: query blocks 0, 1, 2 run 4, 8 and 9 steps.
    let r = analyze_launch(
        &k,
        &Options {
            params: vec![2, 2, 1, 263, 263],
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(r.blocks, 2 * 2 * 3);
    assert_eq!(r.block_dims, vec![2], "only the query block is read");
    assert_eq!(r.traced_blocks, 3);
    let blocks: Vec<Vec<i64>> = r.classes.iter().map(|c| c.report.block.clone()).collect();
    assert_eq!(blocks, vec![vec![0, 0, 0], vec![0, 0, 1], vec![0, 0, 2]]);
    assert!(r.classes.iter().all(|c| c.blocks == 4));
    assert!(r.hazards().next().is_none());
}

#[test]
fn the_check_refuses_a_gemm_without_its_prologue_barrier() {
    let k = gemm::build(&GemmConfig::default()).unwrap();
    let first = k
        .ops()
        .into_iter()
        .find(|r| matches!(r.op, Op::Barrier { .. }) && !r.implied)
        .unwrap()
        .index;
    let e = verify(&k.without_op(first).unwrap()).unwrap_err();
    assert!(matches!(e, ScheduleError::Hazard { .. }), "{e}");
}
