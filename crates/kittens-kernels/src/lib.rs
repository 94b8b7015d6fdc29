//! The kernels, written once in the tile language (`kittens_ir::KernelBuilder`) and lowered per target.
//!
//! Each kernel module has a config and `build(&Config) -> Result<Kernel, KernelError>` that every
//! backend uses; [`reference`] holds the f64 references; [`cpu`] runs a kernel on the interpreter on
//! random inputs and reports its error; [`exec`] runs one on the caller's inputs and returns its output;
//! [`by_name`] is the registry the CLI reads.

pub mod attn_fwd;
pub mod budget;
pub mod cpu;
pub mod exec;
pub mod gemm_bf16;
pub mod gemm_bf16_i4;
pub mod gemm_bf16_ws;
pub mod reference;

use kittens_ir::Kernel;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    #[error("invalid kernel configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Build(#[from] kittens_ir::BuildError),
    #[error(transparent)]
    Interp(#[from] kittens_ir::interp::InterpError),
    #[error("unknown kernel `{0}`; known: gemm_bf16, attn_fwd")]
    Unknown(String),
    #[error("invalid problem: {0}")]
    Problem(String),
    /// A size over the CPU run's budget (`budget`), or one whose count overflows 64 bits.
    #[error("{what}: {need}, over the CPU run's limit of {limit}")]
    OverBudget {
        what: String,
        need: String,
        limit: String,
    },
}

/// Kernels the registry knows.
pub const NAMES: [&str; 2] = ["gemm_bf16", "attn_fwd"];

/// A registered kernel: its name, a one-line description, its default build and its build for one GPU
/// (the per-target configuration, e.g. gemm_bf16's LDS or register staging: `GemmConfig::for_gpu`).
pub struct KernelInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub build_default: fn() -> Result<Kernel, KernelError>,
    pub build_for: fn(&kittens_hw::Gpu) -> Result<Kernel, KernelError>,
}

/// The registry: `gemm_bf16` (seed 000 E.1 defaults), `attn_fwd` (seed 000 E.3 defaults, non-causal).
pub fn by_name(name: &str) -> Option<KernelInfo> {
    match name {
        "gemm_bf16" => Some(KernelInfo {
            name: "gemm_bf16",
            about: "C = A·Bᵀ, bf16 in/out, fp32 accumulation, 8-wave ping-pong (seed 000 E.1)",
            build_default: || gemm_bf16::build(&gemm_bf16::GemmConfig::default()),
            build_for: |gpu| gemm_bf16::build(&gemm_bf16::GemmConfig::for_gpu(gpu)),
        }),
        "attn_fwd" => Some(KernelInfo {
            name: "attn_fwd",
            about:
                "attention forward, online softmax, GQA, causal option, BSHD/BHSD (seed 000 E.3)",
            build_default: || attn_fwd::build(&attn_fwd::AttnConfig::default()),
            // The default tiles fit both CDNA targets (tests/schedules.rs `attention_fits_cdna`).
            build_for: |_| attn_fwd::build(&attn_fwd::AttnConfig::default()),
        }),
        _ => None,
    }
}
