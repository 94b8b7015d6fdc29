//! Schedule analysis: runs every wave of one block symbolically through the kernel body and reports
//! shared-memory hazards and the wait counts a kernel may leave to the framework (docs/architecture.md principle 3;
//! the schedules of HipKittens §3.3.2 and the GEMM listing of E.1).
//!
//! The model:
//! * each wave executes the body with its wave id, the loop counters and the given parameters and block
//!   coordinates substituted, so wave conditionals (the ping-pong's stagger barrier) take their real
//!   branch;
//! * `load_async` (global→shared) and `load (shared→reg)`/`store (reg→shared)` are queued: they complete
//!   in issue order when the issuing wave executes a wait on their queue that leaves at most `n` newer
//!   ones outstanding (HipKittens D.5: `vmcnt`/`lgkmcnt`); `mma` reads of shared operands are synchronous;
//! * barriers are matched by count, as AMD hardware matches `s_barrier` (see [`order`]);
//! * two accesses to overlapping parts of one shared tile (buffer, ring slot, row and column range), at
//!   least one a write, must be ordered: the first one *completes* before the second one is *issued*
//!   (same wave: program order after the covering wait; other waves: a barrier after the covering wait).
//!   An unordered pair is a [`Hazard`]: a missing wait when the issues are ordered but the first has not
//!   landed, a missing barrier when nothing orders them at all.
//!
//! Loops longer than `2·h + P` iterations (h = [`Options::head_iters`], default 3 + the deepest shared
//! ring, P = lcm of the ring sizes) run their first h iterations and a tail of at least h, skipping a
//! multiple of P in between, where the skipped iterations are proved to repeat the kept ones exactly
//! and every wave skips matching barriers ([`period`]); otherwise every iteration runs.
//! [`Report::unrolled`] says which loops were shortened and how it was proved.
//!
//! [`analyze`] takes one block; [`analyze_launch`] every distinct block of a launch and [`verify`]
//! representative launches, the check every lowering runs first ([`launch`]).

mod event;
mod hazards;
mod launch;
mod order;
mod period;
mod report;
mod trace;

pub use launch::{
    analyze_launch, representative_params, verify, BlockClass, LaunchReport, ScheduleError,
    Verified, MAX_TRACED_BLOCKS,
};
pub use period::Periodicity;
pub use trace::LoopUnroll;

use crate::expr::Env;
use crate::ir::{Kernel, Op, SharedId, Stmt, WaitCount, WaitQueue};
use hazards::{Counts, Ctx, Race};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AnalysisError {
    #[error("kernel `{kernel}` takes {expected} parameters, {got} given")]
    Params {
        kernel: String,
        expected: usize,
        got: usize,
    },
    #[error("op #{op}: cannot evaluate `{expr}` (unbound variable, division by zero or a value past 64 bits)")]
    Eval { op: usize, expr: String },
    #[error("op #{op} names a shared buffer the kernel does not declare")]
    NoSuchBuffer { op: usize },
    #[error("op #{op}: slot {slot} of shared ring `{buffer}` which has {count}")]
    SlotOutOfRange {
        op: usize,
        buffer: String,
        slot: i64,
        count: u32,
    },
    #[error("wave {wave} executes more than {events} memory events; use smaller parameters")]
    TooLarge { wave: u32, events: usize },
    /// Every parameter is a problem size; one that is not positive makes the problem empty, and an
    /// empty problem has no schedule to analyse (reporting "no hazards" would claim what was not checked).
    #[error("parameter `{name}` = {value}: the problem is empty (every size must be at least 1)")]
    EmptyProblem { name: String, value: i64 },
    /// A data word (seed, counter) outside `0..2^32`.
    #[error("parameter `{name}` = {value}: a 32-bit word, 0 to 4294967295")]
    BadWord { name: String, value: i64 },
    /// Block coordinates that name no block of the launch.
    #[error("block {block:?}: the grid is {extents:?} ({dims} coordinate(s), each from 0 to its extent - 1)")]
    BlockOutsideGrid {
        block: Vec<i64>,
        extents: Vec<i64>,
        dims: usize,
    },
    #[error("grid dimension {dim} (`{extent}`) has {value} blocks: the launch is empty")]
    EmptyGrid {
        dim: usize,
        extent: String,
        value: i64,
    },
    #[error("the grid has more than 2^64 blocks")]
    TooManyBlocks,
}

