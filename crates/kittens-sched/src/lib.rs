//! Grid scheduling for chiplet GPUs: the order blocks are handed out, what that order does to the
//! caches, and two host-side planners. Seed 000 §3.4 (Algorithm 1, Table 4, Fig. 5/18), seed 001 §4.1
//! and §5.2, seed 000 §3.3.1 / Table 2. docs/grid.md explains the models and their limits.
//!
//! API the kernels use — plain integers in, plain integers out, evaluable per block:
//! - [`remap::xcd_swizzle`]`(id, rows, cols, n_xcd, window, chunk) -> (row, col)`: Algorithm 1;
//! - [`remap::xcd_chunk`]`(id, blocks, n_xcd, chunk) -> id`: its XCD step (lines 1–12);
//! - [`remap::group_m`]`(id, rows, cols, window) -> (row, col)`: its window step = Fig. 21's group-M;
//! - [`remap::head_first`]`(id, batch, heads, q_blocks, n_xcd) -> (batch, head, q_block)`: seed 001 §4.1;
//! - [`remap::row_major`]`(id, cols) -> (row, col)`; [`remap::GridOrder`] names an order as a value.
//!
//! Host-side models and planners:
//! - [`cache::simulate`]`(gpu, &GemmShape, GridOrder) -> CacheReport`: L2/LLC hit rates, HBM bytes and
//!   the Eq. 1 bandwidth of a GEMM grid order, blocks in lockstep rounds;
//!   [`cache::simulate_staggered`]`(…, stagger)` with the CUs of an XCD out of phase;
//! - [`tail::plan_tail`]`(gpu, &TailInput, &TailModel) -> TailPlan`: the tail KV split (seed 001 §5.2);
//! - [`regs::plan_regs`]`(gpu, &RegsInput) -> RegsReport`: register budgets (seed 000 Table 2);

pub mod cache;
pub mod regs;
pub mod remap;
pub mod tail;

use thiserror::Error;

/// Errors of the planners and the model: all are bad inputs.
#[derive(Debug, Error, PartialEq)]
pub enum SchedError {
    #[error("invalid input: {0}")]
    Invalid(String),
}
