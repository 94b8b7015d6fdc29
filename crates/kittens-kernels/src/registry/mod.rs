//! The kernel registry: every kernel of the suite, the targets it lowers to and, for each, the schedule
//! it is built with there and how far it has got, and its problem definition (how it runs at a
//! problem's sizes: `crate::problem::KernelProblem`). The CLI, the runtime and the tests reach kernels
//! through it (`registry::by_name(name)?.build_for(target)`, `.problem(&args)`); error messages and
//! `kittens list` are generated from it.

use crate::problem::{KernelProblem, NamedArgs};
mod paged;
mod varlen;
use crate::{
    attn_bwd, attn_fwd, attn_varlen_problem, cross_entropy, gemm, layernorm, rmsnorm, rotary,
    swiglu, KernelError,
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
    /// Lowers, compiles and was measured on the device; `evidence` is the docs section with the
    /// figures (`docs/performance.md#...`), which cites its results folder.
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
    /// The named arguments the registry's builds give its problem beyond the problem's defaults
    /// ([`Self::build_for`]: the configuration `kittens compile` and `check` report).
    #[serde(skip)]
    pub sizes: BuildSizes,
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

    /// The named arguments of the registry's build for `target` in variant `variant`: the entry's
    /// [`BuildSizes`] and the variant's name.
    fn build_args(&self, target: Target, variant: Option<&str>) -> NamedArgs {
        let sizes = match target {
            Target::Cpu => self.sizes.cpu,
            _ => self.sizes.gpu,
        };
        let mut a = NamedArgs::new();
        for &(name, v) in sizes {
            a.set(name, v);
        }
        if let Some(v) = variant {
            a.set("variant", v);
        }
        a
    }

    /// The one way the registry builds a kernel: its problem at [`Self::build_args`], built for
    /// `target` ([`KernelProblem::build`]), whether or not the registry's plan lowers it yet.
    fn build_problem(&self, target: Target, variant: Option<&str>) -> Result<Kernel, KernelError> {
        self.problem(&self.build_args(target, variant))?
            .build(target)
    }

    /// The kernel as built for `target`: its problem at the registry's sizes ([`BuildSizes`]) built
    /// for the target (the CPU's tiles, the target GPU's configuration elsewhere). A target the
    /// kernel does not lower to yet is an error that says why.
    pub fn build_for(&self, target: Target) -> Result<Kernel, KernelError> {
        let not_yet = |why: &str| KernelError::NotForTarget {
            kernel: self.name,
            target,
            why: why.to_string(),
        };
        match self.plan(target).map(|p| p.status) {
            None => Err(not_yet("the registry lists no plan for this target")),
            Some(Status::NotYet { why }) => Err(not_yet(why)),
            Some(_) => self.build_problem(target, None),
        }
    }

    /// The kernel as built for `target` in its variant `name` (`None`: [`Self::build_for`]): its
    /// problem with the run setting `variant`. A name the kernel does not have, or a target the
    /// variant does not list, is an error naming the valid ones.
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
        if v.targets.contains(&target) {
            // The target's plan must be available too (a target not yet lowered stays refused).
            self.build_for(target)?;
            return self.build_problem(target, Some(name));
        }
        Err(KernelError::NotForTarget {
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
        })
    }

    /// The kernel configured for one GPU model, whether or not its target lowers it yet (the schedule
    /// analysis and the planners read any model of the catalog): the build for the model's target
    /// (the catalog's models of one architecture share their configurations).
    pub fn build_for_gpu(&self, gpu: &Gpu) -> Result<Kernel, KernelError> {
        self.build_problem(Target::from(gpu.arch), None)
    }

    /// The default configuration, as the CPU interpreter runs it: the build for [`Target::Cpu`].
    pub fn build_default(&self) -> Result<Kernel, KernelError> {
        self.build_problem(Target::Cpu, None)
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

    /// Whether the kernel's problem takes the named argument `name` (its parser reads it when given
    /// `v` alone at the default sizes): how a caller (`kittens run`'s flags) learns what a kernel
    /// takes from the kernel itself, with no list of kernel names.
    pub fn reads(&self, name: &str, v: impl Into<crate::problem::ArgValue>) -> bool {
        let args = NamedArgs::new().with(name, v);
        let _ = self.problem(&args);
        args.unread().is_empty()
    }
}

