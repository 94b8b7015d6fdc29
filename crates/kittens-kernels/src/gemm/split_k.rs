//! Split-K: the GEMM's K loop cut into `s` slices, each computed by its own blocks, and the pass that
//! adds the slices' partial sums.
//!
//! Why: a GEMM whose C has fewer blocks than the GPU has SMs leaves SMs idle however long K is. At
//! 16×4096×14336 (a decode step's MLP down-projection) C has 32 blocks of 64×128 for 132 SMs, and each
//! streams 3.7 MB of B alone (docs/performance.md). Cut K in four and 128 blocks stream a quarter each.
//!
//! The GEMM is the same tile program ([`super::producer_consumer`]) with [`super::GemmConfig::split_k`]
//! set: a third grid extent names the block's slice of K, and it stores its fp32 partial C (already
//! scaled, for the FP8 GEMM: the scales are per row and column, so they distribute over the sum) to
//! plane `s` of [`PARTIAL`] `[split_k, M, N]`. [`build_reduce`] is a memory-bound strip program
//! (`kittens_codegen::strip`) that sums the planes in f32, in plane order, and rounds once to C's
//! dtype. The partials cost `split_k × M × N × 4` bytes written and read again, and a second launch;
//! [`choose`] weighs that against the SMs a split puts to work, by the cost model of [`estimate_us`].

use crate::KernelError;
use kittens_hw::dtype::DType::{self, F32};
use kittens_hw::Gpu;
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, Schedule, Scope};
use kittens_tile::{BaseShape, Layout};

pub use super::producer_consumer::MAX_SPLIT_K;

/// The name of the split-K GEMM's output tensor, `[split_k, M, N]` f32.
pub const PARTIAL: &str = "c_partial";

/// The name of a split-K GEMM's arrival counters when its last block reduces ([`Fixup`]): `i32`, one
/// per tile of C, zero at launch and left zero.
pub const COUNTERS: &str = "tile_counters";

/// Columns of C each consumer wave adds per step of the last block's reduction: 16 × 64 f32 is 8
/// registers per thread for the sum and 8 for the next plane, beside the accumulators still live.
const FIXUP_COLS: u32 = 64;

/// The split-K GEMM's own reduction ([`super::GemmConfig::last_block_reduces`]): every block stores
/// its slice's partial tile to its plane of [`PARTIAL`] as before, then the consumer waves arrive on
/// the tile's counter ([`kittens_ir::Stmt::LastArrival`]); the last of the `split_k` blocks of a tile
/// adds the tile's planes in plane order, as [`build_reduce`] does (the same sums, bit for bit), and
/// stores C. The hand-off is CUTLASS's stream-K "fixup" and FlashAttention's split-KV combine in one
/// launch (docs/references.md): no second launch, and the partials are read back from the L2 by the
/// SM that finishes last rather than by a strip program.
pub struct Fixup {
    /// C (`m × n` in the output dtype, rows `ldc` apart).
    pub c: GlobalId,
    /// [`COUNTERS`], `⌈m / rows⌉ · ⌈n / cols⌉` elements.
    pub counter: GlobalId,
    /// Tiles of C per row of tiles.
    pub tiles_n: Expr,
}

