//! The one error type of the tile layer.

use thiserror::Error;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TileError {
    #[error("a {rows}x{cols} register tile must be a multiple of its {base_rows}x{base_cols} base shape")]
    NotMultipleOfBase {
        rows: u32,
        cols: u32,
        base_rows: u32,
        base_cols: u32,
    },
    #[error("tile dimensions must be positive, got {rows}x{cols}")]
    Empty { rows: u32, cols: u32 },
    #[error(
        "a {rows}x{cols} tile of {elem_bytes}-byte elements is {bytes} bytes, over the tile layer's budget of \
         {limit} bytes (2^20, more than one block's shared memory or one wave's registers hold on any GPU in the \
         catalog)"
    )]
    TooLarge {
        rows: u32,
        cols: u32,
        elem_bytes: u32,
        bytes: u128,
        limit: u32,
    },
    #[error(
        "cannot move data between a {shared_rows}x{shared_cols} shared tile and a {reg_rows}x{reg_cols} register \
         tile: one shape must be a multiple of the other (HipKittens D.1)"
    )]
    IncompatibleShapes {
        shared_rows: u32,
        shared_cols: u32,
        reg_rows: u32,
        reg_cols: u32,
    },
    #[error("dtype mismatch: {0} vs {1}")]
    DTypeMismatch(kittens_hw::dtype::DType, kittens_hw::dtype::DType),
    #[error(
        "pinned range {first}..={last} of {file} holds {have} registers, the tile needs {need}"
    )]
    PinSize {
        file: &'static str,
        first: u32,
        last: u32,
        have: u32,
        need: u32,
    },
    #[error("swizzle {0} moves bytes across the tile's {1}-byte boundary")]
    SwizzleOutOfTile(String, u32),
    #[error(transparent)]
    Lds(#[from] kittens_hw::lds::LdsError),
    #[error(
        "no {vendor} matrix instruction has a {base} {op} operand with {bytes}-byte elements, which a {layout} \
         register tile of base shape {base} needs for its lane map"
    )]
    NoLaneMap {
        vendor: &'static str,
        layout: crate::Layout,
        base: crate::BaseShape,
        op: &'static str,
        bytes: u32,
    },
    #[error("{instr} cannot move this register tile: {why}")]
    AccessShape { instr: &'static str, why: String },
    #[error(
        "swizzle {swizzle} splits the {bytes}-byte access of lane {lane} of {instr}: its bytes are not contiguous \
         in shared memory"
    )]
    SwizzleSplitsAccess {
        swizzle: String,
        instr: &'static str,
        lane: u32,
        bytes: u32,
    },
    #[error("{0}")]
    Other(String),
}
