//! Split-K: the GEMM's K loop cut into `s` slices, each computed by its own blocks, and the pass that
//! adds the slices' partial sums.
//!
//! Why: a GEMM whose C has fewer blocks than the GPU has SMs leaves SMs idle however long K is. At
//! 16×4096×14336 (a decode step's MLP down-projection) C has 32 blocks of 64×128 for 132 SMs, and each
//! streams 3.7 MB of B alone (bench/NOTES.md). Cut K in four and 128 blocks stream a quarter each.
//!
//! The GEMM is the same tile program ([`super::producer_consumer`]) with [`super::GemmConfig::split_k`]
//! set: a third grid extent names the block's slice of K, and it stores its fp32 partial C (already
//! scaled, for the FP8 GEMM: the scales are per row and column, so they distribute over the sum) to
//! plane `s` of [`PARTIAL`] `[split_k, M, N]`. [`build_reduce`] is a memory-bound strip program
//! (`kittens_codegen::strip`) that sums the planes in f32, in plane order, and rounds once to C's
//! dtype. The partials cost `split_k × M × N × 4` bytes written and read again; [`choose`] takes a
//! split only where that is small beside the operands.

use crate::KernelError;
use kittens_hw::dtype::DType::{self, F32};
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

pub use super::producer_consumer::MAX_SPLIT_K;

/// The name of the split-K GEMM's output tensor, `[split_k, M, N]` f32.
pub const PARTIAL: &str = "c_partial";

/// Waves (rows of C) per block of the reduction.
const REDUCE_WAVES: u32 = 4;

/// The reduction for `split_k` slices on waves of `lanes` lanes: parameters `m, n`; input
/// [`PARTIAL`] (`split_k × m × n` f32), output `c` (`m × n` in `output`, bf16 or f32). Each wave sums
/// `8 × lanes` columns of one row (8 per lane) over the planes, in plane order.
pub fn build_reduce(split_k: u32, output: DType, lanes: u32) -> Result<Kernel, KernelError> {
    let bad = |why: String| {
        Err(KernelError::Config(format!(
            "gemm split-K reduction: {why}"
        )))
    };
    if !(2..=MAX_SPLIT_K).contains(&split_k) {
        return bad(format!("split_k {split_k} must be 2 to {MAX_SPLIT_K}"));
    }
    if !matches!(output, DType::Bf16 | F32) {
        return bad(format!("output must be bf16 or f32, got {output}"));
    }
    if !matches!(lanes, 32 | 64) {
        return bad(format!("{lanes} lanes per wave (32 or 64)"));
    }
    let cols = 8 * lanes;
    let mut k = KernelBuilder::new(
        &format!("gemm_splitk{split_k}_reduce"),
        Schedule::Plain {
            waves: REDUCE_WAVES,
        },
    );
    let (m, n) = (k.param("m"), k.param("n"));
    let planes = [
        ("s", Expr::c(i64::from(split_k))),
        ("r", m.clone()),
        ("c", n.clone()),
    ];
    let part = k.global(PARTIAL, F32, &planes, Access::Read);
    let c = k.global(
        "c",
        output,
        &[("r", m.clone()), ("c", n.clone())],
        Access::Write,
    );
    k.grid(
        vec![
            m.ceil_div(i64::from(REDUCE_WAVES)),
            n.ceil_div(i64::from(cols)),
        ],
        GridOrder::RowMajor,
    );
    let row = k.block(0) * i64::from(REDUCE_WAVES) + k.wave();
    let col0 = k.block(1) * i64::from(cols);
    let strip = |k: &mut KernelBuilder, name: &str| {
        k.tile(name, F32, 1, cols, Layout::Row, BaseShape::STRIP)
    };
    let sum = strip(&mut k, "sum");
    let next = strip(&mut k, "next");
    let plane = |k: &KernelBuilder, s: i64| {
        k.gview(
            part,
            vec![Expr::c(s), row.clone(), col0.clone()],
            1,
            2,
            1,
            cols,
        )
    };
    k.load_global(sum, plane(&k, 0));
    for s in 1..i64::from(split_k) {
        k.load_global(next, plane(&k, s));
        k.add(sum, sum, next);
    }
    k.store(k.gview(c, vec![row, col0], 0, 1, 1, cols), sum);
    Ok(k.finish()?)
}

/// Fewest K steps per slice: a ring of a few stages needs a few steps to fill.
pub const MIN_STEPS: u64 = 8;

/// K slices for `m × n × k` (operands of `elem_bytes` bytes) with blocks of `rows × cols` and K step
/// `k_step` on `sms` SMs: the largest `s` such that
///
/// - C's blocks times `s` still fit one round on the SMs (`blocks · s ≤ sms`: a split never adds a
///   round of work),
/// - each slice keeps at least [`MIN_STEPS`] K steps, and
/// - the partials (`s · M · N` f32, written and read back) are at most an eighth of the operands'
///   bytes, so the reduction pass is small beside the main one;
///
/// 1 (no split) when no `s ≥ 2` passes. Large-M shapes fail the first test, so only grids of fewer
/// blocks than SMs with a long K split (16×4096×14336 with 64×128 blocks: 32 blocks, split 4).
pub fn choose(
    sms: u32,
    (m, n, k): (u64, u64, u64),
    (rows, cols): (u32, u32),
    k_step: u32,
    elem_bytes: u64,
) -> u32 {
    let blocks = m.div_ceil(rows.max(1).into()) * n.div_ceil(cols.max(1).into());
    let steps = k.div_ceil(k_step.max(1).into());
    let operand_bytes = m
        .saturating_add(n)
        .saturating_mul(k)
        .saturating_mul(elem_bytes);
    (2..=MAX_SPLIT_K)
        .filter(|&s| {
            let s = u64::from(s);
            blocks.saturating_mul(s) <= u64::from(sms)
                && steps / s >= MIN_STEPS
                && s.saturating_mul(m).saturating_mul(n).saturating_mul(32) <= operand_bytes
        })
        .max()
        .unwrap_or(1)
}
