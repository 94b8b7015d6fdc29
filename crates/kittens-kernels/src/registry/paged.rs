//! The registry entry of `attn_paged` (decode attention against a paged KV cache), in a file of its own
//! so that the registry's table stays short.

use super::{no_variants, KernelEntry, Status, TargetPlan};
use crate::{attn_paged, attn_paged_problem};
use kittens_hw::Target;

pub(super) const ATTN_PAGED: KernelEntry = KernelEntry {
    name: "attn_paged",
    about: "decode attention against a paged KV cache read in place (flash_attn_with_kvcache with \
            block_table): the block table and lengths read on the device per step, GQA, causal \
            bottom-right, any scale, split-KV with the merge",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, one wave",
            status: Status::NotYet {
                why: "the AMD lowerings do not emit index reads (block_table) yet",
            },
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, one wave",
            status: Status::NotYet {
                why: "the AMD lowerings do not emit index reads (block_table) yet",
            },
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule:
                "plain, one warp",
            status: Status::NotYet {
                why: "the plain CUDA lowering refuses index reads (block_table), and its row broadcasts \
                      need score rows a wave of chunks wide (16 keys a step here); a producer/consumer \
                      program as attn_varlen_hopper's is the way",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one wave",
            status: Status::Interpreted,
        },
    ],
    variants: &[],
    build_variant: no_variants,
    build_default: || attn_paged::build(&attn_paged_problem::default_config()),
    build_gpu: |_| attn_paged::build(&attn_paged_problem::default_config()),
    parse: attn_paged_problem::parse,
};
