//! One entry for every target ([`lower`]): the target's budgets first ([`check_budgets`]), then the
//! backend's lowering (HIP for gfx942 / gfx950, CUDA for sm_90a), each returning a [`Lowered`], and
//! one error type over both ([`LowerError`]).

use kittens_hw::{Language, Target};
use kittens_ir::Kernel;

use crate::cuda::CudaLowerError;
use crate::hip;
use crate::lowered::Lowered;

/// Why a kernel could not be lowered for a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    #[error(transparent)]
    Hip(#[from] hip::LowerError),
    #[error(transparent)]
    Cuda(#[from] CudaLowerError),
    /// The target has no source form (the CPU runs the tile IR on the interpreter).
    #[error("{0} has no generated source: the interpreter runs the tile program itself")]
    NoSource(Target),
    /// The register estimate (`kittens_ir::validate::reg_peak`) is over the target's per-wave budget:
    /// the compiler would spill. Names the estimate, the budget and the registers live at the peak.
    #[error(
        "register budget on {target} ({gpu}): about {estimate} 32-bit registers per lane per wave \
         (the live registers at op #{peak_op} + 16 for addresses and counters), but {gpu} gives each of \
         the block's {waves} waves {budget}; the compiler would spill. Costliest at the peak: {costliest}. \
         Make those tiles smaller, or spread a row over more waves"
    )]
    RegBudget {
        target: Target,
        gpu: &'static str,
        estimate: u32,
        budget: u32,
        waves: u32,
        peak_op: usize,
        costliest: String,
    },
    /// The kernel's shared memory is over the target's per-block budget.
    #[error(
        "shared-memory budget on {target} ({gpu}): the kernel allocates {need} bytes per block, {gpu} \
         allows {have}. Largest buffers: {largest}"
    )]
    SharedBudget {
        target: Target,
        gpu: &'static str,
        need: u32,
        have: u32,
        largest: String,
    },
    /// Another target rule of `kittens_ir::validate::check_target` (block size, pinned registers,
    /// shared `mma` operands on AMD).
    #[error("{target}: {why}")]
    TargetRule { target: Target, why: String },
}

/// The target's budgets (`kittens_ir::validate::check_target` on `target.gpu()`, the most constrained
/// model of the target), checked by [`lower`] before any source is written.
pub fn check_budgets(k: &Kernel, target: Target) -> Result<kittens_ir::TargetReport, LowerError> {
    use kittens_ir::BuildError;
    let Some(gpu) = target.gpu() else {
        return Err(LowerError::NoSource(target));
    };
    kittens_ir::check_target(k, gpu).map_err(|e| match e {
        BuildError::RegBudget {
            need, have, waves, ..
        } => {
            let peak = kittens_ir::validate::reg_peak(k, gpu.wave_width);
            LowerError::RegBudget {
                target,
                gpu: gpu.name,
                estimate: need,
                budget: have,
                waves,
                peak_op: peak.op.unwrap_or(0),
                costliest: peak.costliest(4),
            }
        }
        BuildError::SharedBudget { need, have, .. } => {
            let mut bufs: Vec<(&str, u32)> = k
                .shared
                .iter()
                .map(|s| (s.name.as_str(), s.bytes()))
                .collect();
            bufs.sort_by_key(|b| std::cmp::Reverse(b.1));
            let largest = bufs
                .iter()
                .take(4)
                .map(|(n, b)| format!("`{n}` ({b} B)"))
                .collect::<Vec<_>>()
                .join(", ");
            LowerError::SharedBudget {
                target,
                gpu: gpu.name,
                need,
                have,
                largest,
            }
        }
        other => LowerError::TargetRule {
            target,
            why: other.to_string(),
        },
    })
}

/// Lower `k` for `target`: HIP for gfx942 / gfx950, CUDA for sm_90a.
///
/// The target's budgets are checked first ([`check_budgets`]): a kernel whose register estimate or
/// shared memory is over the target's is refused with the estimate, the budget and what costs most,
/// before a compiler spills it.
pub fn lower(k: &Kernel, target: Target) -> Result<Lowered, LowerError> {
    if target.gpu().is_some() {
        check_budgets(k, target)?;
    }
    match (target.language(), target.arch()) {
        (Language::Hip, Some(arch)) => Ok(hip::lower(k, arch)?),
        (Language::Cuda, _) => Ok(crate::cuda::lower(k)?),
        _ => Err(LowerError::NoSource(target)),
    }
}
