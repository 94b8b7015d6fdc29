//! Tail KV split planner for attention forward (MI300X-attn §5.2, after Flash-Decoding).
//!
//! Workgroups run in rounds of one per CU. When `workgroups mod CUs` is not zero the last round is
//! partly empty, yet each of its workgroups still walks the whole K/V sequence. Splitting the K/V range
//! of those stranded workgroups into `G` parts lets idle CUs share the walk; a merge kernel then combines
//! the partial outputs with the log-sum-exp rescale. MI300X-attn gives the decision rule: decline when the
//! grid divides evenly, when the last round is at least 95% full, or when the sequence is too short for
//! the merge to pay; otherwise pick `G` minimising `ceil(tail·G / CUs) × ceil(kv_blocks / G)` plus the
//! merge.
//!
//! The same model covers Flash-Decoding's split of *every* workgroup ([`SplitScope::Every`]), which is
//! what the kittens attention launches (`kittens_kernels::attn_fwd::split`: the split is one more grid
//! extent, so every query block is cut alike): then the cost of `G` is `ceil(workgroups·G / CUs) ×
//! ceil(kv_blocks / G)` plus the merge of every query row. Decoding (few query rows against a long
//! cache) is the case it is for: `B·H` workgroups leave most CUs idle in the only round.
//!
//! Time unit: one K/V-block iteration of one workgroup. The merge is converted into that unit with the
//! GPU's per-CU matrix rate and HBM bandwidth (see [`TailModel`]).

use crate::{mul64, GridError};
use kittens_hw::Gpu;
use serde::Serialize;

/// Most K/V blocks one workgroup may walk: the planner tries every split `G` up to that count.
/// 2^20 blocks of 64 keys are 64 M tokens, far past any attention launch.
pub const MAX_KV_BLOCKS: u64 = 1 << 20;
/// The most K/V-block iterations of an unsplit launch the planner models: 2^53, the integers f64
/// holds exactly (its predicted times are f64 counts of iterations).
pub const MAX_EXACT_ITERATIONS: u64 = 1 << 53;

/// Which workgroups a split cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitScope {
    /// Only the stranded last round's workgroups; the full rounds walk unsplit (MI300X-attn §5.2).
    #[default]
    Tail,
    /// Every workgroup's walk, in `G` parts (Flash-Decoding; the kittens attention's key split).
    Every,
}

/// The shape of one attention forward launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TailInput {
    pub batch: u64,
    pub heads: u64,
    /// Query rows per head.
    pub seq: u64,
    pub dim: u64,
    /// Query rows per workgroup (MI300X-attn §5.1: 384 with three 16-row Q tiles per wave × 8 waves).
    pub block_rows: u64,
    /// Keys per K/V block iteration (MI300X-attn §4.1: the 32 KiB K double buffer holds 2 × 64 rows of
    /// 128 bf16).
    pub kv_block: u64,
    /// Keys each query walks when they differ from `seq` (decoding against a cache); `None`: `seq`.
    pub seq_kv: Option<u64>,
    /// Which workgroups a split cuts.
    pub scope: SplitScope,
    /// The most parts a walk may be cut into; 0: as many as it has K/V blocks.
    pub max_split: u64,
}

impl TailInput {
    /// Self-attention (as many keys as queries), the stranded last round split (the seed's planner).
    pub fn new(batch: u64, heads: u64, seq: u64, dim: u64, block_rows: u64, kv_block: u64) -> Self {
        TailInput {
            batch,
            heads,
            seq,
            dim,
            block_rows,
            kv_block,
            seq_kv: None,
            scope: SplitScope::Tail,
            max_split: 0,
        }
    }

    /// Keys of the walk.
    pub fn keys(&self) -> u64 {
        self.seq_kv.unwrap_or(self.seq)
    }
}

