//! The kernel registry: every kernel of the suite, the targets it lowers to and, for each, the schedule
//! it is built with there and how far it has got, and its problem definition (how it runs at a
//! problem's sizes: `crate::problem::KernelProblem`). The CLI, the runtime and the tests reach kernels
//! through it (`registry::by_name(name)?.build_for(target)`, `.problem(&args)`); error messages and
//! `kittens list` are generated from it.

use crate::problem::{KernelProblem, NamedArgs};
mod paged;
mod varlen;
use crate::{
    attn, attn_bwd, attn_fwd, attn_varlen, attn_varlen_problem, cross_entropy, gemm, layernorm,
    rmsnorm, rotary, rows, swiglu, KernelError,
};
use kittens_hw::{Gpu, Target};
use kittens_ir::Kernel;
use paged::ATTN_PAGED;
use serde::Serialize;
use varlen::ATTN_VARLEN_BWD;

/// How far a kernel has got on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Status {
    /// Runs on the CPU interpreter against an f64 reference.
    Interpreted,
    /// Lowers, and the generated source compiles with a real compiler (no device measured it).
    Compiles,
    /// Lowers, compiles and was measured on the device; `evidence` is where the results are.
    Measured { evidence: &'static str },
    /// Does not lower to this target yet, and why.
    NotYet { why: &'static str },
}

impl Status {
    /// True when the kernel can be built for the target.
    pub fn available(self) -> bool {
        !matches!(self, Status::NotYet { .. })
    }

    /// A few words for tables.
    pub fn label(self) -> &'static str {
        match self {
            Status::Interpreted => "interpreted",
            Status::Compiles => "compiles",
            Status::Measured { .. } => "measured",
            Status::NotYet { .. } => "not yet",
        }
    }
}

/// One target of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TargetPlan {
    pub target: Target,
    /// The schedule the kernel is built with for this target (its name starts with the IR schedule's
    /// name, `kittens_ir::Schedule::name`; a test checks it).
    pub schedule: &'static str,
    #[serde(flatten)]
    pub status: Status,
}

/// A named variant of a kernel's configuration on some targets (another schedule of the same tile
/// program), chosen with `kittens compile|run --schedule NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Variant {
    pub name: &'static str,
    pub about: &'static str,
    /// The targets it is built for (each a GPU target of the kernel).
    pub targets: &'static [Target],
}

/// A registered kernel. The fields are public so that a kernel from elsewhere — a user's crate, a
/// kernel file read by `kittens --kernel-file` — is an entry like the registry's own and every tool
/// that takes an entry (the runner, `check`, `compile`) takes it.
#[derive(Debug, Serialize)]
pub struct KernelEntry {
    pub name: &'static str,
    pub about: &'static str,
    pub targets: &'static [TargetPlan],
    /// Other configurations than the targets' defaults, by name.
    pub variants: &'static [Variant],
    /// The kernel in the named variant for a GPU (reached only for names `variants` lists).
    #[serde(skip)]
    pub build_variant: fn(&Gpu, &str) -> Result<Kernel, KernelError>,
    /// The default configuration (the CPU interpreter's).
    #[serde(skip)]
    pub build_default: fn() -> Result<Kernel, KernelError>,
    /// The configuration for one GPU model.
    #[serde(skip)]
    pub build_gpu: fn(&Gpu) -> Result<Kernel, KernelError>,
    /// Its problem (its own type, [`KernelProblem`]: launch, inputs, reference, tolerance) parsed
    /// from named arguments; names it does not know are left unread ([`NamedArgs::unread`]).
    #[serde(skip)]
    pub parse: fn(&NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError>,
}

impl KernelEntry {
    /// The plan for one target, if the kernel lists it.
    pub fn plan(&self, target: Target) -> Option<&TargetPlan> {
        self.targets.iter().find(|p| p.target == target)
    }

