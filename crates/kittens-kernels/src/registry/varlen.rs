//! The registry entry of `attn_varlen_bwd` (the variable-length attention backward), in a file of its
//! own so that the registry's table stays short.

use super::{KernelEntry, Status, TargetPlan, DEFAULT_SIZES};
use crate::attn_varlen_bwd_problem;
use kittens_hw::Target;

const VECTOR_LOADS: Status = Status::NotYet {
    why: "its one-wave programs load the lse (and D) from global memory straight into register \
          vectors, which the HIP lowering does not take yet (the forward, attn_varlen, lowers)",
};

pub(super) const ATTN_VARLEN_BWD: KernelEntry = KernelEntry {
    name: "attn_varlen_bwd",
    about: "variable-length attention backward (flash_attn_varlen_func's): dK, dV, dQ of packed \
            sequences from O, dO and the lse, cu_seqlens read on the device, GQA, causal \
            bottom-right per sequence, any scale",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain",
            status: VECTOR_LOADS,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain",
            status: VECTOR_LOADS,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer key blocks, 1 TMA warpgroup + 2 wgmma warpgroups, dQ \
                       added in f32 (FlashAttention-3); between plain strip passes for D and the \
                       dQ conversion",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one wave: key blocks (dK, dV), then query blocks (dQ)",
            status: Status::Interpreted,
        },
    ],
    variants: &[],
    sizes: DEFAULT_SIZES,
    parse: attn_varlen_bwd_problem::parse,
};
