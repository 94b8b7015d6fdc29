//! The attention forward's key split (Flash-Decoding; MI300X-attn §5.2's tail KV split, applied to
//! every block): few query rows against many keys — decoding against a KV cache — launch
//! `B·H·⌈Nq / rows⌉` blocks, far fewer than the GPU has SMs or CUs, and each walks every key. Cut
//! each query block's walk into `G` parts, one block per part, and `G` times as many SMs share it.
//!
//! One mechanism for every schedule ([`super::ping_pong`], [`super::producer_consumer`],
//! [`super::mi300x`]):
//!
//! - the grid's query-block extent becomes `query blocks × G` ([`super::query_grid`], [`coords`]:
//!   block `t` is query block `t / G`, part `t % G`, so the parts of one query block are neighbours
//!   and share its Q in L2);
//! - part `s` walks key blocks `[s·P, min((s+1)·P, n))` of the `n` its query rows need (their
//!   causal limit included, both alignments), `P = ⌈n / G⌉` ([`KeyRange`]). A part with no block
//!   (`G > n`, or `s·P ≥ n`) still walks one block, past its range and fully masked, so that its
//!   pipeline runs as usual and its partial is well defined: log-sum-exp `−∞`, output 0 (the
//!   softmax's floor, [`super::Softmax::floor`]);
//! - instead of `o` and `lse` the block writes its normalised f32 output and its log-sum-exp to
//!   plane `s` of [`O_PARTIAL`] `[G, b, h, s, d]` and [`LSE_PARTIAL`] `[G, b, h, s]`;
//! - [`build_merge`], a strip program (`kittens_codegen::strip`), combines the planes per row:
//!   `lse = log Σ_s exp(lse_s)`, `O = Σ_s exp(lse_s − lse)·O_s`, rounded once to bf16 as configured
//!   (RTNE, RTNA, RTZ), the log-sum-exp written when asked. A row no part kept a key of gets
//!   `O = 0` and `lse = −∞`, as the unsplit kernel writes.
//!
//! `G = 1` is the unsplit kernel itself: no partials, no merge. [`choose`] picks `G` for a shape
//! and a GPU by the tail planner's model (`kittens_grid::tail`, [`SplitScope::Every`]).

use super::{AttnConfig, Io};
pub(crate) use crate::attn::split::declare_partials;
pub use crate::attn::split::{MergeConfig, LSE_PARTIAL, MAX_KV_SPLITS, O_PARTIAL};
use crate::KernelError;
use kittens_grid::tail::{plan_tail, SplitScope, TailInput, TailModel, TailPlan};

use kittens_hw::Gpu;
use kittens_ir::{Expr, Kernel};

/// How many parts a run cuts the keys into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvSplits {
    /// Exactly this many (1: the unsplit kernel).
    Fixed(u32),
    /// As [`choose`] decides for the GPU the run is configured for.
    Auto,
}

impl Default for KvSplits {
    fn default() -> Self {
        KvSplits::Fixed(1)
    }
}

impl std::str::FromStr for KvSplits {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(KvSplits::Auto);
        }
        match s.parse::<u32>() {
            Ok(g) if (1..=MAX_KV_SPLITS).contains(&g) => Ok(KvSplits::Fixed(g)),
            _ => Err(format!(
                "`{s}`: the key split is `auto` or a count from 1 to {MAX_KV_SPLITS}"
            )),
        }
    }
}

/// The query block and the part of a block whose query-block coordinate is `t` (the grid's extent
/// being `query blocks × splits`); no part without a split.
pub(crate) fn coords(t: Expr, splits: u32) -> (Expr, Option<Expr>) {
    if splits <= 1 {
        return (t, None);
    }
    let g = i64::from(splits);
    (&t / g, Some(t % g))
}

/// The key blocks one block walks: `count` blocks from block `first`, keys below `limit` kept. The one
/// place a block's key range is decided, for every schedule.
pub(crate) struct KeyRange {
    pub first: Expr,
    pub count: Expr,
    pub limit: Expr,
}

impl KeyRange {
    /// The key blocks of `cfg.kv_block` keys that a block of query rows `q_first..=q_last` walks:
    /// all its rows need ([`needed`]; with a window's left side, from the block holding the first
    /// row's first key, [`first_needed`]), or under a key split part `io.split` of them (of
    /// `cfg.kv_splits`); without a part or a window, the unsplit kernel's expressions, unchanged.
    /// A part past the blocks walks one block whose keys all lie at or above `limit`.
    pub fn new(io: &Io, cfg: &AttnConfig, q_first: &Expr, q_last: &Expr) -> Self {
        let (seq_kv, kv) = (&io.seq_kv, cfg.kv_block);
        let offset = cfg.last_key_offset(&io.seq, seq_kv);
        let n_kv = needed(seq_kv, q_last, offset.as_ref(), kv);
        let start = cfg.first_key_offset(&io.seq, seq_kv);
        let first = first_needed(q_first, start.as_ref(), &n_kv, kv);
        let Some(s) = &io.split else {
            return KeyRange {
                count: &n_kv - first.clone(),
                first,
                limit: seq_kv.clone(),
            };
        };
        let per = (&n_kv - first.clone()).ceil_div(i64::from(cfg.kv_splits));
        let first = first + s * per.clone();
        let end = (&first + per).min(n_kv);
        KeyRange {
            count: (&end - first.clone()).max(Expr::c(1)),
            limit: seq_kv.min(end * i64::from(kv)),
            first,
        }
    }

