//! What every backend's lowering returns: the source and everything a host needs to compile and
//! launch it, in one shape for HIP and CUDA ([`Lowered`]), with the tensor maps a CUDA launch passes
//! ([`TmaMap`]). The backends build it; `crate::backend::lower` picks the backend. It imports none of
//! them.

use kittens_hw::Target;
use kittens_ir::Kernel;
use serde::Serialize;

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

/// A tensor map the host builds for one global tensor: boxes of `box_rows × box_cols` elements (rows
/// along dimension `row_dim`, columns along `col_dim`, one element along every other dimension) with
/// the given shared-memory swizzle (bytes: 128, 64, 32 or 0). The map's dimensions, innermost first,
/// are [`TmaMap::dim_order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TmaMap {
    pub global: u32,
    pub box_rows: u32,
    pub box_cols: u32,
    pub swizzle_bytes: u32,
    pub row_dim: u8,
    pub col_dim: u8,
}

impl TmaMap {
    /// The tensor's dimensions in the map's order, innermost first: the column dimension (unit
    /// stride), the row dimension, then the others in declaration order. A `[b, h, s, d]` attention
    /// tensor viewed as rows of `s` and columns of `d` is the map `(d, s, b, h)`.
    pub fn dim_order(dims: usize, row_dim: u8, col_dim: u8) -> Vec<usize> {
        let (r, c) = (row_dim as usize, col_dim as usize);
        let mut v = vec![c, r];
        v.extend((0..dims).filter(|&i| i != r && i != c));
        v
    }
}
