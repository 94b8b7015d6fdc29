//! Every block of a launch, and every launch a lowering may see.
//!
//! A block's trace is a function of the values of the expressions the trace evaluates (loop bounds,
//! conditions, the slot, row and column of every shared view: [`period::for_each_traced`]). A grid
//! coordinate none of them reads cannot change the trace, so it is fixed at 0; the coordinates that are
//! read (a causal attention's loop bound on its query block, a guard on the ragged last tile) are
//! enumerated over the whole grid. Coordinates are the logical ones after the grid remap, which is a
//! bijection onto the grid (kittens-grid `remap`), so every remapped order reaches the same blocks.
//! Blocks whose traces are equal (up to loop-counter values) form one class, analysed once.
//!
//! A lowering does not know the problem sizes: [`verify`] analyses a family of sizes chosen from the
//! kernel ([`representative_params`]) so that every loop runs each trip count up to past the point
//! where loops are shortened, at and around every multiple of the tile sizes the schedule divides by.

use super::period;
use super::trace::{self, Traces};
use super::{AnalysisError, Hazard, Options, Report};
use crate::expr::{Cond, Expr};
use crate::ir::Kernel;
use serde::Serialize;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use thiserror::Error;

/// More blocks than this (over the grid dimensions the schedule reads) are sampled, not enumerated.
pub const MAX_TRACED_BLOCKS: u64 = 4096;

/// One class of blocks with the same schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockClass {
    /// Blocks of the grid in this class (counting the coordinates the schedule does not read).
    pub blocks: u64,
    /// The analysis of the first block of the class (`report.block`).
    pub report: Report,
}

/// The analysis of every distinct block of one launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchReport {
    pub kernel: String,
    pub params: Vec<(String, i64)>,
    /// Blocks the launch runs.
    pub blocks: u64,
    /// Grid dimensions some traced expression reads (the others cannot change the schedule).
    pub block_dims: Vec<u8>,
    /// Blocks traced: all of those dimensions' coordinates, or a sample when there are more than
    /// [`MAX_TRACED_BLOCKS`].
    pub traced_blocks: u64,
    /// Whether every block was covered (false: sampled).
    pub exhaustive: bool,
    pub classes: Vec<BlockClass>,
}

impl LaunchReport {
    /// Every hazard of every class, with the report (block, parameters) it was found in.
    pub fn hazards(&self) -> impl Iterator<Item = (&Report, &Hazard)> {
        self.classes
            .iter()
            .flat_map(|c| c.report.hazards.iter().map(move |h| (&c.report, h)))
    }
}

/// Why a kernel's schedule is refused ([`verify`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScheduleError {
    #[error("schedule analysis of `{kernel}` at {at}: {source}")]
    Analysis {
        kernel: String,
        at: String,
        #[source]
        source: AnalysisError,
    },
    #[error("`{kernel}` has a schedule hazard at {at} ({more} more found):\n  {hazard}")]
    Hazard {
        kernel: String,
        /// Parameters and block where it occurs.
        at: String,
        hazard: Box<Hazard>,
        /// Other hazards found (other ops, other blocks or sizes).
        more: usize,
    },
}

/// What [`verify`] analysed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    pub param_sets: usize,
    pub traced_blocks: u64,
    /// Distinct schedules analysed (over all sizes and blocks).
    pub classes: usize,
}

/// Traces already analysed, by shape: equal shapes give the same verdict.
#[derive(Default)]
struct Seen {
    by_hash: HashMap<u64, Vec<(Traces, usize)>>,
}

/// Analyses every distinct block of the launch with `opts.params` (`opts.block` is ignored).
pub fn analyze_launch(kernel: &Kernel, opts: &Options) -> Result<LaunchReport, AnalysisError> {
    launch(kernel, opts, &mut Seen::default(), &mut vec![], true)
}