/// The sizes the registry builds a kernel at, beyond its problem's defaults (named arguments of
/// [`KernelEntry::problem`]): the CPU's (the interpreter's) and every GPU target's. The GPU builds
/// take the paper's shapes where the configuration depends on one (attention at head dimension 128,
/// a norm's row at Llama's width); the row-wise kernels whose offsets narrow to 32 bits when the
/// rows allow ([`crate::rows::RowLoop::index32`]) are built at [`ANY_ROWS`], so that the registry's
/// kernel serves any row count.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildSizes {
    pub cpu: &'static [(&'static str, u64)],
    pub gpu: &'static [(&'static str, u64)],
}

/// Rows past 32-bit offsets at every registered row length (`kittens_ir::INDEX32_MAX_SPAN` is
/// 2^30 elements; the shortest row built is the CPU's 1000).
pub const ANY_ROWS: u64 = 1 << 21;

/// The problem's defaults on every target.
pub const DEFAULT_SIZES: BuildSizes = BuildSizes { cpu: &[], gpu: &[] };

/// Head dimension 128 on every target (the attention kernels' paper shape).
const HEAD_DIM_128: BuildSizes = BuildSizes {
    cpu: &[("dim", 128)],
    gpu: &[("dim", 128)],
};

/// The GEMMs' GPU builds: a square problem large enough that every target takes its GPU's own
/// block (`gemm::GemmConfig::for_gpu`; smaller ones may take a smaller block per shape).
const GEMM_GPU_SIZES: &[(&str, u64)] = &[("m", 8192), ("n", 8192), ("k", 8192)];

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
                evidence: "docs/performance.md#gemm_bf16-sm_90a",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong (`kittens run --schedule` picks any of the three)",
            status: Status::Interpreted,
        },
    ],
    variants: GEMM_VARIANTS,
    sizes: BuildSizes {
        cpu: &[],
        gpu: GEMM_GPU_SIZES,
    },
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
                evidence: "docs/performance.md#gemm_fp8-sm_90a",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong, e4m3 (OCP), K step 128 (`kittens run --schedule` picks any of the three)",
            status: Status::Interpreted,
        },
    ],
    variants: GEMM_VARIANTS,
    sizes: BuildSizes {
        cpu: &[],
        gpu: GEMM_GPU_SIZES,
    },
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
                evidence: "docs/performance.md#attn_fwd-sm_90a",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "8-wave ping-pong",
            status: Status::Interpreted,
        },
    ],
    variants: ATTN_FWD_VARIANTS,
    // The default tiles fit both CDNA targets (tests/schedules.rs `attention_fits_cdna`); Hopper gets
    // the producer/consumer program.
    sizes: BuildSizes {
        cpu: &[("dim", 128), ("q_rows", 32), ("kv_block", 32)],
        gpu: &[("dim", 128)],
    },
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
            status: Status::Compiles,
        },
        TargetPlan {
            target: Target::Gfx950,
            schedule: "plain",
            status: Status::Compiles,
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
    sizes: DEFAULT_SIZES,
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
                evidence: "docs/performance.md#attn_bwd-sm_90a",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, 4 waves, key and query blocks",
            status: Status::Interpreted,
        },
    ],
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
    sizes: HEAD_DIM_128,
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
                evidence: "docs/performance.md#layernorm-and-rotary-sm_90a",
            },
        },
        TargetPlan {
            target: Target::Cpu,
            schedule: "plain, one 16-byte chunk per lane: rows split over waves",
            status: Status::Interpreted,
        },
    ],
    variants: &[],
    sizes: BuildSizes {
        cpu: &[],
        gpu: &[("norm_dim", 2048)],
    },
    parse: layernorm::problem::parse,
};