    /// The kernel as built for `target`: the default configuration on the CPU, the configuration for
    /// the target's GPU (`Target::gpu`) elsewhere. A target the kernel does not lower to yet is an
    /// error that says why.
    pub fn build_for(&self, target: Target) -> Result<Kernel, KernelError> {
        let not_yet = |why: &str| KernelError::NotForTarget {
            kernel: self.name,
            target,
            why: why.to_string(),
        };
        match self.plan(target).map(|p| p.status) {
            None => Err(not_yet("the registry lists no plan for this target")),
            Some(Status::NotYet { why }) => Err(not_yet(why)),
            Some(_) => match target.gpu() {
                Some(gpu) => (self.build_gpu)(gpu),
                None => (self.build_default)(),
            },
        }
    }

    /// The kernel as built for `target` in its variant `name` (`None`: [`Self::build_for`]). A name
    /// the kernel does not have, or a target the variant does not list, is an error naming the valid
    /// ones.
    pub fn build_variant(&self, target: Target, name: Option<&str>) -> Result<Kernel, KernelError> {
        let Some(name) = name else {
            return self.build_for(target);
        };
        let known = || {
            let v: Vec<_> = self.variants.iter().map(|v| v.name).collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let Some(v) = self.variants.iter().find(|v| v.name == name) else {
            return Err(KernelError::Config(format!(
                "`{}` has no variant `{name}`; its variants: {}",
                self.name,
                known()
            )));
        };
        match target.gpu() {
            Some(gpu) if v.targets.contains(&target) => {
                // The target's plan must be available too (a target not yet lowered stays refused).
                self.build_for(target)?;
                (self.build_variant)(gpu, name)
            }
            _ => Err(KernelError::NotForTarget {
                kernel: self.name,
                target,
                why: format!(
                    "the variant `{name}` is built for {}",
                    v.targets
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// The kernel configured for one GPU model, whether or not its target lowers it yet (the schedule
    /// analysis and the planners read any model of the catalog).
    pub fn build_for_gpu(&self, gpu: &Gpu) -> Result<Kernel, KernelError> {
        (self.build_gpu)(gpu)
    }

    /// The default configuration (the paper's shapes), as the CPU interpreter runs it.
    pub fn build_default(&self) -> Result<Kernel, KernelError> {
        (self.build_default)()
    }

    /// The kernel's problem at the sizes and settings `args` name (its defaults for the others):
    /// launch, budget, reference, tolerance.
    pub fn problem(&self, args: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
        (self.parse)(args)
    }

    /// The kernel's problem at its default sizes.
    pub fn default_problem(&self) -> Result<Box<dyn KernelProblem>, KernelError> {
        self.problem(&NamedArgs::new())
    }
}

/// `attn_bwd`'s variants: the AMD schedules of the key blocks, and the Hopper query-block launch.
fn attn_bwd_variant(gpu: &Gpu, v: &str) -> Result<Kernel, KernelError> {
    attn_bwd::build(&attn_bwd::problem::variant(
        attn_bwd::BwdConfig::for_gpu(gpu),
        v,
    )?)
}

/// `build_variant` of a kernel without variants: never reached, since [`KernelEntry::build_variant`]
/// refuses a name its `variants` do not list before calling it.
pub fn no_variants(_: &Gpu, v: &str) -> Result<Kernel, KernelError> {
    Err(KernelError::Config(format!("no variant `{v}`")))
}

/// The GEMMs' variants (both element types: the same tile program).
const GEMM_VARIANTS: &[Variant] = &[Variant {
    name: gemm::problem::INTERLEAVE4,
    about: "4-wave interleave (HipKittens §3.3.2): one wave per SIMD, LDS reads, global loads and \
            MFMAs alternating in the hot loop",
    targets: &[Target::Gfx950],
}];

const GEMM_BF16: KernelEntry = KernelEntry {
    name: "gemm_bf16",
    about: "C = A·Bᵀ, bf16 in/out, fp32 accumulation (HipKittens E.1; producer/consumer on Hopper)",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "8-wave ping-pong, next K step staged in registers (64 KiB LDS)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "8-wave ping-pong, LDS double buffer",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, 1 TMA warpgroup + 2 wgmma warpgroups",
            status: Status::Measured {
                evidence: "bench/results/gemm_bf16",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong (`kittens run --schedule` picks any of the three)",
            status: Status::Interpreted,
        },
    ],
    variants: GEMM_VARIANTS,
    build_variant: |gpu, v| {
        let base = gemm::GemmConfig::for_gpu(gpu);
        gemm::build(&gemm::problem::variant(base, gpu, v)?)
    },
    build_default: || gemm::build(&gemm::GemmConfig::default()),
    build_gpu: |gpu| gemm::build(&gemm::GemmConfig::for_gpu(gpu)),
    parse: gemm::problem::parse_bf16,
};

const GEMM_FP8: KernelEntry = KernelEntry {
    name: "gemm_fp8",
    about: "C = (sa·A)·(sb·B)ᵀ, fp8 e4m3 in (the target's format), bf16 out, fp32 accumulation, \
            per-tensor scales: gemm_bf16's tile program with fp8 types",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "8-wave ping-pong, next K step staged in registers (32 KiB LDS), e4m3fnuz, K step 64",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "8-wave ping-pong, LDS double buffer, e4m3 (OCP), K step 128",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, 1 TMA warpgroup + 2 wgmma warpgroups, e4m3 (wgmma k32), K step 128",
            status: Status::Measured {
                evidence: "bench/results/gemm_fp8",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong, e4m3 (OCP), K step 128 (`kittens run --schedule` picks any of the three)",
            status: Status::Interpreted,
        },
    ],
    variants: GEMM_VARIANTS,
    build_variant: |gpu, v| {
        let base = gemm::GemmConfig::fp8_for_gpu(gpu);
        gemm::build(&gemm::problem::variant(base, gpu, v)?)
    },
    build_default: || gemm::build(&gemm::GemmConfig::fp8_default()),
    build_gpu: |gpu| gemm::build(&gemm::GemmConfig::fp8_for_gpu(gpu)),
    parse: gemm::problem::parse_fp8,
};

/// The attention's variants on CDNA: its causal kernel (a separate code object, `kittens run
/// --causal` builds it), so that `kittens compile` reports its registers and spills too; and
/// MI300X-attn's gfx942 kernel as a configuration of the same program.
const ATTN_FWD_VARIANTS: &[Variant] = &[
    Variant {
        name: attn_fwd::problem::CAUSAL,
        about: "the causal kernel (top-left mask, key blocks past the diagonal skipped)",
        targets: &[Target::Gfx942, Target::Gfx950],
    },
    Variant {
        name: attn_fwd::problem::SEED001,
        about: "MI300X-attn's kernel: 8 waves in two groups of four, K in LDS (64-key blocks, \
                double buffered, XOR swizzle), V from global memory into MFMA operands (given \
                transposed), three 16-query tiles per wave (the third in LDS), 16x16x16 MFMAs",
        targets: &[Target::Gfx942],
    },
];

const ATTN_FWD: KernelEntry = KernelEntry {
    name: "attn_fwd",
    about: "attention forward, online softmax, GQA, causal option, BSHD/BHSD (HipKittens E.3); key split for decoding, a merge launch after it (Flash-Decoding, --kv-splits)",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "8-wave ping-pong",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "8-wave ping-pong",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, 1 TMA warpgroup + 2 wgmma warpgroups (P from registers)",
            status: Status::Measured {
                evidence: "bench/results/attn_fwd",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong",
            status: Status::Interpreted,
        },
    ],
    variants: ATTN_FWD_VARIANTS,
    build_variant: |gpu, v| {
        attn_fwd::build(&attn_fwd::problem::variant(
            attn_fwd::AttnConfig::for_gpu(gpu),
            v,
        )?)
    },
    build_default: || attn_fwd::build(&attn_fwd::AttnConfig::default()),
    // The default tiles fit both CDNA targets (tests/schedules.rs `attention_fits_cdna`); Hopper gets
    // the producer/consumer program.
    build_gpu: |gpu| attn_fwd::build(&attn_fwd::AttnConfig::for_gpu(gpu)),
    parse: attn_fwd::problem::parse,
};

const ATTN_VARLEN: KernelEntry = KernelEntry {
    name: "attn_varlen",
    about: "variable-length attention forward (FlashAttention's flash_attn_varlen_func): packed \
            sequences, cu_seqlens read on the device, GQA, causal bottom-right per sequence, o and lse",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain",
            status: Status::NotYet {
                why: "the AMD lowerings do not emit index reads (cu_seqlens) yet",
            },
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain",
            status: Status::NotYet {
                why: "the AMD lowerings do not emit index reads (cu_seqlens) yet",
            },
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, 1 cp.async warpgroup (fills clipped at each sequence's end) + 2 wgmma warpgroups",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one wave",
            status: Status::Interpreted,
        },
    ],
    variants: &[Variant {
        name: attn_varlen_problem::SEQUSED_K,
        about: "FlashAttention's seqused_k: each sequence keeps the first seqused_k[b] of its key \
                rows (a KV cache's lengths, flash_attn_with_kvcache)",
        targets: &[Target::Sm90a],
    }],
    build_variant: |gpu, v| {
        if v != attn_varlen_problem::SEQUSED_K {
            return no_variants(gpu, v);
        }
        let p = attn_varlen_problem::VarlenProblem {
            run: crate::problem::RunSettings {
                variant: Some(attn_varlen_problem::SEQUSED_K),
                ..Default::default()
            },
            ..Default::default()
        };
        attn_varlen_problem::build_for(&attn_varlen_problem::config(&p), Target::from(gpu.arch))
    },
    build_default: || attn_varlen::build(&attn_varlen_problem::config(&Default::default())),
    build_gpu: |gpu| {
        attn_varlen_problem::build_for(
            &attn_varlen_problem::config(&Default::default()),
            Target::from(gpu.arch),
        )
    },
    parse: attn_varlen_problem::parse,
};

const ATTN_BWD: KernelEntry = KernelEntry {
    name: "attn_bwd",
    about: "attention backward (dQ, dK, dV from O, dO and the log-sum-exp), GQA, causal top-left or \
            bottom-right, BSHD/BHSD, seq_q != seq_kv; key blocks for dK/dV and query blocks for dQ in \
            one launch (FlashAttention-2 Algorithm 2)",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, 4 waves, key and query blocks",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, 4 waves, key and query blocks",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "producer/consumer, key blocks (dK, dV); the query blocks (dQ, D) are the \
                       variant `dq`; the variant `atomic` adds dQ from the key blocks \
                       (FlashAttention-3's form, the Python default at head dim 128)",
            status: Status::Measured {
                evidence: "bench/results/attn_bwd",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, 4 waves, key and query blocks",
            status: Status::Interpreted,
        },
    ],
    build_default: || attn_bwd::build(&attn_bwd::BwdConfig::default()),
    build_gpu: |gpu| attn_bwd::build(&attn_bwd::BwdConfig::for_gpu(gpu)),
    variants: &[
        Variant {
            name: attn_bwd::problem::INTERLEAVE4,
            about: "4-wave interleave of the key blocks (HipKittens §3.3.2): LDS reads, prefetches \
                    and MFMAs alternating; 32 keys per wave, dK/dV by 32x32 MFMAs beside the \
                    scores' 16x16 ones, K, V, dK, dV pinned to AGPRs",
            targets: &[Target::Gfx950, Target::Gfx942],
        },
        Variant {
            name: attn_bwd::problem::PINGPONG8,
            about: "8-wave ping-pong of the key blocks (HipKittens §3.3.2): two groups of four \
                    waves alternating memory and compute clusters",
            targets: &[Target::Gfx950, Target::Gfx942],
        },
        Variant {
            name: attn_bwd::problem::DQ,
            about: "the Hopper backward's second launch: query blocks for dQ",
            targets: &[Target::Sm90a],
        },
        Variant {
            name: attn_bwd::problem::ATOMIC,
            about: "the key blocks of the Hopper backward's atomic form (FlashAttention-3): dQ \
                    added into an f32 accumulator by TMA reductions, no query-block launch",
            targets: &[Target::Sm90a],
        },
    ],
    build_variant: attn_bwd_variant,
    parse: attn_bwd::problem::parse,
};

const LAYERNORM: KernelEntry = KernelEntry {
    name: "layernorm",
    about:
        "out = LayerNorm(residual + dropout(x))·weight + bias and the new residual, bf16 in/out, \
            f32 statistics, Philox 4x32-10 dropout (HipKittens Fig. 9)",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, one 16-byte chunk per lane: rows split over waves",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, one 16-byte chunk per lane: rows split over waves",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "plain, one 16-byte chunk per lane: a D = 2048 row over 8 warps",
            status: Status::Measured {
                evidence: "bench/results/layernorm",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one 16-byte chunk per lane: rows split over waves",
            status: Status::Interpreted,
        },
    ],
    build_default: || layernorm::build(&layernorm::LayerNormConfig::new(1000, 0.1, 32)),
    build_gpu: |gpu| layernorm::build(&layernorm::LayerNormConfig::for_gpu(gpu, 2048, 0.1)),
    variants: &[],
    build_variant: no_variants,
    parse: layernorm::problem::parse,
};

const ROTARY: KernelEntry = KernelEntry {
    name: "rotary",
    about:
        "rotary position embedding on q or k, BSHD/BHSD, half rotation (GPT-NeoX) or interleaved \
            (GPT-J), cos/sin tables given (HipKittens Fig. 9)",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "plain, heads of one position per warp (the table row broadcast)",
            status: Status::Measured {
                evidence: "bench/results/rotary",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Interpreted,
        },
    ],
    build_default: || {
        rotary::build(&rotary::RotaryConfig::new(
            64,
            attn::AttnLayout::Bshd,
            false,
        ))
    },
    build_gpu: |_| {
        rotary::build(&rotary::RotaryConfig::new(
            128,
            attn::AttnLayout::Bshd,
            false,
        ))
    },
    variants: &[],
    build_variant: no_variants,
    parse: rotary::problem::parse,
};

