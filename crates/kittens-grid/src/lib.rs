//! Grid scheduling for chiplet GPUs: the order blocks are handed out, what that order does to the
//! caches, and two host-side planners. HipKittens §3.4 (Algorithm 1, Table 4, Fig. 5/18), MI300X-attn §4.1
//! and §5.2, HipKittens §3.3.1 / Table 2. docs/grid.md explains the models and their limits.
//!
//! API the kernels use — plain integers in, plain integers out, evaluable per block:
//! - [`remap::xcd_swizzle`]`(id, rows, cols, n_xcd, window, chunk) -> (row, col)`: Algorithm 1;
//! - [`remap::xcd_chunk`]`(id, blocks, n_xcd, chunk) -> id`: its XCD step (lines 1–12);
//! - [`remap::group_m`]`(id, rows, cols, window) -> (row, col)`: its window step = Fig. 21's group-M;
//! - [`remap::head_first`]`(id, batch, heads, q_blocks, n_xcd) -> (batch, head, q_block)`: MI300X-attn §4.1;
//! - [`remap::row_major`]`(id, cols) -> (row, col)`; [`remap::GridOrder`] names an order as a value.
//!
//! Host-side models and planners:
//! - [`l2::simulate`]`(gpu, &GemmShape, GridOrder) -> L2Report`: L2/LLC hit rates, HBM bytes and
//!   the Eq. 1 bandwidth of a GEMM grid order, blocks in lockstep rounds;
//!   [`l2::simulate_staggered`]`(…, stagger)` with the CUs of an XCD out of phase;
//! - [`tail::plan_tail`]`(gpu, &TailInput, &TailModel) -> TailPlan`: the tail KV split (MI300X-attn §5.2);
//! - [`regs::plan_regs`]`(gpu, &RegsInput) -> RegsReport`: register budgets (HipKittens Table 2);

pub mod l2;
pub mod regs;
pub mod remap;
pub mod tail;

use thiserror::Error;

/// Errors of the planners and the model: all are bad inputs.
#[derive(Debug, Error, PartialEq)]
pub enum GridError {
    #[error("invalid input: {0}")]
    Invalid(String),
    /// An input whose work or memory would exceed what a model or planner allows itself. The budgets
    /// are far above every real launch; they exist so a typo gives an answer at once instead of an
    /// allocation failure or a run of hours.
    #[error(
        "{what} ({value} {unit}) exceeds the {model}'s budget of {limit} {unit} (2^{log2}){hint}"
    )]
    Budget {
        /// What was counted: "a grid", "an image of 3600001x4800001", "a walk".
        what: String,
        /// The count, computed in u128 so that it never wraps.
        value: u128,
        unit: &'static str,
        model: &'static str,
        limit: u64,
        log2: u32,
        /// What to change, when there is one thing to say (starts with "; ").
        hint: &'static str,
    },
    /// A count that does not fit in the integer the model computes it in.
    #[error("{0}")]
    Overflow(String),
}

impl GridError {
    /// `value` against the power-of-two `limit`.
    pub fn check_budget(
        what: impl Into<String>,
        value: u128,
        unit: &'static str,
        model: &'static str,
        limit: u64,
        hint: &'static str,
    ) -> Result<(), GridError> {
        debug_assert!(limit.is_power_of_two());
        if value <= limit as u128 {
            return Ok(());
        }
        Err(GridError::Budget {
            what: what.into(),
            value,
            unit,
            model,
            limit,
            log2: limit.trailing_zeros(),
            hint,
        })
    }

    /// The error for `expr` (a formula with its values) not fitting in `bits` bits.
    pub(crate) fn overflow(expr: String, bits: u32) -> GridError {
        GridError::Overflow(format!("{expr} does not fit in {bits} bits"))
    }
}

/// `a · b` in 64 bits, or the overflow error naming the product.
pub(crate) fn mul64(a: u64, b: u64, what: &str) -> Result<u64, GridError> {
    a.checked_mul(b)
        .ok_or_else(|| GridError::overflow(format!("{what} ({a} x {b})"), 64))
}