/// The rotary kernels' plans (the forward and its backward are one program, `RotaryConfig::inverse`):
/// heads of one position per wave or warp, the table row broadcast; `sm90a` is the status there.
const fn rotary_plans(sm90a: Status) -> [TargetPlan; 4] {
    const WAVE: &str = "plain, heads of one position per wave (the table row broadcast)";
    const fn plan(target: Target, schedule: &'static str, status: Status) -> TargetPlan {
        TargetPlan {
            target,
            schedule,
            status,
        }
    }
    [
        plan(Target::Gfx942, WAVE, Status::Compiles),
        plan(Target::Gfx950, WAVE, Status::Compiles),
        plan(
            Target::Sm90a,
            "plain, heads of one position per warp (the table row broadcast)",
            sm90a,
        ),
        plan(Target::Cpu, WAVE, Status::Interpreted),
    ]
}

const ROTARY_PLANS: [TargetPlan; 4] = rotary_plans(Status::Measured {
    evidence: "docs/performance.md#layernorm-and-rotary-sm_90a",
});
/// The rotary kernels' GPU builds at head dimension 128 (the CPU's: the problem's 64).
const ROTARY_SIZES: BuildSizes = BuildSizes {
    cpu: &[],
    gpu: &[("dim", 128)],
};
const ROTARY_BWD_PLANS: [TargetPlan; 4] = rotary_plans(Status::Compiles);

const ROTARY: KernelEntry = KernelEntry {
    name: "rotary",
    about:
        "rotary position embedding on q or k, BSHD/BHSD, half rotation (GPT-NeoX) or interleaved \
            (GPT-J), cos/sin tables given (HipKittens Fig. 9)",
    targets: &ROTARY_PLANS,
    variants: &[],
    sizes: ROTARY_SIZES,
    parse: rotary::problem::parse,
};

const ROTARY_BWD: KernelEntry = KernelEntry {
    name: "rotary_bwd",
    about: "rotary's backward: dx = dy rotated by -theta (rotary with the sine negated), same \
            layouts and forms",
    targets: &ROTARY_BWD_PLANS,
    variants: &[],
    sizes: ROTARY_SIZES,
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
const NORM_DIM: u64 = 4096;
/// Width F of SwiGLU's GPU builds (Llama-3-8B's intermediate size).
const SWIGLU_SIZES: BuildSizes = BuildSizes {
    cpu: &[],
    gpu: &[("norm_dim", 14336)],
};
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
    variants: &[],
    sizes: BuildSizes {
        cpu: &[],
        gpu: &[("norm_dim", NORM_DIM)],
    },
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
    variants: &[Variant {
        name: "dweight",
        about: "the backward's second launch: dweight from the first launch's partial sums",
        targets: GPU_TARGETS,
    }],
    sizes: BuildSizes {
        cpu: &[("rows", ANY_ROWS)],
        gpu: &[("rows", ANY_ROWS), ("norm_dim", NORM_DIM)],
    },
    parse: rmsnorm::problem::parse_bwd,
};

const LAYERNORM_BWD: KernelEntry = KernelEntry {
    name: "layernorm_bwd",
    about: "layernorm's backward: dx, dresidual from dy, dh, x, residual, weight, the dropout mask \
            drawn again and the statistics recomputed; dweight and dbias summed over rows in a \
            second launch from per-wave f32 partials; with from_h=true the forward's h in place of \
            x and residual, and without dropout dresidual alone (it is dx)",
    targets: plain_targets!(
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch",
        "plain, rows split over waves, one 16-wave block per SM or CU (more when smaller) looping over the rows; then the dweight launch (variant `dweight`)"
    ),
    variants: &[Variant {
        name: "dweight",
        about: "the backward's second launch: dweight and dbias from the first launch's partial sums",
        targets: GPU_TARGETS,
    }],
    sizes: BuildSizes {
        cpu: &[("rows", ANY_ROWS)],
        gpu: &[("rows", ANY_ROWS), ("norm_dim", NORM_DIM)],
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
    variants: SWIGLU_VARIANTS,
    sizes: SWIGLU_SIZES,
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
    variants: SWIGLU_VARIANTS,
    sizes: SWIGLU_SIZES,
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
    variants: &[Variant {
        name: "f32",
        about: "float32 logits and gradient",
        targets: GPU_TARGETS,
    }],
    sizes: DEFAULT_SIZES,
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