impl Fixup {
    /// Declares the counters (after the partials) of the GEMM writing C (`c`, declared before them).
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        c: GlobalId,
        (m, n): (&Expr, &Expr),
        (rows, cols): (u32, u32),
    ) -> Fixup {
        let tiles_n = n.ceil_div(i64::from(cols));
        let tiles = m.ceil_div(i64::from(rows)) * tiles_n.clone();
        let counter = k.global(COUNTERS, DType::I32, &[("t", tiles)], Access::ReadWrite);
        Fixup {
            c,
            counter,
            tiles_n,
        }
    }

    /// After the block's partial tile is stored: the consumer waves arrive on tile `(row, col)`'s
    /// counter, and in the last block each adds the planes of its 16-row slices (rows `slice_rows`,
    /// `cols` columns from `col0`) and stores them to C.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce(
        &self,
        k: &mut KernelBuilder,
        partial: GlobalId,
        split_k: u32,
        (row, col): (&Expr, &Expr),
        slice_rows: &[Expr],
        col0: &Expr,
        cols: u32,
    ) {
        let tile = |k: &mut KernelBuilder, name: &str| {
            k.tile(name, F32, 16, FIXUP_COLS, Layout::Row, BaseShape::S16X16)
        };
        let sum = tile(k, "fixup_sum");
        let next = tile(k, "fixup_next");
        let index = row * self.tiles_n.clone() + col.clone();
        let (c, counter) = (self.c, self.counter);
        k.last_arrival(
            counter,
            index,
            Expr::c(i64::from(split_k)),
            Scope::Consumers,
            |k| {
                for r0 in slice_rows {
                    for j in (0..cols).step_by(FIXUP_COLS as usize) {
                        let c0 = col0 + i64::from(j);
                        let plane = |k: &KernelBuilder, s: u32| {
                            let origin = vec![Expr::c(i64::from(s)), r0.clone(), c0.clone()];
                            k.gview(partial, origin, 1, 2, 16, FIXUP_COLS)
                        };
                        k.load_global(sum, plane(k, 0));
                        for s in 1..split_k {
                            k.load_global(next, plane(k, s));
                            k.add(sum, sum, next);
                        }
                        let dst = k.gview(c, vec![r0.clone(), c0], 0, 1, 16, FIXUP_COLS);
                        k.store(dst, sum);
                    }
                }
            },
        );
    }
}

/// Waves (rows of C) per block of the reduction.
const REDUCE_WAVES: u32 = 4;

/// The reduction for `split_k` slices on waves of `lanes` lanes: parameters `m, n`; input
/// [`PARTIAL`] (`split_k × m × n` f32), output `c` (`m × n` in `output`, bf16 or f32). Each wave sums
/// `8 × lanes` columns of one row (8 per lane) over the planes, in plane order.
pub fn build_reduce(split_k: u32, output: DType, lanes: u32) -> Result<Kernel, KernelError> {
    build_reduce_into(split_k, output, lanes, false)
}