const ROTARY_BWD: KernelEntry = KernelEntry {
    name: "rotary_bwd",
    about: "rotary's backward: dx = dy rotated by -theta (rotary with the sine negated), same \
            layouts and forms",
    targets: &[
        TargetPlan {
            target: Target::Gfx942,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Sm90a,
            schedule: "plain, heads of one position per warp (the table row broadcast)",
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, heads of one position per wave (the table row broadcast)",
            status: Status::Interpreted,
        },
    ],
    build_default: || {
        rotary::build(&rotary::RotaryConfig {
            inverse: true,
            ..rotary::RotaryConfig::new(64, attn::AttnLayout::Bshd, false)
        })
    },
    build_gpu: |_| {
        rotary::build(&rotary::RotaryConfig {
            inverse: true,
            ..rotary::RotaryConfig::new(128, attn::AttnLayout::Bshd, false)
        })
    },
    variants: &[],
    build_variant: no_variants,
    parse: rotary::problem::parse_bwd,
};

/// The row-wise memory-bound kernels' four targets: one schedule on all of them.
macro_rules! plain_targets {
    ($cpu:expr, $gpu:expr) => {
        &[
            TargetPlan {
                target: Target::Gfx942,
                schedule: $gpu,
                status: Status::Compiles,
            },
            TargetPlan {
                target: Target::Gfx950,
                schedule: $gpu,
                status: Status::Compiles,
            },
            TargetPlan {
                target: Target::Sm90a,
                schedule: $gpu,
                status: Status::Compiles,
            },
            TargetPlan {
                target: Target::Cpu,
                schedule: $cpu,
                status: Status::Interpreted,
            },
        ]
    };
}