/// What to analyse: one block of a launch with concrete parameters.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Values of [`Kernel::params`], in order.
    pub params: Vec<i64>,
    /// Grid coordinates of the block (`Expr::Block(i)`); missing ones are 0.
    pub block: Vec<i64>,
    /// Loop iterations kept at each end of a long loop; default 3 + the deepest shared ring.
    pub head_iters: Option<i64>,
    /// Assume a shared→register read has read its data before any async global→shared copy issued
    /// after it (later in its wave, or after a barrier in another wave) lands. The LLVM AMDGPU memory model
    /// does not promise it (only `lgkmcnt(0)` before the barrier does), but the copy's round trip through
    /// global memory is far longer than an LDS read, and HipKittens' GEMM relies on it (HipKittens E.1
    /// waits `lgkmcnt(8)`, not 0, before the barrier that lets the other warpgroup reload the slot).
    pub trust_lds_latency: bool,
}

/// A rectangle of one slot of a shared ring, in elements of its tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Region {
    pub buf: SharedId,
    pub slot: i64,
    /// Half-open row range.
    pub rows: (i64, i64),
    /// Half-open column range.
    pub cols: (i64, i64),
}

impl Region {
    pub fn overlaps(&self, o: &Region) -> bool {
        self.buf == o.buf
            && self.slot == o.slot
            && self.rows.0 < o.rows.1
            && o.rows.0 < self.rows.1
            && self.cols.0 < o.cols.1
            && o.cols.0 < self.cols.1
    }
}

/// One executed instance of an op, as a hazard names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    /// Pre-order op index ([`Kernel::ops`]).
    pub op: usize,
    pub op_name: String,
    pub wave: u32,
    /// Loop variables at this instance, outermost first.
    pub iter: Vec<(String, i64)>,
    /// Barriers this wave has passed before the instance.
    pub interval: usize,
    pub cluster: Option<String>,
    /// "read" or "write", for accesses.
    pub access: Option<String>,
    /// What is accessed: a shared region or a register, in words.
    pub target: Option<String>,
    /// The shared region, for shared-memory accesses.
    pub region: Option<Region>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Hazard {
    /// `access` conflicts with `pending`, which was issued before it but whose wave has not waited for
    /// it (on `queue`) before the point that orders the two.
    MissingWait {
        queue: WaitQueue,
        pending: Site,
        access: Site,
        instances: usize,
    },
    /// Two conflicting accesses (the first a write) that nothing orders: a barrier is missing between
    /// them (a write over data another wave may still read, or a read of data being written).
    MissingBarrier {
        first: Site,
        second: Site,
        instances: usize,
    },
    /// Barriers that can never all be matched: these waves wait forever.
    Deadlock { waiting: Vec<Site> },
}

/// A wait op with the count it has and the largest count that is still safe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitResult {
    pub op: usize,
    pub queue: WaitQueue,
    pub written: WaitCount,
    /// For `Auto`: the count chosen; otherwise the largest count that adds no hazard (others as written).
    pub computed: u32,
    /// The most ops outstanding on the queue at any instance (a count ≥ this waits for nothing).
    pub max_outstanding: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterInfo {
    pub label: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub kernel: String,
    pub schedule: String,
    pub waves: u32,
    pub params: Vec<(String, i64)>,
    pub block: Vec<i64>,
    pub head_iters: i64,
    pub trust_lds_latency: bool,
    pub unrolled: Vec<LoopUnroll>,
    pub clusters: Vec<ClusterInfo>,
    /// Per wave, per barrier interval: indices into `clusters` entered in that interval.
    pub timeline: Vec<Vec<Vec<usize>>>,
    /// Block barriers each wave executes (unequal counts pair extra barriers with other waves' exits).
    pub block_barriers: Vec<usize>,
    pub hazards: Vec<Hazard>,
    pub waits: Vec<WaitResult>,
}

