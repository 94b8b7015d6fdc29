//! What a kernel declares — ids, parameters, global tensors, shared rings, register tiles and vectors,
//! loop variables — and the views (windows of a global tensor or a shared ring) that ops address.

use crate::expr::Expr;
use kittens_hw::dtype::DType;
use kittens_tile::{BaseShape, Layout, RegTile, SharedTile};
use serde::{Deserialize, Serialize};

use super::GlobalId;

/// A shared-memory buffer (ring of `count` tiles), by position in [`Kernel::shared`](super::Kernel::shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SharedId(pub u32);
/// A register tile or vector (per wave), by position in [`Kernel::regs`](super::Kernel::regs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegId(pub u32);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamDecl {
    pub name: String,
    /// A 32-bit data word (a seed or counter word: any value in `0..2^32`, 0 included) rather than a
    /// problem size (at least 1); [`crate::KernelBuilder::param_word`] declares one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub word: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// A global tensor: a logical N-d shape with strides in elements, so BSHD and BHSD attention layouts
/// are the same logical `[B, H, S, D]` tensor with different strides (no copies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GlobalDecl {
    pub name: String,
    pub dtype: DType,
    /// Logical dimension names (e.g. `["b", "h", "s", "d"]`), for messages and generated code.
    pub dim_names: Vec<String>,
    pub dims: Vec<Expr>,
    /// Stride of each logical dimension, in elements.
    pub strides: Vec<Expr>,
    pub access: Access,
    /// How a target with a choice fills shared ring slots from this tensor (`load_async`); the
    /// interpreter and the AMD lowerings ignore it: the values loaded are the same either way.
    pub slot_fill: SlotFill,
    /// Where this tensor ends for the block reading it ([`Clip`]): a packed batch's sequence end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip: Option<Clip>,
}

/// A per-block end of one dimension of a global: every access treats coordinates of `dim` at or past
/// `end` (an expression of the block's coordinates, typically an [`Expr::Elem`] of `cu_seqlens`) as
/// outside the tensor — reads give zero, stores and atomic adds are dropped — exactly as past the
/// tensor's edge. It is what keeps a block of a packed (varlen) batch from reading the next sequence's
/// rows into its softmax and from writing over them: the next sequence lives right there, where TMA's
/// clipping at the tensor's edge does not help.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Clip {
    pub dim: u8,
    pub end: Expr,
}

/// How the sm_90a lowering fills a shared ring slot from a global tensor. Both write the same
/// swizzled slot and read past-the-end elements as zero; they differ in what reads global memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotFill {
    /// One thread hands the whole box to the Tensor Memory Accelerator (a `CUtensorMap` argument).
    /// Rows that start off 128-byte lines make each 128-byte box row straddle two lines, which TMA
    /// reads slowly (H100: 3000³ at 0.42 of cuBLAS against 0.82 at 3008³, docs/performance.md).
    #[default]
    Tma,
    /// The producer warpgroup's 128 threads copy the slot in 16-byte `cp.async` pieces (PTX ISA
    /// §9.7.9.25.3) from a plain pointer and the tensor's row stride, with no alignment beyond 16
    /// bytes asked of the rows; the slot's `full` barrier counts the 128 threads' arrivals.
    CpAsync,
}

/// `count` shared tiles of one shape (a double buffer is `count: 2`), addressed by a run-time index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedDecl {
    pub name: String,
    pub tile: SharedTile,
    pub count: u32,
}

impl SharedDecl {
    pub fn bytes(&self) -> u32 {
        self.tile.bytes() * self.count
    }
}

/// Which tile axis a register vector is indexed by: `Rows` holds one value per row (what `row_max`
/// produces and `sub_row` broadcasts), `Cols` one value per column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    Rows,
    Cols,
}

/// A register vector, distributed over a wave's lanes like the rows (or columns) of a tile with the given
/// layout and base shape — the lowering needs those to know which lanes hold which entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegVec {
    pub dtype: DType,
    pub len: u32,
    pub axis: Axis,
    pub layout: Layout,
    pub base: BaseShape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegKind {
    Tile(RegTile),
    Vec(RegVec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegDecl {
    pub name: String,
    pub kind: RegKind,
}

impl RegDecl {
    pub fn dtype(&self) -> DType {
        match self.kind {
            RegKind::Tile(t) => t.dtype,
            RegKind::Vec(v) => v.dtype,
        }
    }
    /// Logical (rows, cols); a vector is `len × 1`.
    pub fn shape(&self) -> (u32, u32) {
        match self.kind {
            RegKind::Tile(t) => (t.rows, t.cols),
            RegKind::Vec(v) => (v.len, 1),
        }
    }
    pub fn tile(&self) -> Option<&RegTile> {
        match &self.kind {
            RegKind::Tile(t) => Some(t),
            RegKind::Vec(_) => None,
        }
    }
    pub fn vec(&self) -> Option<&RegVec> {
        match &self.kind {
            RegKind::Vec(v) => Some(v),
            RegKind::Tile(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarDecl {
    pub name: String,
}

/// A `rows × cols` window of a global tensor: element `(i, j)` is
/// `tensor[origin + i·e(row_dim) + j·e(col_dim)]` where `origin` has one coordinate per dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GlobalView {
    pub tensor: GlobalId,
    pub origin: Vec<Expr>,
    pub row_dim: u8,
    pub col_dim: u8,
    pub rows: u32,
    pub cols: u32,
}

/// A `rows × cols` sub-tile of buffer `index` of a shared ring, starting at element `(row0, col0)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedView {
    pub buf: SharedId,
    pub index: Expr,
    pub row0: Expr,
    pub col0: Expr,
    pub rows: u32,
    pub cols: u32,
}