/// Row length of the norms' GPU builds (Llama-2-7B's hidden size).
const NORM_DIM: u32 = 4096;
/// Width F of SwiGLU's GPU builds (Llama-3-8B's intermediate size).
const SWIGLU_F: u32 = 14336;
const GPU_TARGETS: &[Target] = &[Target::Gfx942, Target::Gfx950, Target::Sm90a];

const RMSNORM: KernelEntry = KernelEntry {
    name: "rmsnorm",
    about:
        "r = x + residual, y = r / sqrt(mean(r^2) + eps) * weight, and the new residual r; bf16 \
            in/out, f32 statistics (Llama's RMSNorm fused with the residual add)",
    targets: plain_targets!(
        "plain, one 16-byte chunk per lane: rows split over waves",
        "plain, one 16-byte chunk per lane: rows split over waves"
    ),
    build_default: || rmsnorm::build(&rmsnorm::RmsNormConfig::new(1000, true, 32)),
    build_gpu: |gpu| rmsnorm::build(&rmsnorm::RmsNormConfig::for_gpu(gpu, NORM_DIM, true)),
    variants: &[],
    build_variant: no_variants,
    parse: rmsnorm::problem::parse,
};

const RMSNORM_BWD: KernelEntry = KernelEntry {
    name: "rmsnorm_bwd",
    about: "rmsnorm's backward: dx (= dresidual) from dy, r, weight and the new residual's gradient, \
            rstd recomputed; dweight summed over rows in a second launch from per-wave f32 partials",
    targets: plain_targets!(
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch",
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch (variant `dweight`)"
    ),
    build_default: || {
        let cfg = rmsnorm::RmsNormConfig::new(1000, true, 32);
        rmsnorm::build_bwd(&cfg, &rows::RowLoop::for_gpu(None, cfg.waves))
    },
    build_gpu: |gpu| {
        let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, NORM_DIM, true);
        rmsnorm::build_bwd(&cfg, &rows::RowLoop::for_gpu(Some(gpu), cfg.waves))
    },
    variants: &[Variant {
        name: "dweight",
        about: "the backward's second launch: dweight from the first launch's partial sums",
        targets: GPU_TARGETS,
    }],
    build_variant: |gpu, _| {
        let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, NORM_DIM, true);
        rmsnorm::build_dweight(&cfg, &rows::RowLoop::for_gpu(Some(gpu), cfg.waves))
    },
    parse: rmsnorm::problem::parse_bwd,
};