/// Constants of the cost model; [`TailModel::SEED_001`] documents where each comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TailModel {
    /// Fraction of the matrix peak the attention main loop sustains.
    pub attention_efficiency: f64,
    /// Fixed cost of launching the merge kernel, seconds.
    pub merge_launch_s: f64,
    /// Fraction of HBM peak the merge kernel reaches.
    pub merge_bw_efficiency: f64,
    /// Decline when the last round is at least this full (MI300X-attn §5.2: 95%).
    pub full_tail: f64,
    /// Decline unless the predicted speedup reaches this (the merge must pay).
    pub min_speedup: f64,
}

impl TailModel {
    /// attention_efficiency 0.41: MI300X-attn §6 measures (2, 24, 8192, 128) in 3.083 ms, i.e.
    /// 4·B·H·S²·D = 1.65 PFLOP → 535 TFLOP/s, 41% of the MI300X's 1307 TFLOP/s. The 5 µs launch and
    /// 70% of HBM peak for the merge are our estimates for a small memory-bound kernel, not measured
    /// here. `min_speedup` 1.01 declines splits whose gain is within the model's noise.
    pub const SEED_001: TailModel = TailModel {
        attention_efficiency: 0.41,
        merge_launch_s: 5e-6,
        merge_bw_efficiency: 0.7,
        full_tail: 0.95,
        min_speedup: 1.01,
    };
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TailPlan {
    /// K/V parts per stranded workgroup; 1 means no split.
    pub split: u64,
    pub reason: String,
    /// Predicted time without split / with the chosen split (1.0 when declined).
    pub speedup: f64,
    pub workgroups: u64,
    pub full_rounds: u64,
    /// Workgroups in the last, partial round.
    pub tail: u64,
    pub kv_blocks: u64,
    /// Predicted times in K/V-block iterations.
    pub time_unsplit: f64,
    pub time_split: f64,
    /// The merge's share of `time_split`, in K/V-block iterations.
    pub merge_cost: f64,
}

impl TailInput {
    fn validate(&self) -> Result<(), GridError> {
        let v = [
            self.batch,
            self.heads,
            self.seq,
            self.dim,
            self.block_rows,
            self.kv_block,
            self.keys(),
        ];
        if v.contains(&0) {
            return Err(GridError::Invalid(
                "batch, heads, seq, seq_kv, dim, block rows and kv block must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// Seconds for one K/V-block iteration of one workgroup: QKᵀ and PV are `2·R·Bk·D` flops each
/// (in f64: the product of three u64 sizes may not fit in u64).
fn kv_iteration_s(gpu: &Gpu, s: &TailInput, m: &TailModel) -> f64 {
    let flops = 4.0 * s.block_rows as f64 * s.kv_block as f64 * s.dim as f64;
    let per_cu = gpu.peak_bf16_tflops * 1e12 / gpu.compute_units as f64;
    flops / (per_cu * m.attention_efficiency)
}

/// Merge cost in K/V-block iterations: launch plus reading `G` fp32 partial outputs of `rows` query
/// rows with their (max, sum) statistics and writing the bf16 result.
fn merge_cost(gpu: &Gpu, s: &TailInput, m: &TailModel, rows: f64, g: u64) -> f64 {
    let bytes = rows * (g as f64 * (s.dim as f64 * 4.0 + 8.0) + s.dim as f64 * 2.0);
    let secs = m.merge_launch_s + bytes / (gpu.hbm_tbps * 1e12 * m.merge_bw_efficiency);
    secs / kv_iteration_s(gpu, s, m)
}

/// Choose a split `G` for the stranded last round, or decline with the reason (MI300X-attn §5.2).
pub fn plan_tail(gpu: &Gpu, s: &TailInput, m: &TailModel) -> Result<TailPlan, GridError> {
    s.validate()?;
    let cus = gpu.compute_units as u64;
    let kv_blocks = s.keys().div_ceil(s.kv_block);
    GridError::check_budget(
        "a walk",
        kv_blocks as u128,
        "K/V blocks",
        "tail planner",
        MAX_KV_BLOCKS,
        "; use a larger K/V block",
    )?;
    let q_blocks = s.seq.div_ceil(s.block_rows);
    let workgroups = mul64(
        mul64(s.batch, s.heads, "batch x heads")?,
        q_blocks,
        "batch x heads x query blocks",
    )?;
    let (full_rounds, tail) = (workgroups / cus, workgroups % cus);
    let rounds = full_rounds + u64::from(tail > 0);
    let unsplit = mul64(rounds, kv_blocks, "rounds x K/V blocks")?;
    // The model times in f64, which holds integers exactly only up to 2^53: a count past it would be
    // printed rounded as if exact.
    GridError::check_budget(
        format!("a launch of {workgroups} workgroups"),
        u128::from(unsplit),
        "K/V-block iterations",
        "tail planner",
        MAX_EXACT_ITERATIONS,
        "; its predicted times are f64 counts, exact only to 2^53",
    )?;
    let unsplit = unsplit as f64;
    let mut plan = TailPlan {
        split: 1,
        reason: String::new(),
        speedup: 1.0,
        workgroups,
        full_rounds,
        tail,
        kv_blocks,
        time_unsplit: unsplit,
        time_split: unsplit,
        merge_cost: 0.0,
    };
    if tail == 0 {
        plan.reason = format!(
            "declined: {workgroups} workgroups fill {full_rounds} rounds of {cus} CUs exactly"
        );
        return Ok(plan);
    }
    let fill = tail as f64 / cus as f64;
    if fill >= m.full_tail {
        plan.reason = format!(
            "declined: the last round is {:.1}% full (>= {:.0}%)",
            fill * 100.0,
            m.full_tail * 100.0
        );
        return Ok(plan);
    }
    // The workgroups a split cuts, the rounds that stay whole, and the query rows the merge reads.
    let (cut, whole) = match s.scope {
        SplitScope::Tail => (tail, full_rounds * kv_blocks),
        SplitScope::Every => (workgroups, 0),
    };
    let rows = match s.scope {
        SplitScope::Tail => tail as f64 * s.block_rows as f64,
        // Padded blocks hold no rows: at most `batch·heads·seq` (one row per head when decoding).
        SplitScope::Every => {
            (workgroups as f64 * s.block_rows as f64).min((s.batch * s.heads) as f64 * s.seq as f64)
        }
    };
    let cost = |g: u64| {
        let merge = merge_cost(gpu, s, m, rows, g);
        let parts = ((cut as u128 * g as u128).div_ceil(cus as u128)
            * kv_blocks.div_ceil(g) as u128) as f64;
        (whole as f64 + parts + merge, merge)
    };
    let most = match s.max_split {
        0 => kv_blocks,
        g => g.min(kv_blocks),
    };
    let (g, (t, merge)) = (2..=most)
        .map(|g| (g, cost(g)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
        .unwrap_or((1, (unsplit, 0.0)));
    let speedup = unsplit / t;
    if g < 2 || speedup < m.min_speedup {
        let merge_free = unsplit / (t - merge);
        plan.reason = if merge_free < m.min_speedup {
            format!(
                "declined: with {tail} of {cus} CUs busy no split saves a round's worth of work"
            )
        } else {
            format!(
                "declined: sequence too short for the merge to pay ({kv_blocks} K/V blocks; G={g} would give {speedup:.3}x)"
            )
        };
        return Ok(plan);
    }
    plan.split = g;
    plan.speedup = speedup;
    plan.time_split = t;
    plan.merge_cost = merge;
    plan.reason = format!(
        "split: the last round holds {tail} of {cus} CUs ({:.1}%); {g} parts of {} K/V blocks {}",
        fill * 100.0,
        kv_blocks.div_ceil(g),
        match s.scope {
            SplitScope::Tail => "per stranded workgroup",
            SplitScope::Every => "per workgroup",
        }
    );
    Ok(plan)
}
