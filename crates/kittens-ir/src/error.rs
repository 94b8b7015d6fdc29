//! Build-time errors: every validation failure names the op (its index in a pre-order walk of the body,
//! see [`crate::walk`]) and says what is wrong with it.

use kittens_hw::dtype::DType;
use kittens_tile::{Layout, TileError};
use thiserror::Error;

/// What is wrong with one op.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum OpError {
    #[error(transparent)]
    Tile(#[from] TileError),
    #[error("{what}: expected {expected}, found {found}")]
    DType {
        what: &'static str,
        expected: DType,
        found: DType,
    },
    #[error("{what}: shape {found_rows}x{found_cols}, expected {rows}x{cols}")]
    Shape {
        what: &'static str,
        rows: u32,
        cols: u32,
        found_rows: u32,
        found_cols: u32,
    },
    #[error("{operand} must be in {expected:?} layout for {form} (its reduction dimension runs along each lane), found {found:?}")]
    Layout {
        operand: &'static str,
        form: &'static str,
        expected: Layout,
        found: Layout,
    },
    #[error("{form}: A's base tile has K = {a_k}, B's has K = {b_k}; the matrix instruction needs one K")]
    BaseK {
        form: &'static str,
        a_k: u32,
        b_k: u32,
    },
    #[error("{what} must be a register tile, `{name}` is a vector")]
    NotTile { what: &'static str, name: String },
    #[error("{what} must be a register vector, `{name}` is a tile")]
    NotVec { what: &'static str, name: String },
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("mma reads a shared-memory operand; {target} matrix instructions read registers only")]
    SharedOperand { target: &'static str },
    #[error("{what} id {id} is not declared")]
    Undeclared { what: &'static str, id: u32 },
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum BuildError {
    #[error("declaring `{name}`: {error}")]
    Decl { name: String, error: TileError },
    #[error("op #{index} ({desc}): {error}")]
    Op {
        index: usize,
        desc: String,
        error: OpError,
    },
    #[error("{0}")]
    Structure(String),
    #[error("shared memory: the kernel allocates {need} bytes per block, {gpu} allows {have}")]
    SharedBudget {
        need: u32,
        have: u32,
        gpu: &'static str,
    },
    #[error("registers: about {need} 32-bit registers per lane per wave, {gpu} gives {have} to each of {waves} waves")]
    RegBudget {
        need: u32,
        have: u32,
        waves: u32,
        gpu: &'static str,
    },
    #[error("pinned registers {file}[{first}..={last}] of `{a}` overlap those of `{b}`")]
    PinOverlap {
        a: String,
        b: String,
        file: &'static str,
        first: u32,
        last: u32,
    },
    #[error("`{name}` is pinned to {file}[{first}..={last}]: {why}")]
    PinTarget {
        name: String,
        file: &'static str,
        first: u32,
        last: u32,
        why: String,
    },
    #[error("{waves} waves of {width} lanes exceed the {max} threads of a block")]
    BlockSize { waves: u32, width: u32, max: u32 },
}