const LAYERNORM_BWD: KernelEntry = KernelEntry {
    name: "layernorm_bwd",
    about: "layernorm's backward: dx, dresidual from dy, dh, x, residual, weight, the dropout mask \
            drawn again and the statistics recomputed; dweight and dbias summed over rows in a \
            second launch from per-wave f32 partials",
    targets: plain_targets!(
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch",
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch (variant `dweight`)"
    ),
    build_default: || {
        let cfg = layernorm::LayerNormConfig::new(1000, 0.1, 32);
        layernorm::bwd::build_bwd(&cfg, &rows::RowLoop::for_gpu(None, cfg.waves))
    },
    build_gpu: |gpu| {
        let cfg = layernorm::LayerNormConfig::for_gpu(gpu, NORM_DIM, 0.1);
        layernorm::bwd::build_bwd(&cfg, &rows::RowLoop::for_gpu(Some(gpu), cfg.waves))
    },
    variants: &[Variant {
        name: "dweight",
        about: "the backward's second launch: dweight and dbias from the first launch's partial sums",
        targets: GPU_TARGETS,
    }],
    build_variant: |gpu, _| {
        let cfg = layernorm::LayerNormConfig::for_gpu(gpu, NORM_DIM, 0.1);
        layernorm::bwd::build_dweight(&cfg, &rows::RowLoop::for_gpu(Some(gpu), cfg.waves))
    },
    parse: layernorm::problem::parse_bwd,
};

