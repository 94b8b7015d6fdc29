//! Shared-memory tiles and the shared ↔ register shape rule.

use crate::swizzle::default_swizzle;
use crate::{DType, RegTile, Swizzle, TileError};
use serde::{Deserialize, Serialize};

/// Most bytes one shared or register tile may hold: 1 MiB, more than one block's shared memory or one
/// wave's registers on any GPU in the catalog, so every real tile fits while a tile's byte offsets
/// always fit in `u32` and walking its bytes (the swizzle check, the access patterns) stays cheap.
pub const MAX_TILE_BYTES: u32 = 1 << 20;

/// Refuse an empty tile, or one over [`MAX_TILE_BYTES`] (its size computed without wrapping).
pub(crate) fn check_size(dtype: DType, rows: u32, cols: u32) -> Result<(), TileError> {
    if rows == 0 || cols == 0 {
        return Err(TileError::Empty { rows, cols });
    }
    let bytes = rows as u128 * cols as u128 * dtype.bytes() as u128;
    if bytes > MAX_TILE_BYTES as u128 {
        return Err(TileError::TooLarge {
            rows,
            cols,
            elem_bytes: dtype.bytes(),
            bytes,
            limit: MAX_TILE_BYTES,
        });
    }
    Ok(())
}

/// A row-major tile in shared memory (LDS on AMD), stored through its swizzle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SharedTile {
    pub dtype: DType,
    pub rows: u32,
    pub cols: u32,
    pub swizzle: Swizzle,
}

impl SharedTile {
    /// A shared tile with the default swizzle of its shape ([`default_swizzle`], HipKittens D.1).
    pub fn new(dtype: DType, rows: u32, cols: u32) -> Result<Self, TileError> {
        check_size(dtype, rows, cols)?;
        Self::with_swizzle(dtype, rows, cols, default_swizzle(dtype, rows, cols))
    }

    /// A shared tile with an explicit swizzle, which must map every element of the tile inside the tile.
    pub fn with_swizzle(
        dtype: DType,
        rows: u32,
        cols: u32,
        swizzle: Swizzle,
    ) -> Result<Self, TileError> {
        check_size(dtype, rows, cols)?;
        let tile = SharedTile {
            dtype,
            rows,
            cols,
            swizzle,
        };
        let bytes = tile.bytes();
        if (0..bytes)
            .step_by(dtype.bytes() as usize)
            .any(|off| swizzle.apply(off) >= bytes)
        {
            return Err(TileError::SwizzleOutOfTile(swizzle.name(), bytes));
        }
        Ok(tile)
    }

    pub fn bytes(&self) -> u32 {
        self.rows * self.cols * self.dtype.bytes()
    }

    pub fn row_bytes(&self) -> u32 {
        self.cols * self.dtype.bytes()
    }

    /// Physical byte offset of element (row, col).
    pub fn offset(&self, row: u32, col: u32) -> u32 {
        self.swizzle
            .apply(row * self.row_bytes() + col * self.dtype.bytes())
    }
}

/// HipKittens D.1: loads and stores between a shared tile and a register tile are allowed only when one
/// shape is a multiple of the other (a 16×16 shared tile may fill a 32×16 register tile; a 16×32 one may not).
pub fn check_load(shared: &SharedTile, reg: &RegTile) -> Result<(), TileError> {
    if shared.dtype != reg.dtype {
        return Err(TileError::DTypeMismatch(shared.dtype, reg.dtype));
    }
    let divides =
        |a: &(u32, u32), b: &(u32, u32)| b.0.is_multiple_of(a.0) && b.1.is_multiple_of(a.1);
    let s = (shared.rows, shared.cols);
    let r = (reg.rows, reg.cols);
    if divides(&s, &r) || divides(&r, &s) {
        Ok(())
    } else {
        Err(TileError::IncompatibleShapes {
            shared_rows: s.0,
            shared_cols: s.1,
            reg_rows: r.0,
            reg_cols: r.1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BaseShape, Layout};

    /// The two examples of HipKittens D.1.
    #[test]
    fn d1_examples() {
        let reg = RegTile::new(DType::Bf16, 32, 16, Layout::Row, BaseShape::S32X16).unwrap();
        let s16x32 = SharedTile::with_swizzle(DType::Bf16, 16, 32, Swizzle::None).unwrap();
        let s16x16 = SharedTile::with_swizzle(DType::Bf16, 16, 16, Swizzle::None).unwrap();
        assert!(matches!(
            check_load(&s16x32, &reg),
            Err(TileError::IncompatibleShapes { .. })
        ));
        assert!(check_load(&s16x16, &reg).is_ok());
    }

    #[test]
    fn default_swizzle_per_shape_and_tile_bounds() {
        assert_eq!(
            SharedTile::new(DType::Bf16, 16, 32).unwrap().swizzle,
            Swizzle::HK_16X32
        );
        assert_eq!(
            SharedTile::new(DType::F16, 16, 16).unwrap().swizzle,
            Swizzle::DS_WRITE_B64_16X16
        );
        assert_eq!(
            SharedTile::new(DType::F32, 16, 32).unwrap().swizzle,
            Swizzle::None
        );
        // 48x32 bf16 is 3072 bytes: bit 10 ^= bit 11 sends bytes 2048.. to 3072.. .
        let e = SharedTile::with_swizzle(
            DType::Bf16,
            48,
            32,
            Swizzle::Xor {
                bits: 1,
                base: 10,
                shift: 1,
            },
        );
        assert!(matches!(e, Err(TileError::SwizzleOutOfTile(_, 3072))));
        assert!(SharedTile::with_swizzle(DType::Bf16, 48, 32, Swizzle::HK_16X32).is_ok());
    }
}
