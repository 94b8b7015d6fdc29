//! Register tiles.

use crate::{BaseShape, DType, Layout, TileError};
use serde::{Deserialize, Serialize};

/// Which register file a pinned tile lives in (HipKittens §3.2.1: AGPRs may feed MFMAs directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegFile {
    Vgpr,
    Agpr,
}

impl RegFile {
    pub fn name(self) -> &'static str {
        match self {
            RegFile::Vgpr => "vgpr",
            RegFile::Agpr => "agpr",
        }
    }
}

/// Explicit registers for a tile: the contiguous range `first..=last` of one register file, split in
/// order among the tile's base tiles (HipKittens' `split_many_t<type_list<range<24, 39>>, 4>`, HipKittens D.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegPin {
    pub file: RegFile,
    pub first: u32,
    pub last: u32,
}

/// A register tile distributed over the lanes of one wave (AMD, 64 lanes) or warp (NVIDIA, 32 lanes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegTile {
    pub dtype: DType,
    pub rows: u32,
    pub cols: u32,
    pub layout: Layout,
    pub base: BaseShape,
    pub pin: Option<RegPin>,
}

impl RegTile {
    /// A compiler-allocated register tile; rows and cols must be multiples of the base shape.
    pub fn new(
        dtype: DType,
        rows: u32,
        cols: u32,
        layout: Layout,
        base: BaseShape,
    ) -> Result<Self, TileError> {
        crate::shared::check_size(dtype, rows, cols)?;
        if !rows.is_multiple_of(base.rows) || !cols.is_multiple_of(base.cols) {
            return Err(TileError::NotMultipleOfBase {
                rows,
                cols,
                base_rows: base.rows,
                base_cols: base.cols,
            });
        }
        Ok(RegTile {
            dtype,
            rows,
            cols,
            layout,
            base,
            pin: None,
        })
    }

    /// Pin the tile to registers `first..=last` of `file`; the range must hold exactly the tile.
    pub fn pinned(
        mut self,
        file: RegFile,
        first: u32,
        last: u32,
        lanes: u32,
    ) -> Result<Self, TileError> {
        let need = self.regs_per_lane(lanes);
        let have = last.saturating_sub(first) + 1;
        if last < first || have != need {
            return Err(TileError::PinSize {
                file: file.name(),
                first,
                last,
                have,
                need,
            });
        }
        self.pin = Some(RegPin { file, first, last });
        Ok(self)
    }

    /// Number of base tiles along rows and columns.
    pub fn base_grid(&self) -> (u32, u32) {
        (self.rows / self.base.rows, self.cols / self.base.cols)
    }

    /// Elements each lane holds when the tile is spread over `lanes` lanes.
    pub fn elems_per_lane(&self, lanes: u32) -> u32 {
        (self.rows * self.cols).div_ceil(lanes)
    }

    /// 32-bit registers each lane needs (packed: two bf16 per register, four fp8).
    pub fn regs_per_lane(&self, lanes: u32) -> u32 {
        (self.elems_per_lane(lanes) * self.dtype.bytes()).div_ceil(4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_must_be_multiple_of_base() {
        assert!(RegTile::new(DType::Bf16, 16, 128, Layout::Row, BaseShape::S16X32).is_ok());
        let e = RegTile::new(DType::Bf16, 24, 32, Layout::Row, BaseShape::S16X32).unwrap_err();
        assert!(matches!(e, TileError::NotMultipleOfBase { rows: 24, .. }));
    }

    /// HipKittens D.3: a 16×128 bf16 tile on 64 lanes is 4 base tiles of 4 registers, v[24:39].
    #[test]
    fn pinning_checks_register_count() {
        let t = RegTile::new(DType::Bf16, 16, 128, Layout::Row, BaseShape::S16X32).unwrap();
        assert_eq!(t.regs_per_lane(64), 16);
        assert!(t.pinned(RegFile::Vgpr, 24, 39, 64).is_ok());
        assert!(t.pinned(RegFile::Vgpr, 24, 35, 64).is_err());
    }
}
