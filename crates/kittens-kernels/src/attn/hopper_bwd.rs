//! What the Hopper (sm_90a) attention backwards share (`crate::attn_bwd`'s producer/consumer
//! program and `crate::attn_varlen_bwd_hopper`, FlashAttention-3's backward structure): the
//! schedule, the shared tiles of a launch (a block-resident pair and a streamed ring) and the key
//! blocks' step from scores to P and dS.

use super::hopper::{BLOCK, COLS};
use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{KernelBuilder, RegId, Schedule};
use kittens_tile::{SharedTile, Swizzle};

/// Queries per streamed slot of a key block.
pub(crate) const STEP: u32 = 64;
/// Registers per thread of a consumer warpgroup (`setmaxnreg`).
pub(crate) const CONSUMER_REGS: u32 = 240;

/// One producer warpgroup, two consumer warpgroups.
pub(crate) fn schedule() -> Schedule {
    Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 24,
        consumer_regs: CONSUMER_REGS,
    }
}

/// Ring slots for the streamed pair of tensors beside the block's own two (`BLOCK` rows each) and
/// `extra` bytes of other shared memory: as many as fit the H100's 227 KiB, 2 to 4.
fn stages(dim: u32, step: u32, extra: u32) -> u32 {
    let own = 2 * BLOCK * dim * 2 + extra;
    let per_step = 2 * step * dim * 2;
    // 227 KiB less 2 KiB for the 1024-byte alignment of the base and the ring barriers.
    (225 * 1024u32)
        .saturating_sub(own)
        .div_euclid(per_step)
        .clamp(2, 4)
}

/// The tile names of one launch: per 64-column half of the head dimension, a block-resident pair of
/// shared tiles (one slot) and a streamed pair (a ring).
pub(crate) struct Smem {
    pub own: [Vec<kittens_ir::SharedId>; 2],
    pub ring: [Vec<kittens_ir::SharedId>; 2],
    pub stages: u32,
}

pub(crate) fn declare_smem(
    k: &mut KernelBuilder,
    dim: u32,
    step: u32,
    extra: u32,
    names: [&str; 4],
) -> Smem {
    let halves = dim / COLS;
    let st = stages(dim, step, extra);
    let swz = |rows| SharedTile::with_swizzle(Bf16, rows, COLS, Swizzle::NV_128B);
    let mut tiles = |name: &str, rows, slots| -> Vec<kittens_ir::SharedId> {
        (0..halves)
            .map(|i| k.shared_tile(&format!("{name}{i}"), swz(rows), slots))
            .collect()
    };
    Smem {
        own: [tiles(names[0], BLOCK, 1), tiles(names[1], BLOCK, 1)],
        ring: [tiles(names[2], step, st), tiles(names[3], step, st)],
        stages: st,
    }
}

/// The key blocks' score-side work of one step without a cap: `s` holds `S − lse/scale` (scaled by
/// `c` it is the exponent of P in base 2) and `dp` `dP − D`, both f32; on return `s` holds P and
/// `dp` dS.
pub(crate) fn probs_and_ds(k: &mut KernelBuilder, c: f32, s: RegId, dp: RegId) {
    k.mul(s, s, c);
    k.exp2(s, s);
    k.mul(dp, s, dp);
}
