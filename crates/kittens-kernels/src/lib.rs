//! The kernels, written once in the tile language (`kittens_ir::KernelBuilder`) and lowered per target.
//!
//! Each kernel module has a config and `build(&Config) -> Result<Kernel, KernelError>` that every
//! backend uses, and a `problem` submodule saying how it runs at a problem's sizes ([`problem`]: its
//! launch, budget, reference and tolerance); [`reference`] holds the f64 references and the check rule;
//! [`exec`] runs a kernel on the interpreter on the caller's inputs; [`registry`] lists every kernel with
//! its targets and problem definition, and is how the CLI, the runtime and the tests reach them. The
//! runner that executes a problem on random inputs on a backend is `kittens_runtime::runner`.

pub mod attn;
pub mod attn_bwd;
pub mod attn_fwd;
pub mod attn_paged;
pub mod attn_paged_hopper;
pub mod attn_paged_problem;
pub mod attn_varlen;
pub mod attn_varlen_bwd;
pub mod attn_varlen_bwd_hopper;
pub mod attn_varlen_bwd_problem;
pub mod attn_varlen_hopper;
pub mod attn_varlen_problem;
pub mod budget;
pub mod cross_entropy;
pub mod exec;
pub mod exec_varlen;
pub mod gemm;
pub mod layernorm;
pub mod problem;
pub mod reference;
pub mod reference_bwd;
pub mod reference_fwd;
pub mod reference_varlen;
pub mod registry;
pub mod rmsnorm;
pub mod rotary;
pub mod rows;
pub mod swiglu;

pub use registry::by_name;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    #[error("invalid kernel configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Build(#[from] kittens_ir::BuildError),
    #[error(transparent)]
    Interp(#[from] kittens_ir::interp::InterpError),
    #[error("unknown kernel `{0}`; known: {known}", known = registry::names().join(", "))]
    Unknown(String),
    #[error("invalid problem: {0}")]
    Problem(String),
    /// A size over a run's budget (`budget`), or one whose count overflows 64 bits.
    #[error("{what}: {need}, over the run's limit of {limit}")]
    OverBudget {
        what: String,
        need: String,
        limit: String,
    },
    #[error("`{kernel}` does not lower to {target} yet: {why}")]
    NotForTarget {
        kernel: &'static str,
        target: kittens_hw::Target,
        why: String,
    },
}
