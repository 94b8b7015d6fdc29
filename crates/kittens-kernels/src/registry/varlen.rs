//! The registry entry of `attn_varlen_bwd` (the variable-length attention backward), in a file of its
//! own so that the registry's table stays short.

use super::{KernelEntry, Status, TargetPlan, DEFAULT_SIZES};
use crate::attn_varlen_bwd_problem;
use kittens_hw::Target;

/// The CDNA targets run the CPU's two one-wave programs (their lse read straight into a register
/// vector at the row `cu_seqlens_q` gives).
const CDNA_SCHEDULE: &str = "plain, one wave: key blocks (dK, dV), then query blocks (dQ)";

pub(super) const ATTN_VARLEN_BWD: KernelEntry = KernelEntry {
    name: "attn_varlen_bwd",
    about: "variable-length attention backward (flash_attn_varlen_func's): dK, dV, dQ of packed \
            sequences from O, dO and the lse, cu_seqlens read on the device, GQA, causal \
            bottom-right per sequence, any scale",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: CDNA_SCHEDULE,
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: CDNA_SCHEDULE,
            status: Status::Compiles,
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
            schedule: CDNA_SCHEDULE,
            status: Status::Interpreted,
        },
    ],
    variants: &[],
    sizes: DEFAULT_SIZES,
    parse: attn_varlen_bwd_problem::parse,
};