/// [`build_reduce`], with C's rows `ldc` elements apart (a parameter after `m, n`) when `strided`: the
/// reduction of a GEMM whose C is a slice of a bigger matrix ([`super::GemmConfig::strided`]).
pub fn build_reduce_into(
    split_k: u32,
    output: DType,
    lanes: u32,
    strided: bool,
) -> Result<Kernel, KernelError> {
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
    let ldc = if strided { k.param("ldc") } else { n.clone() };
    let c = k.global_strided(
        "c",
        output,
        &[("r", m.clone()), ("c", n.clone())],
        vec![ldc, Expr::c(1)],
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

/// Bytes per second one SM streams from DRAM with the deepest ring that fits beside a 64-row block
/// (8 stages): H100, 16×4096×14336 with 32 blocks of 64×128 moved its 117 MB at 2.1 TB/s, 66 GB/s
/// per SM, and 48 or 64 such blocks reached cuBLAS's rate (about 2.6 TB/s) without a split
/// (docs/performance.md, "gemm_bf16").
pub const SM_STREAM_BYTES_PER_S: f64 = 66e9;

/// Fixed cost of the reduction pass beside its bytes (a second launch), µs.
pub const REDUCE_LAUNCH_US: f64 = 3.0;

/// The streaming figures of [`estimate_us`] on one GPU model: DRAM bytes per second all SMs reach,
/// bytes per second one SM streams, and the reduction's fixed cost (µs).
///
/// The H100's are [`SM_STREAM_BYTES_PER_S`], [`REDUCE_LAUNCH_US`] and its HBM bandwidth. The H200's
/// were fitted to a run of every 64-row block split 1, 2 and 4 at M 16-256 of the LLM shapes
/// (docs/performance.md, "gemm_bf16"): the kernel streams there at about the H100's 3.35 TB/s, not
/// the H200's 4.8 (the H200's bandwidth in the H100's model split 64 blocks that lost to none), and
/// a split costs more beside it (128×4096×14336: 0.91 of cuBLAS unsplit, 0.80 split in 2).
pub fn streaming(gpu: &Gpu) -> (f64, f64, f64) {
    match gpu.name {
        "h200" => (3.35e12, 50e9, 8.0),
        _ => (gpu.hbm_tbps * 1e12, SM_STREAM_BYTES_PER_S, REDUCE_LAUNCH_US),
    }
}

/// The model's time of `m × n × k` with blocks `rows × cols`, K step `k_step`, operands of
/// `elem_bytes` (2: bf16, 1: fp8) and `s` K slices on `sms` SMs of `gpu`, µs: the larger of
///
/// - **compute**: rounds of `⌈blocks·s / sms⌉` units, each `2·rows·cols·(steps per slice)·k_step`
///   FLOP at the SM's share of 0.75 of the dense peak (bf16, or fp8 with one-byte operands);
/// - **streaming**: A and B once and C at 2 bytes per element at the lesser of the DRAM rate and
///   what the busy SMs stream (the model's [`streaming`] figures);
///
/// plus, with `s > 1`, the partials written and read back (`2·s·M·N·4` bytes at the DRAM rate) and
/// the reduction's fixed cost.
pub fn estimate_us(
    gpu: &Gpu,
    sms: u32,
    (m, n, k): (u64, u64, u64),
    (rows, cols): (u32, u32),
    k_step: u32,
    elem_bytes: u64,
    s: u32,
) -> f64 {
    let (sms, s64) = (u64::from(sms.max(1)), u64::from(s.max(1)));
    let blocks = m.div_ceil(rows.max(1).into()) * n.div_ceil(cols.max(1).into());
    let units = blocks.saturating_mul(s64);
    let rounds = units.div_ceil(sms);
    let steps = k.div_ceil(k_step.max(1).into()).div_ceil(s64);
    let unit_flop = 2.0 * f64::from(rows) * f64::from(cols) * (steps * u64::from(k_step)) as f64;
    let peak = if elem_bytes == 1 {
        gpu.peak_fp8_tflops
    } else {
        gpu.peak_bf16_tflops
    };
    let sm_flops = peak * 1e12 * 0.75 / f64::from(gpu.compute_units.max(1));
    let compute = rounds as f64 * unit_flop / sm_flops;
    let (hbm, per_sm, reduce_us) = streaming(gpu);
    let bytes = ((m + n) * k * elem_bytes + m * n * 2) as f64;
    let stream = bytes / hbm.min(units.min(sms) as f64 * per_sm);
    let partials = if s > 1 {
        (2 * s64 * m * n * 4) as f64 / hbm + reduce_us * 1e-6
    } else {
        0.0
    };
    (compute.max(stream) + partials) * 1e6
}

/// K slices for `m × n × k` (operands of `elem_bytes` bytes) with blocks of `rows × cols` and K step
/// `k_step` on `sms` SMs of `gpu`: among the `s` that keep C's blocks times `s` within one round of the
/// SMs (a split never adds a round) and at least [`MIN_STEPS`] K steps per slice, the largest whose
/// [`estimate_us`] is within 3% of the least. Ties go up because the model cannot tell DRAM-bound
/// splits apart while the H100 could: 16×4096×4096 with 64×128 blocks ran at 1.13 of cuBLAS split in
/// 4 and 0.88 split in 2 (docs/performance.md). Large-M shapes fill the SMs without a
/// split; a small M streams B from too few SMs (32 blocks: split 4) unless there are enough blocks to
/// saturate DRAM (16×8192×8192: 64 blocks, no split: the second launch costs more than it buys), and
/// a mid-size M whose few blocks run a long K loop splits for compute.
pub fn choose(
    gpu: &Gpu,
    sms: u32,
    mnk: (u64, u64, u64),
    block: (u32, u32),
    k_step: u32,
    elem_bytes: u64,
) -> u32 {
    let (m, n, k) = mnk;
    let blocks = m.div_ceil(block.0.max(1).into()) * n.div_ceil(block.1.max(1).into());
    let steps = k.div_ceil(k_step.max(1).into());
    let times: Vec<(u32, f64)> = (1..=MAX_SPLIT_K)
        .take_while(|&s| {
            let s64 = u64::from(s);
            s == 1 || (blocks.saturating_mul(s64) <= u64::from(sms) && steps / s64 >= MIN_STEPS)
        })
        .map(|s| (s, estimate_us(gpu, sms, mnk, block, k_step, elem_bytes, s)))
        .collect();
    let least = times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    times
        .iter()
        .filter(|t| t.1 <= least * 1.03)
        .map(|t| t.0)
        .max()
        .unwrap_or(1)
}