/// SwiGLU's variant: gate and up as the halves of one tensor.
const SWIGLU_VARIANTS: &[Variant] = &[Variant {
    name: "packed",
    about:
        "gate and up as the two halves of one [rows, 2F] tensor (a fused gate-and-up projection)",
    targets: GPU_TARGETS,
}];

const SWIGLU: KernelEntry = KernelEntry {
    name: "swiglu",
    about: "out = silu(gate) * up from two [rows, F] tensors or one [rows, 2F] (--packed); bf16 \
            in/out, f32 inside",
    targets: plain_targets!(
        "plain, one 16-byte chunk per lane, 4 strips of a row per block",
        "plain, one 16-byte chunk per lane, 4 strips of a row per block"
    ),
    build_default: || swiglu::build(&swiglu::SwigluConfig::new(1000, false, 32)),
    build_gpu: |gpu| swiglu::build(&swiglu::SwigluConfig::for_gpu(gpu, SWIGLU_F, false)),
    variants: SWIGLU_VARIANTS,
    build_variant: |gpu, _| swiglu::build(&swiglu::SwigluConfig::for_gpu(gpu, SWIGLU_F, true)),
    parse: swiglu::problem::parse,
};

const SWIGLU_BWD: KernelEntry = KernelEntry {
    name: "swiglu_bwd",
    about:
        "swiglu's backward: dgate = dy * up * silu'(gate), dup = dy * silu(gate), split or packed",
    targets: plain_targets!(
        "plain, one 16-byte chunk per lane, 4 strips of a row per block",
        "plain, one 16-byte chunk per lane, 4 strips of a row per block"
    ),
    build_default: || swiglu::build_bwd(&swiglu::SwigluConfig::new(1000, false, 32)),
    build_gpu: |gpu| swiglu::build_bwd(&swiglu::SwigluConfig::for_gpu(gpu, SWIGLU_F, false)),
    variants: SWIGLU_VARIANTS,
    build_variant: |gpu, _| swiglu::build_bwd(&swiglu::SwigluConfig::for_gpu(gpu, SWIGLU_F, true)),
    parse: swiglu::problem::parse_bwd,
};

