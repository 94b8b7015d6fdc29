//! Tiles, layouts and swizzles, and the bank analysis of moving a tile between shared memory and registers.
//!
//! - [`RegTile`]: a register tile — dtype, rows × cols, row or column layout, built from base tiles of one
//!   matrix-instruction operand shape ([`BaseShape`]), optionally pinned to explicit registers (HipKittens D.3);
//! - [`SharedTile`]: a shared-memory tile with its [`Swizzle`] (a default per shape, HipKittens §3.2.2);
//! - [`check_load`]: the rule that a shared tile and a register tile may exchange data only when one shape
//!   is a multiple of the other (HipKittens D.1);
//! - [`analyze`]: the byte address every lane issues for each shared-memory instruction of such a move and
//!   the conflict degree of every phase (`kittens_hw::lds`);
//! - [`solve`]: the swizzle of a shared tile that serves every access to it best (HipKittens D.1).

pub mod access;
pub mod error;
pub mod layout;
pub mod reg;
pub mod shared;
pub mod solve;
pub mod svg;
pub mod swizzle;

pub use access::{
    access_pattern, amd_instr, analyze, base_shapes, BankReport, Issue, PhaseConflict,
};
pub use error::TileError;
pub use kittens_hw::dtype::DType;
pub use layout::{BaseShape, Layout};
pub use reg::{RegFile, RegPin, RegTile};
pub use shared::{check_load, SharedTile, MAX_TILE_BYTES};
pub use solve::{solve, Choice, Constraints, TileAccess};
pub use svg::bank_svg;
pub use swizzle::{default_swizzle, Swizzle, XorTerm};