impl Report {
    /// The counts for the kernel's `Auto` waits, by op index.
    pub fn auto_counts(&self) -> BTreeMap<usize, u32> {
        self.waits
            .iter()
            .filter(|w| w.written == WaitCount::Auto)
            .map(|w| (w.op, w.computed))
            .collect()
    }
}

/// Analyses one block of `kernel` (`opts.block`; [`analyze_launch`] analyses every block).
pub fn analyze(kernel: &Kernel, opts: &Options) -> Result<Report, AnalysisError> {
    check_params(kernel, &opts.params)?;
    let head = head_iters(kernel, opts);
    let mut opts = opts.clone();
    // Missing coordinates are 0; extra ones, or one outside its extent, name no block of the launch.
    let extents = grid_extents(kernel, &opts.params)?;
    let outside = opts.block.len() > extents.len()
        || opts
            .block
            .iter()
            .zip(&extents)
            .any(|(&b, &e)| !(0..e).contains(&b));
    if outside {
        return Err(AnalysisError::BlockOutsideGrid {
            block: opts.block.clone(),
            extents,
            dims: kernel.grid.extents.len(),
        });
    }
    opts.block.resize(kernel.grid.extents.len(), 0);
    let traces = trace::trace(kernel, &opts.params, &opts.block, head)?;
    Ok(report_of(kernel, &opts, head, &traces, true))
}

/// Whether some expression the trace evaluates (a loop bound, a condition, a shared view's slot,
/// row or column) reads an `i32` global ([`crate::Expr::Elem`]: a packed batch's offsets).
pub(crate) fn reads_elements(kernel: &Kernel) -> bool {
    let reads = std::cell::Cell::new(false);
    period::for_each_traced(
        &kernel.body,
        &mut |e| reads.set(reads.get() || e.reads_memory()),
        &mut |c| reads.set(reads.get() || c.reads_memory()),
    );
    reads.get()
}

/// Element `i` of any `i32` global as the analysis reads it, for a kernel whose traced expressions
/// read elements ([`reads_elements`]): `i · E`, `E` the one value after the kernel's parameters in
/// `params` (none: unknown, and the trace stops with [`AnalysisError::Eval`]). Offsets `b · E` are
/// a packed batch of sequences of `E` rows each, so a data-dependent trip count (a sequence's
/// length in key blocks) takes every value the sizes do; [`launch::representative_params`]
/// enumerates `E` as it does a size.
pub(crate) fn elem_value(kernel: &Kernel, params: &[i64], i: i64) -> Option<i64> {
    let e = *params.get(kernel.params.len())?;
    i.checked_mul(e)
}

/// The right number of parameters (one more, the element size of [`elem_value`], where the kernel
/// [`reads_elements`]), each a non-empty size.
fn check_params(kernel: &Kernel, params: &[i64]) -> Result<(), AnalysisError> {
    let extra = params.len() == kernel.params.len() + 1 && reads_elements(kernel);
    if params.len() != kernel.params.len() && !extra {
        return Err(AnalysisError::Params {
            kernel: kernel.name.clone(),
            expected: kernel.params.len(),
            got: params.len(),
        });
    }
    for (p, &value) in kernel.params.iter().zip(params) {
        if p.word && !(0..=i64::from(u32::MAX)).contains(&value) {
            return Err(AnalysisError::BadWord {
                name: p.name.clone(),
                value,
            });
        }
        if !p.word && value < 1 {
            return Err(AnalysisError::EmptyProblem {
                name: p.name.clone(),
                value,
            });
        }
    }
    Ok(())
}