const CROSS_ENTROPY: KernelEntry = KernelEntry {
    name: "cross_entropy",
    about:
        "loss = logsumexp(x) - x[label] per row (label smoothing option, negative label: ignored) \
            and its gradient scale * (softmax(x) - onehot) written over the logits (bf16 or f32): \
            the row-wise half of the fused linear + cross-entropy",
    targets: plain_targets!(
        "plain, one row per block, interleaved strips of 2 chunks per lane, two passes",
        "plain, one row per block, interleaved strips of 2 chunks per lane, two passes"
    ),
    build_default: || cross_entropy::build(&cross_entropy::CrossEntropyConfig::new(false, 0.0, 32)),
    build_gpu: |gpu| {
        cross_entropy::build(&cross_entropy::CrossEntropyConfig::for_gpu(gpu, false, 0.0))
    },
    variants: &[Variant {
        name: "f32",
        about: "float32 logits and gradient",
        targets: GPU_TARGETS,
    }],
    build_variant: |gpu, _| {
        cross_entropy::build(&cross_entropy::CrossEntropyConfig::for_gpu(gpu, true, 0.0))
    },
    parse: cross_entropy::problem::parse,
};

/// Every kernel of the suite, in the order `kittens list` prints them.
pub static ALL: [KernelEntry; 16] = [
    GEMM_BF16,
    GEMM_FP8,
    ATTN_FWD,
    ATTN_BWD,
    LAYERNORM,
    LAYERNORM_BWD,
    ROTARY,
    RMSNORM,
    RMSNORM_BWD,
    SWIGLU,
    SWIGLU_BWD,
    ROTARY_BWD,
    CROSS_ENTROPY,
    ATTN_VARLEN,
    ATTN_VARLEN_BWD,
    ATTN_PAGED,
];

/// The registered names, in registry order.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|e| e.name).collect()
}

/// The kernel of this name; the error lists every registered name.
pub fn by_name(name: &str) -> Result<&'static KernelEntry, KernelError> {
    ALL.iter()
        .find(|e| e.name == name)
        .ok_or_else(|| KernelError::Unknown(name.to_string()))
}

#[cfg(test)]
mod tests;