/// `detail`: see [`super::report_of`].
fn launch(
    kernel: &Kernel,
    opts: &Options,
    seen: &mut Seen,
    reports: &mut Vec<Report>,
    detail: bool,
) -> Result<LaunchReport, AnalysisError> {
    super::check_params(kernel, &opts.params)?;
    let head = super::head_iters(kernel, opts);
    let extents = super::grid_extents(kernel, &opts.params)?;
    let blocks = extents
        .iter()
        .try_fold(1u64, |n, &x| n.checked_mul(x as u64))
        .ok_or(AnalysisError::TooManyBlocks)?;
    let dims = block_dims(kernel);
    let read: u64 = dims.iter().map(|&d| extents[d as usize] as u64).product();
    let exhaustive = read <= MAX_TRACED_BLOCKS;
    let axes: Vec<Vec<i64>> = (0..extents.len())
        .map(|d| {
            let e = extents[d];
            if !dims.contains(&(d as u8)) {
                vec![0]
            } else if exhaustive {
                (0..e).collect()
            } else {
                let mut v: Vec<i64> = [0, 1, 2, e / 2, e - 3, e - 2, e - 1]
                    .into_iter()
                    .filter(|&x| (0..e).contains(&x))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
        })
        .collect();
    let per_traced = blocks / read.max(1);
    let mut classes: Vec<BlockClass> = vec![];
    let mut index_of: HashMap<usize, usize> = HashMap::new();
    let mut traced = 0u64;
    for block in product(&axes) {
        traced += 1;
        let traces = trace::trace(kernel, &opts.params, &block, head)?;
        let r = match seen.find(&traces) {
            Some(r) => r,
            None => {
                let mut o = opts.clone();
                o.block = block.clone();
                let report = super::report_of(kernel, &o, head, &traces, detail);
                reports.push(report);
                seen.insert(traces, reports.len() - 1);
                reports.len() - 1
            }
        };
        match index_of.get(&r) {
            Some(&c) => classes[c].blocks += per_traced,
            None => {
                // The report of the first block with this schedule (in `verify`, possibly of an
                // earlier launch: the same schedule, so the same verdict).
                index_of.insert(r, classes.len());
                classes.push(BlockClass {
                    blocks: per_traced,
                    report: reports[r].clone(),
                });
            }
        }
    }
    Ok(LaunchReport {
        kernel: kernel.name.clone(),
        params: kernel
            .params
            .iter()
            .map(|p| p.name.clone())
            .zip(opts.params.iter().copied())
            .collect(),
        blocks,
        block_dims: dims.into_iter().collect(),
        traced_blocks: traced,
        exhaustive,
        classes,
    })
}

impl Seen {
    fn find(&self, t: &Traces) -> Option<usize> {
        self.by_hash
            .get(&shape_hash(t))?
            .iter()
            .find(|(u, _)| same_shape(t, u))
            .map(|&(_, r)| r)
    }
    fn insert(&mut self, t: Traces, report: usize) {
        self.by_hash
            .entry(shape_hash(&t))
            .or_default()
            .push((t, report));
    }
}

/// Iteration vectors of a wave renamed by order of first appearance: the analysis only ever asks
/// whether two events are in the same iteration, so this is all of them it sees.
fn iteration_ids(wave: &[super::event::Event]) -> Vec<u32> {
    let mut ids: HashMap<&[(crate::expr::VarId, i64)], u32> = HashMap::new();
    wave.iter()
        .map(|e| {
            let n = ids.len() as u32;
            *ids.entry(e.iter.as_slice()).or_insert(n)
        })
        .collect()
}

fn shape_hash(t: &Traces) -> u64 {
    let mut h = DefaultHasher::new();
    for w in &t.waves {
        w.len().hash(&mut h);
        for e in w {
            (e.op, &e.kind, e.cluster).hash(&mut h);
        }
    }
    h.finish()
}

/// Equal traces up to loop-counter values: the analysis gives them the same verdict.
fn same_shape(a: &Traces, b: &Traces) -> bool {
    a.waves.len() == b.waves.len()
        && a.clusters == b.clusters
        && a.waves.iter().zip(&b.waves).all(|(x, y)| {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(e, f)| e.op == f.op && e.kind == f.kind && e.cluster == f.cluster)
                && iteration_ids(x) == iteration_ids(y)
        })
}

