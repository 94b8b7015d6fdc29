//! What every backend's lowering returns: the source and everything a host needs to compile and
//! launch it, in one shape for HIP and CUDA ([`Lowered`]), reached through one function ([`lower`]).

use kittens_hw::{Language, Target};
use kittens_ir::Kernel;
use serde::Serialize;

use crate::cuda::{CudaLowerError, TmaMap};
use crate::hip;

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

/// How many blocks a launch has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GridRule {
    /// One block per tile of the tile program's grid (`∏ grid.extents`); the kernel remaps the launch
    /// id to its tile (HIP).
    PerTile,
    /// A persistent grid: at most as many blocks as fit on the GPU at once, each looping over tiles
    /// `blockIdx.x`, `+ gridDim.x`, … (CUDA).
    Persistent,
}

/// Where the kernel's shared memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SharedAlloc {
    /// Declared in the kernel (`__shared__` arrays): the launch asks for none.
    Static,
    /// `extern __shared__`: the launch passes the size.
    Dynamic,
}

/// One kernel argument, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum KernelArg {
    /// A `CUtensorMap` passed by value (`__grid_constant__`) for one global tensor.
    TensorMap(TmaMap),
    /// A pointer to the global tensor of this name (the tile program's declaration order).
    Global { name: String },
    /// A 32-bit integer parameter of this name.
    Param { name: String },
}

/// A kernel lowered for one target: its source and its launch contract.
#[derive(Debug, Clone)]
pub struct Lowered {
    pub target: Target,
    /// One self-contained translation unit (prelude included).
    pub source: String,
    /// The `extern "C"` name of the kernel in [`Lowered::source`].
    pub entry: String,
    /// Threads per block.
    pub threads: u32,
    /// Shared memory per block, bytes (for [`SharedAlloc::Dynamic`], what the launch must pass).
    pub shared_bytes: u32,
    pub shared_alloc: SharedAlloc,
    pub grid: GridRule,
    /// Blocks per thread-block cluster (1: none): the launch asks for clusters of this many along x,
    /// and a persistent grid is a whole number of them (`kittens_ir::Grid::cluster`).
    pub cluster: u32,
    pub args: Vec<KernelArg>,
    /// The kernel waits for the grid before it on the stream (`griddepcontrol.wait`, PTX ISA
    /// §9.7.13.9) before touching global memory, so it may be launched as that grid's programmatic
    /// dependent (its launch and setup overlapping the previous kernel's end).
    pub waits_for_previous_grid: bool,
    /// The tile program it came from (grid extents, parameter order).
    pub ir: Kernel,
}

impl Lowered {
    /// Dynamic shared memory the launch passes.
    pub fn dynamic_shared_bytes(&self) -> u32 {
        match self.shared_alloc {
            SharedAlloc::Static => 0,
            SharedAlloc::Dynamic => self.shared_bytes,
        }
    }

    /// The tensor maps among the arguments, in argument order.
    pub fn tma_maps(&self) -> Vec<TmaMap> {
        self.args
            .iter()
            .filter_map(|a| match a {
                KernelArg::TensorMap(m) => Some(*m),
                _ => None,
            })
            .collect()
    }

    /// Tiles of the tile program's grid (`∏ grid.extents`) for parameter values given by name; `None`
    /// when one is missing or an extent cannot be evaluated.
    pub fn tiles(&self, params: &[(&str, i64)]) -> Option<u64> {
        self.ir.blocks(&self.param_values(params)?)
    }

    /// The tile program's parameters in declaration order from values given by name.
    fn param_values(&self, params: &[(&str, i64)]) -> Option<Vec<i64>> {
        self.ir
            .params
            .iter()
            .map(|p| params.iter().find(|(n, _)| *n == p.name).map(|&(_, v)| v))
            .collect()
    }

    /// Blocks to launch by the [`GridRule`]: every tile, or for a persistent grid at most `resident`
    /// blocks (the GPU's SMs) and never more than there are tiles; with clusters a whole number of
    /// clusters, at most as many as there are clusters of tiles.
    pub fn blocks(&self, params: &[(&str, i64)], resident: u32) -> Option<u32> {
        let tiles = self.tiles(params)?;
        match self.grid {
            GridRule::PerTile => u32::try_from(tiles).ok(),
            GridRule::Persistent if self.cluster > 1 => {
                let values = self.param_values(params)?;
                let clusters = self.ir.cluster_tiles(&values)?;
                let c = u64::from(self.cluster);
                let resident = (u64::from(resident) / c).max(1);
                Some((clusters.min(resident).max(1) * c) as u32)
            }
            GridRule::Persistent => Some(tiles.min(u64::from(resident.max(1))).max(1) as u32),
        }
    }
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