/// The grid's extents at `params`, each at least 1 (an empty grid is refused).
pub(crate) fn grid_extents(kernel: &Kernel, params: &[i64]) -> Result<Vec<i64>, AnalysisError> {
    let env = Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let extents: Vec<i64> = kernel
        .grid
        .extents
        .iter()
        .map(|e| {
            e.eval(&env).ok_or_else(|| AnalysisError::Eval {
                op: 0,
                expr: e.to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(d) = extents.iter().position(|&x| x <= 0) {
        return Err(AnalysisError::EmptyGrid {
            dim: d,
            extent: kernel.grid.extents[d].to_string(),
            value: extents[d],
        });
    }
    Ok(extents)
}

/// Loop iterations kept at each end: as given, else 3 + the deepest shared ring.
fn head_iters(kernel: &Kernel, opts: &Options) -> i64 {
    let depth = kernel
        .shared
        .iter()
        .map(|s| s.count as i64)
        .max()
        .unwrap_or(1);
    opts.head_iters.unwrap_or(3 + depth).max(1)
}

/// The analysis of traced waves; without `detail`, written waits are reported as written (not with the
/// largest count that would still be safe, which costs a search per wait).
fn report_of(
    kernel: &Kernel,
    opts: &Options,
    head: i64,
    traces: &trace::Traces,
    detail: bool,
) -> Report {
    let order = order::Order::new(&traces.waves);
    let ctx = Ctx::new(traces, &order, opts.trust_lds_latency);
    let describe = report::Describer::new(kernel, traces, &order);

    let (hazards, waits) = if let Some(stuck) = &order.stuck {
        let waiting = stuck
            .waiting
            .iter()
            .map(|&(w, p)| describe.site(w, p))
            .collect();
        let waits = ctx
            .written
            .iter()
            .map(|(&op, &(queue, written))| {
                let n = match written {
                    WaitCount::Outstanding(n) => n,
                    WaitCount::Auto => 0,
                };
                WaitResult {
                    op,
                    queue,
                    written,
                    computed: n,
                    max_outstanding: n,
                }
            })
            .collect();
        (vec![Hazard::Deadlock { waiting }], waits)
    } else {
        let counts = resolve_auto(&ctx);
        let hazards = dedupe(ctx.races(&counts), &describe);
        let waits = ctx
            .written
            .iter()
            .map(|(&op, &(queue, written))| {
                let (computed, max_outstanding) = match written {
                    WaitCount::Auto => (counts[&op], ctx.largest_safe(op, &counts).1),
                    // The largest safe count of a written wait is advice; the hazards do not need it.
                    WaitCount::Outstanding(n) if !detail => (n, n),
                    WaitCount::Outstanding(_) => ctx.largest_safe(op, &counts),
                };
                WaitResult {
                    op,
                    queue,
                    written,
                    computed,
                    max_outstanding,
                }
            })
            .collect();
        (hazards, waits)
    };

    Report {
        kernel: kernel.name.clone(),
        schedule: kernel.schedule.name().to_string(),
        waves: kernel.waves,
        params: kernel
            .params
            .iter()
            .map(|p| p.name.clone())
            .zip(opts.params.iter().copied())
            .collect(),
        block: opts.block.clone(),
        head_iters: head,
        trust_lds_latency: opts.trust_lds_latency,
        unrolled: traces.unrolled.clone(),
        clusters: traces
            .clusters
            .iter()
            .map(|(label, kind)| ClusterInfo {
                label: label.clone(),
                kind: kind.clone(),
            })
            .collect(),
        timeline: report::timeline(traces, &order),
        block_barriers: order.block_barriers.clone(),
        hazards,
        waits,
    }
}

/// Chooses the `Auto` waits one at a time in op order, each as large as possible while the later ones
/// still wait for everything: each count is then the largest that lets no access before the next wait
/// see a load in flight, and the assignment as a whole adds no hazard.
fn resolve_auto(ctx: &Ctx) -> Counts {
    let mut counts = Counts::new();
    let autos: Vec<usize> = ctx
        .written
        .iter()
        .filter(|(_, (_, c))| *c == WaitCount::Auto)
        .map(|(&op, _)| op)
        .collect();
    for &op in &autos {
        counts.insert(op, 0);
    }
    for op in autos {
        let (n, _) = ctx.largest_safe(op, &counts);
        counts.insert(op, n);
    }
    counts
}

/// One hazard per (kind, ops involved), naming the first instance found and counting all.
fn dedupe(races: Vec<Race>, d: &report::Describer) -> Vec<Hazard> {
    let mut seen: HashMap<(u8, usize, usize), usize> = HashMap::new();
    let mut out: Vec<Hazard> = vec![];
    for r in races {
        let key = match r {
            Race::MissingWait {
                pending, access, ..
            } => (0, d.op(pending), d.op(access)),
            Race::MissingBarrier { a, b } => (1, d.op(a), d.op(b)),
        };
        if let Some(&i) = seen.get(&key) {
            match &mut out[i] {
                Hazard::MissingWait { instances, .. }
                | Hazard::MissingBarrier { instances, .. } => *instances += 1,
                Hazard::Deadlock { .. } => {}
            }
            continue;
        }
        seen.insert(key, out.len());
        out.push(match r {
            Race::MissingWait {
                queue,
                pending,
                access,
            } => Hazard::MissingWait {
                queue,
                pending: d.site(pending.0, pending.1),
                access: d.site(access.0, access.1),
                instances: 1,
            },
            Race::MissingBarrier { a, b } => Hazard::MissingBarrier {
                first: d.site(a.0, a.1),
                second: d.site(b.0, b.1),
                instances: 1,
            },
        });
    }
    out
}

/// Chooses every `Auto` wait's count for a kernel that runs with several parameter sets (or blocks):
/// the smallest count chosen over `runs`. A smaller count only waits for more, so the result is safe
/// for each run. Returns the counts and the kernel with them written in.
pub fn resolve_auto_waits(
    kernel: &Kernel,
    runs: &[Options],
) -> Result<(BTreeMap<usize, u32>, Kernel), AnalysisError> {
    let mut counts: BTreeMap<usize, u32> = BTreeMap::new();
    for opts in runs {
        for (op, n) in analyze(kernel, opts)?.auto_counts() {
            counts
                .entry(op)
                .and_modify(|c| *c = (*c).min(n))
                .or_insert(n);
        }
    }
    let k = apply_auto_waits(kernel, &counts);
    Ok((counts, k))
}

/// A copy of `kernel` with every `Auto` wait replaced by its count from `counts` (op index → count),
/// for lowerings that print literal counts. Autos missing from `counts` stay `Auto`.
pub fn apply_auto_waits(kernel: &Kernel, counts: &BTreeMap<usize, u32>) -> Kernel {
    fn walk(body: &mut [Stmt], next: &mut usize, counts: &BTreeMap<usize, u32>) {
        for s in body {
            match s {
                Stmt::Op { op, .. } => {
                    if let Op::Wait {
                        count: c @ WaitCount::Auto,
                        ..
                    } = op
                    {
                        if let Some(&n) = counts.get(next) {
                            *c = WaitCount::Outstanding(n);
                        }
                    }
                    *next += 1;
                }
                Stmt::For { body, .. }
                | Stmt::Cluster { body, .. }
                | Stmt::Staggered { body }
                | Stmt::LastArrival { body, .. } => walk(body, next, counts),
                Stmt::If { then, els, .. } => {
                    walk(then, next, counts);
                    walk(els, next, counts);
                }
                Stmt::Roles { producer, consumer } => {
                    walk(producer, next, counts);
                    walk(consumer, next, counts);
                }
            }
        }
    }
    let mut k = kernel.clone();
    walk(&mut k.body, &mut 0, counts);
    k
}