fn product(axes: &[Vec<i64>]) -> Vec<Vec<i64>> {
    axes.iter().fold(vec![vec![]], |acc, axis| {
        acc.iter()
            .flat_map(|p| {
                axis.iter().map(move |&x| {
                    let mut q = p.clone();
                    q.push(x);
                    q
                })
            })
            .collect()
    })
}

/// Walks every traced expression (conditions as their operand expressions).
fn each_traced_expr(k: &Kernel, f: &mut dyn FnMut(&Expr)) {
    fn cond(c: &Cond, f: &mut dyn FnMut(&Expr)) {
        match c {
            Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => {
                f(a);
                f(b);
            }
            Cond::And(a, b) | Cond::Or(a, b) => {
                cond(a, f);
                cond(b, f);
            }
            Cond::Not(a) => cond(a, f),
        }
    }
    let exprs = std::cell::RefCell::new(vec![]);
    period::for_each_traced(
        &k.body,
        &mut |e| exprs.borrow_mut().push(e.clone()),
        &mut |c| cond(c, &mut |e| exprs.borrow_mut().push(e.clone())),
    );
    exprs.into_inner().iter().for_each(f);
}

fn leaves(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    match e {
        Expr::Bin(_, a, b) => {
            leaves(a, f);
            leaves(b, f);
        }
        _ => f(e),
    }
}

/// Grid dimensions some traced expression reads.
fn block_dims(k: &Kernel) -> BTreeSet<u8> {
    let mut dims = BTreeSet::new();
    each_traced_expr(k, &mut |e| {
        leaves(e, &mut |l| {
            if let Expr::Block(d) = l {
                dims.insert(*d);
            }
        })
    });
    dims.retain(|&d| (d as usize) < k.grid.extents.len());
    dims
}

/// The granularities at which sizes and grid coordinates enter an expression: every constant `c ≥ 2`
/// that divides, takes the remainder of, or multiplies a subexpression reading a parameter or a grid
/// coordinate (`ceil_div(k, 64)` → 64; `(row + 1)·32 ≤ m` → 32).
fn units(e: &Expr, out: &mut BTreeSet<i64>) {
    fn sized(e: &Expr) -> bool {
        match e {
            Expr::Param(_) | Expr::Block(_) | Expr::Elem(..) => true,
            Expr::Bin(_, a, b) => sized(a) || sized(b),
            _ => false,
        }
    }
    if let Expr::Bin(op, a, b) = e {
        use crate::expr::BinOp::{CeilDiv, Div, Mul, Rem};
        if matches!(op, Div | CeilDiv | Rem | Mul) {
            if let (Some(c), true) = (b.as_const(), sized(a)) {
                if c >= 2 {
                    out.insert(c);
                }
            }
        }
        if *op == Mul {
            if let (Some(c), true) = (a.as_const(), sized(b)) {
                if c >= 2 {
                    out.insert(c);
                }
            }
        }
        units(a, out);
        units(b, out);
    }
}