    /// The key block of step `j` of the walk.
    pub fn at(&self, j: &Expr) -> Expr {
        &self.first + j.clone()
    }

    /// The block after the last one walked.
    pub fn end(&self) -> Expr {
        &self.first + self.count.clone()
    }
}

/// The key blocks of `kv` keys that query rows up to `q_last` need: every block up to the one
/// holding key `q_last + offset` under a causal mask (at least one, so that a block whose rows keep
/// no key still runs its pipeline once, fully masked), else all `⌈seq_kv / kv⌉`.
fn needed(seq_kv: &Expr, q_last: &Expr, offset: Option<&Expr>, kv: u32) -> Expr {
    let all = seq_kv.ceil_div(kv as i64);
    match offset {
        None => all,
        // Floor division: a last kept key below 0 gives 0 blocks, raised to 1.
        Some(off) => all
            .min((q_last + off.clone()) / kv as i64 + 1)
            .max(Expr::c(1)),
    }
}

/// The first key block of `kv` keys that query rows from `q_first` need under a window's left side
/// `start` (key `j ≥ i + start`), at most the last of the `n_kv` walked (so that a block whose rows
/// keep no key still walks one, fully masked); 0 without one.
fn first_needed(q_first: &Expr, start: Option<&Expr>, n_kv: &Expr, kv: u32) -> Expr {
    match start {
        None => Expr::c(0),
        // Floor division: a first kept key below 0 gives a negative block, raised to 0.
        Some(off) => ((q_first + off.clone()) / kv as i64)
            .max(Expr::c(0))
            .min(n_kv - 1),
    }
}

/// The merge of `cfg.kv_splits` partials (module docs; the shared program,
/// `crate::attn::split::build_merge`, at [`AttnConfig::merge`]).
pub fn build_merge(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    crate::attn::split::build_merge(&cfg.merge())
}

impl AttnConfig {
    /// The merge of this configuration's split: its parts, head dimension, output layout, rounding,
    /// log-sum-exp and strides.
    pub fn merge(&self) -> MergeConfig {
        MergeConfig {
            splits: self.kv_splits,
            dim: self.dim,
            layout: self.layout,
            rounding: self.rounding,
            lse: self.lse,
            strided: self.strided,
        }
    }
}

/// The attention shape [`choose`] plans for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SplitShape {
    pub batch: u64,
    pub heads: u64,
    pub seq: u64,
    pub seq_kv: u64,
}

/// The key split for `shape` with configuration `cfg` on `gpu`: the tail planner
/// (`kittens_grid::tail::plan_tail`, the model of MI300X-attn §5.2 with its constants,
/// [`TailModel::SEED_001`]) asked about splitting every block ([`SplitScope::Every`], since a part
/// is a grid extent here) into at most [`MAX_KV_SPLITS`] parts. In its unit, one key-block step of
/// one block, the unsplit launch takes `⌈blocks / SMs⌉ · n` steps and `G` parts take
/// `⌈blocks·G / SMs⌉ · ⌈n / G⌉` plus the merge (a launch and the partials' bytes at HBM speed);
/// it declines (`G = 1`) when the blocks fill whole rounds, when the last round is at least 95%
/// full, or when no `G` gains 1%. Why this rule: the split pays by putting idle SMs to work on the
/// same walk, which is exactly what the round count measures, and the merge's cost is what stops
/// it at short key lengths. B1 H32 Nq1 against 32768 keys on an H100 (132 SMs, 128-key blocks)
/// has 32 blocks of 256 steps: `G = 4` gives 128 blocks of 64 steps. Causal masks shorten the
/// walks of early query blocks; the model counts every block's full walk (decoding's query blocks
/// all reach the end of the cache).
pub fn choose(gpu: &Gpu, cfg: &AttnConfig, shape: SplitShape) -> Result<TailPlan, KernelError> {
    let input = TailInput {
        seq_kv: Some(shape.seq_kv),
        scope: SplitScope::Every,
        max_split: u64::from(MAX_KV_SPLITS),
        ..TailInput::new(
            shape.batch,
            shape.heads,
            shape.seq,
            u64::from(cfg.dim),
            u64::from(cfg.block_rows()),
            u64::from(cfg.kv_block),
        )
    };
    plan_tail(gpu, &input, &TailModel::SEED_001).map_err(|e| KernelError::Problem(e.to_string()))
}

/// `splits` resolved for `shape` on `gpu` ([`choose`] for [`KvSplits::Auto`]), with the planner's
/// reason when it decided.
pub fn resolve(
    splits: KvSplits,
    gpu: &Gpu,
    cfg: &AttnConfig,
    shape: SplitShape,
) -> Result<(u32, Option<String>), KernelError> {
    match splits {
        KvSplits::Fixed(g) if (1..=MAX_KV_SPLITS).contains(&g) => Ok((g, None)),
        KvSplits::Fixed(g) => Err(KernelError::Config(format!(
            "attn_fwd: {g} key parts (1 to {MAX_KV_SPLITS})"
        ))),
        KvSplits::Auto => {
            let plan = choose(gpu, cfg, shape)?;
            let g = u32::try_from(plan.split)
                .unwrap_or(1)
                .clamp(1, MAX_KV_SPLITS);
            Ok((g, Some(plan.reason)))
        }
    }
}
