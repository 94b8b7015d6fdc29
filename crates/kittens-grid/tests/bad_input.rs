//! Inputs too large for the models or the planners: each call returns a typed error that names the
//! limit it broke, without allocating for the input or looping over it, and never prints a wrapped
//! number. Every case here used to crash (allocation abort, division by zero, index out of range),
//! hang, or return a report built from wrapped 64-bit or 32-bit arithmetic.

use kittens_grid::l2::{simulate, simulate_staggered, GemmShape};
use kittens_grid::regs::{plan_regs, RegsInput};
use kittens_grid::remap::GridOrder;
use kittens_grid::tail::{plan_tail, TailInput, TailModel};
use kittens_grid::GridError;

fn gpu(name: &str) -> &'static kittens_hw::Gpu {
    kittens_hw::gpu(name).unwrap()
}

/// The error's message, checked to name `limit`.
fn limit_error<T: std::fmt::Debug>(r: Result<T, GridError>, limit: &str) -> String {
    let msg = r.expect_err("must be refused").to_string();
    assert!(msg.contains(limit), "`{msg}` does not name `{limit}`");
    msg
}

/// 10^6 x 10^6 tiles of 1x1x1: the old model allocated a 16-byte entry per tile (16 TB) and aborted.
#[test]
fn cache_model_refuses_a_grid_over_its_tile_budget() {
    let shape = GemmShape::bf16(1_000_000, 1_000_000, 1, (1, 1, 1));
    let msg = limit_error(simulate(gpu("mi355x"), &shape, GridOrder::RowMajor), "2^22");
    assert!(msg.contains("1000000000000 tiles"), "{msg}");
}

/// Sizes whose tile counts overflow 64 bits are refused by the same budget, with the real count.
#[test]
fn cache_model_refuses_sizes_that_overflow() {
    let shape = GemmShape::bf16(u64::MAX, u64::MAX, u64::MAX, (1, 1, 1));
    limit_error(simulate(gpu("h100"), &shape, GridOrder::RowMajor), "2^22");
    // One tile, but one operand k-slice of 2^40 x 2^40 bf16 does not fit the model's u32 sizes
    // (and (m + n)·k·2 bytes not even in 64 bits).
    let big = 1u64 << 40;
    let shape = GemmShape::bf16(big, big, big, (big, big, big));
    let msg = limit_error(
        simulate(gpu("h100"), &shape, GridOrder::RowMajor),
        "32 bits",
    );
    assert!(msg.contains(&(1u128 << 81).to_string()), "{msg}");
}

/// 2048 x 2048 tiles of 1x1 with K = 64 k-steps: within the tile budget (2^22) but 2^28 block k-steps,
/// over the work budget of 2^27 (the model would run for minutes).
#[test]
fn cache_model_refuses_work_over_its_budget() {
    let shape = GemmShape::bf16(2048, 2048, 64, (1, 1, 1));
    limit_error(simulate(gpu("mi300x"), &shape, GridOrder::RowMajor), "2^27");
}

/// Windows and chunks at the top of their range: `window · cols` and `xcds · chunk` are computed in
/// 64 bits from 32-bit factors, so the model runs (each block exactly once) instead of wrapping.
#[test]
fn grid_orders_at_the_top_of_their_range_run() {
    let shape = GemmShape::bf16(9216, 9216, 9216, (192, 256, 64));
    let g = gpu("mi355x");
    for order in [
        GridOrder::GroupM { window: u32::MAX },
        GridOrder::XcdSwizzle {
            xcds: 8,
            window: 4,
            chunk: u32::MAX,
        },
    ] {
        let r = simulate_staggered(g, &shape, order, 0.0).expect("a valid order");
        assert_eq!(r.blocks, 48 * 36, "{order:?}");
    }
}

fn tail_input(batch: u64, heads: u64, seq: u64, kv_block: u64) -> TailInput {
    TailInput::new(batch, heads, seq, 128, 384, kv_block)
}

/// 10^9 K/V blocks per workgroup: the old planner tried every split G up to 10^9 (a hang).
#[test]
fn tail_planner_refuses_a_walk_over_its_budget() {
    let r = plan_tail(
        gpu("mi300x"),
        &tail_input(4, 16, 1_000_000_000, 1),
        &TailModel::SEED_001,
    );
    let msg = limit_error(r, "2^20");
    assert!(msg.contains("1000000000 K/V blocks"), "{msg}");
}

/// batch · heads · query blocks overflows 64 bits: the old planner printed the wrapped count.
#[test]
fn tail_planner_refuses_counts_that_overflow() {
    let r = plan_tail(
        gpu("mi300x"),
        &tail_input(1 << 40, 1 << 40, 16384, 64),
        &TailModel::SEED_001,
    );
    limit_error(r, "64");
}

fn regs_input(producers: u32, consumers: u32) -> RegsInput {
    RegsInput {
        producers,
        consumers,
        tile_m: 256,
        tile_n: 256,
        mma: (16, 16, 32),
        k_step: 32,
        reg_stages: 1,
        depth: 2,
        lds_k: 64,
        in_bytes: 2,
        overhead: 16,
    }
}

/// producers + consumers wrapped in u32 (and a block of 2^32 waves walked 2^32 layouts): refused by
/// the 1024-thread block limit, which the message names.
#[test]
fn regs_planner_refuses_blocks_over_the_thread_limit() {
    let g = gpu("mi355x");
    for (p, c) in [(u32::MAX, 1), (0, u32::MAX), (12, 8)] {
        limit_error(plan_regs(g, &regs_input(p, c)), "1024 threads");
    }
    // 16 waves of 64 lanes is exactly 1024 threads: planned, not refused.
    assert!(plan_regs(g, &regs_input(8, 8)).is_ok());
}

/// Register counts that wrap in u32 used to come out small, and the planner said "fits".
#[test]
fn regs_planner_refuses_register_counts_that_overflow() {
    let g = gpu("mi355x");
    let mut s = regs_input(0, 8);
    s.overhead = u32::MAX;
    limit_error(plan_regs(g, &s), "32");
    let mut s = regs_input(0, 8);
    (s.k_step, s.reg_stages, s.in_bytes) = (1 << 20, 1 << 12, 1 << 8);
    limit_error(plan_regs(g, &s), "32");
    // An output tile of 2^32 elements: its fp32 accumulators alone wrap a u32 count.
    let mut s = regs_input(0, 8);
    (s.tile_m, s.tile_n) = (1 << 16, 1 << 16);
    limit_error(plan_regs(g, &s), "2^24");
}

/// A pipeline of no stage, stages of no K, or a register step that is not whole instructions used to
/// be planned (and "fit"); each is refused with the value named.
#[test]
fn regs_planner_refuses_empty_stages_and_partial_instructions() {
    let g = gpu("mi355x");
    let mut s = regs_input(0, 8);
    s.depth = 0;
    limit_error(plan_regs(g, &s), "depth 0");
    let mut s = regs_input(0, 8);
    s.lds_k = 0;
    limit_error(plan_regs(g, &s), "stage K 0");
    let mut s = regs_input(0, 8);
    s.k_step = 1;
    limit_error(
        plan_regs(g, &s),
        "k step 1 is not a multiple of the instruction's K 32",
    );
    let mut s = regs_input(0, 8);
    s.k_step = 64;
    assert!(plan_regs(g, &s).is_ok());
}