/// Parameter sizes that exercise the schedule of `k` (see [`verify`]).
///
/// Parameters no traced expression reads (nor the extent of a grid dimension one reads) cannot change
/// any block's schedule: they are 1. The others take 1 and `n·u − 1, n·u, n·u + 1` for
/// `n = 1..=2h + P + 2` and every granularity `u` of those expressions ([`units`]; 1 when there is
/// none), `h` the default kept head and `P` the ring period: every loop bound `ceil(size / u)` then
/// takes each trip count from 1 to past `2h + P` (where shortening starts), with the size on, just
/// below and just above a tile boundary. Several such parameters vary together (all equal) and one at
/// a time (the others at the middle value); their full product when it has at most 256 sets. A kernel
/// whose traced expressions read elements gets one more value per set, the element size `E` of
/// `super::elem_value`, enumerated the same way.
pub fn representative_params(k: &Kernel) -> Vec<Vec<i64>> {
    let dims = block_dims(k);
    let mut used = BTreeSet::new();
    let mut unit = BTreeSet::new();
    let mut note = |e: &Expr| {
        units(e, &mut unit);
        leaves(e, &mut |l| {
            if let Expr::Param(p) = l {
                used.insert(p.0 as usize);
            }
        })
    };
    each_traced_expr(k, &mut note);
    for &d in &dims {
        note(&k.grid.extents[d as usize]);
    }
    used.retain(|&p| p < k.params.len());
    // Element reads take one more size, `E` (`super::elem_value`), enumerated as a parameter.
    let extra = usize::from(super::reads_elements(k));
    if extra == 1 {
        used.insert(k.params.len());
    }
    if unit.is_empty() {
        unit.insert(1);
    }
    let (h, p) = (super::head_iters(k, &Options::default()), ring_period(k));
    let n_max = 2 * h + p + 2;
    let mut values: Vec<i64> = std::iter::once(1)
        .chain(
            unit.iter()
                .flat_map(|&u| (1..=n_max).flat_map(move |n| [n * u - 1, n * u, n * u + 1])),
        )
        .filter(|&v| v >= 1)
        .collect();
    values.sort_unstable();
    values.dedup();
    let base = vec![1i64; k.params.len() + extra];
    let used: Vec<usize> = used.into_iter().collect();
    let with = |assign: &[(usize, i64)]| {
        let mut v = base.clone();
        for &(i, x) in assign {
            v[i] = x;
        }
        v
    };
    let mut sets: Vec<Vec<i64>> = match used.len() {
        0 => vec![base.clone()],
        n if (values.len() as u64)
            .checked_pow(n as u32)
            .is_some_and(|c| c <= 256) =>
        {
            product(&vec![values.clone(); n])
                .into_iter()
                .map(|vs| with(&used.iter().copied().zip(vs).collect::<Vec<_>>()))
                .collect()
        }
        _ => {
            let mid = values[values.len() / 2];
            let mut s: Vec<Vec<i64>> = values
                .iter()
                .map(|&v| with(&used.iter().map(|&i| (i, v)).collect::<Vec<_>>()))
                .collect();
            for &i in &used {
                for &v in &values {
                    let mut a: Vec<(usize, i64)> = used.iter().map(|&j| (j, mid)).collect();
                    a.retain(|&(j, _)| j != i);
                    a.push((i, v));
                    s.push(with(&a));
                }
            }
            s
        }
    };
    sets.sort();
    sets.dedup();
    sets
}

fn ring_period(k: &Kernel) -> i64 {
    fn gcd(a: i64, b: i64) -> i64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    k.shared
        .iter()
        .map(|s| s.count.max(1) as i64)
        .fold(1, |a, b| a / gcd(a, b) * b)
}

/// The schedule check every lowering runs first: analyses every block class of every launch in
/// [`representative_params`] and refuses the kernel on the first hazard (or deadlock), naming it with
/// the sizes and block where it occurs.
pub fn verify(kernel: &Kernel) -> Result<Verified, ScheduleError> {
    let mut seen = Seen::default();
    let mut reports = vec![];
    let sets = representative_params(kernel);
    let mut traced = 0;
    for params in &sets {
        let at = |block: &[i64]| {
            let mut ps: Vec<String> = kernel
                .params
                .iter()
                .zip(params)
                .map(|(p, v)| format!("{}={v}", p.name))
                .collect();
            if let Some(e) = params.get(kernel.params.len()) {
                ps.push(format!("elements i*{e}"));
            }
            format!("{} block {block:?}", ps.join(" "))
        };
        let opts = Options {
            params: params.clone(),
            ..Options::default()
        };
        let r = launch(kernel, &opts, &mut seen, &mut reports, false).map_err(|source| {
            ScheduleError::Analysis {
                kernel: kernel.name.clone(),
                at: at(&[]),
                source,
            }
        })?;
        traced += r.traced_blocks;
        let found: Vec<(&Report, &Hazard)> = r.hazards().collect();
        if let Some(&(rep, h)) = found.first() {
            return Err(ScheduleError::Hazard {
                kernel: kernel.name.clone(),
                at: at(&rep.block),
                hazard: Box::new(h.clone()),
                more: found.len() - 1,
            });
        }
    }
    Ok(Verified {
        param_sets: sets.len(),
        traced_blocks: traced,
        classes: reports.len(),
    })
}
