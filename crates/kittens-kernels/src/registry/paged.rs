//! The registry entry of `attn_paged` (decode attention against a paged KV cache), in a file of its own
//! so that the registry's table stays short.

use super::{KernelEntry, Status, TargetPlan};
use crate::attn_paged_problem;
use kittens_hw::Target;

pub(super) const ATTN_PAGED: KernelEntry = KernelEntry {
    name: "attn_paged",
    about: "decode attention against a paged KV cache read in place (flash_attn_with_kvcache with \
            block_table): the block table and lengths read on the device per step, GQA, causal \
            bottom-right, ALiBi (slopes read on the device), a soft cap, a sliding window \
            (bottom-right), any scale, split-KV with the merge",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, one wave",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, one wave",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, 1 cp.async warpgroup (pages through block_table, rows \
                       clipped at the length) + 1 wgmma warpgroup",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one wave",
            status: Status::Interpreted,
        },
    ],
    variants: &[],
    sizes: super::HEAD_DIM_128,
    parse: attn_paged_problem::parse,
};
