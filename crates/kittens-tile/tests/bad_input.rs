//! Tiles too large for any shared memory or register file are refused with a typed error that names
//! the tile layer's size budget, before any byte of them is walked or allocated.

use kittens_hw::lds::DsInstr;
use kittens_tile::{analyze, BaseShape, DType, Layout, RegTile, SharedTile, Swizzle, TileError};

/// The message names the budget (2^20 bytes) and the tile's real size, computed without wrapping.
fn assert_too_large(e: TileError, bytes: u128) {
    let msg = e.to_string();
    assert!(
        matches!(e, TileError::TooLarge { bytes: b, .. } if b == bytes),
        "{msg}"
    );
    assert!(
        msg.contains("2^20") && msg.contains(&bytes.to_string()),
        "{msg}"
    );
}

#[test]
fn shared_tiles_over_the_budget_are_refused() {
    // 10^12 elements: the old u32 byte count wrapped, and the swizzle check walked every byte.
    for (rows, cols, bytes) in [
        (1_000_000u32, 1_000_000u32, 2_000_000_000_000u128),
        (
            u32::MAX,
            u32::MAX,
            2 * (u32::MAX as u128) * (u32::MAX as u128),
        ),
        (1024, 1024, 2 << 20),
    ] {
        let e = SharedTile::new(DType::Bf16, rows, cols).unwrap_err();
        assert_too_large(e, bytes);
        let e = SharedTile::with_swizzle(DType::Bf16, rows, cols, Swizzle::None).unwrap_err();
        assert_too_large(e, bytes);
    }
    // 65536 x 32768 bf16 is exactly 2^32 bytes: a u32 byte count reads 0.
    let e = SharedTile::new(DType::Bf16, 65536, 32768).unwrap_err();
    assert_too_large(e, 1 << 32);
}

#[test]
fn register_tiles_over_the_budget_are_refused() {
    let e = RegTile::new(
        DType::Bf16,
        1_000_000,
        1_000_000,
        Layout::Row,
        BaseShape::S16X32,
    )
    .unwrap_err();
    assert_too_large(e, 2_000_000_000_000);
}

/// A tile inside the budget still analyses. 512x512 bf16 unswizzled: each row is 1 KiB, a multiple of
/// the 64 banks x 4 bytes, so every row starts in bank 0. In phase 0 of ds_read_b128 (lanes 0-3, 12-15,
/// 20-27, HipKittens Table 5) lanes 0-3 and 12-15 read bytes 0..16 of rows 0-3 and 12-15 (banks 0-3) and
/// lanes 20-27 bytes 16..32 of rows 4-11 (banks 4-7): 8 distinct words per bank, 8-way.
#[test]
fn tiles_inside_the_budget_still_analyse() {
    let shared = SharedTile::with_swizzle(DType::Bf16, 512, 512, Swizzle::None).unwrap();
    let reg = RegTile::new(DType::Bf16, 512, 512, Layout::Row, BaseShape::S16X32).unwrap();
    let r = analyze(&shared, &reg, DsInstr::DsReadB128).unwrap();
    assert_eq!(r.phases[0].lanes[..4], [0, 1, 2, 3]);
    assert_eq!(r.phases[0].conflict, 8);
}
