//! Register layouts and base shapes.

use crate::TileError;
use serde::{Deserialize, Serialize};

/// Which dimension a lane's consecutive elements run along (HipKittens D.1): in a row layout each lane holds
/// consecutive elements of a row (the reduction dimension of an A operand); in a column layout, of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Row,
    Col,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Layout {
    type Err = TileError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "row" => Ok(Layout::Row),
            "col" | "column" => Ok(Layout::Col),
            _ => Err(TileError::Other(format!(
                "unknown layout `{s}`; use row or col"
            ))),
        }
    }
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Row => "row",
            Layout::Col => "col",
        }
    }

    pub fn transposed(self) -> Layout {
        match self {
            Layout::Row => Layout::Col,
            Layout::Col => Layout::Row,
        }
    }
}

/// The rows × cols one matrix-instruction operand covers; a register tile is a grid of these
/// (HipKittens' `rt_16x32_s` and friends, HipKittens §3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BaseShape {
    pub rows: u32,
    pub cols: u32,
}

impl BaseShape {
    pub const fn new(rows: u32, cols: u32) -> Self {
        BaseShape { rows, cols }
    }
    /// 1×1: no matrix instruction — the base of a *strip* tile, the register tile of a memory-bound
    /// kernel (a layernorm row, a rotary head): each row is dealt to the lanes of a wave in contiguous
    /// chunks (16 bytes of the tile's storage where the width allows), so loads and stores are
    /// full-width vector accesses and a row reduction is a lane-local sum and a butterfly.
    pub const STRIP: BaseShape = BaseShape::new(1, 1);
    /// 16×16: A/B of the bf16 16×16×16 MFMA (CDNA3) and every 16×16 accumulator.
    pub const S16X16: BaseShape = BaseShape::new(16, 16);
    /// 16×32: A/B of the bf16 16×16×32 MFMA (CDNA4) — HipKittens' default on CDNA4.
    pub const S16X32: BaseShape = BaseShape::new(16, 32);
    /// 32×16: A/B of the bf16 32×32×16 MFMA (CDNA4) seen with K along columns.
    pub const S32X16: BaseShape = BaseShape::new(32, 16);
    /// 32×8 / 32×32: the 32×32×8 MFMA's operand and accumulator.
    pub const S32X8: BaseShape = BaseShape::new(32, 8);
    pub const S32X32: BaseShape = BaseShape::new(32, 32);
}

impl std::fmt::Display for BaseShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}
