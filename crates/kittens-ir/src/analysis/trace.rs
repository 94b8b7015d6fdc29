//! Symbolic execution of a kernel body for one wave: the straight-line sequence of memory effects, waits
//! and barriers that wave performs, with loop variables, wave and block coordinates substituted.
//!
//! Only effects on shared memory matter to the schedule analysis: global loads and stores touch memory no
//! other wave of the block synchronises on, and register ops are ordered by the compiler.

use super::event::{Domain, EvKind, Event};
use super::period::{self, LoopKey, Periodicity, Skip};
use super::{AnalysisError, Region};
use crate::expr::{Cond, Env, Expr, VarId};
use crate::ir::{Arg, Kernel, MmaOperand, Op, RegId, Scope, SharedView, Stmt, WaitQueue};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};

/// How a long loop is shortened (see [`super::Options::head_iters`]).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LoopUnroll {
    pub var: String,
    pub trip: i64,
    /// Iterations executed symbolically (the first `head`, then the last `trip - head - skipped`).
    pub kept: i64,
    pub skipped: i64,
    /// How the skipped iterations were shown to repeat the kept ones.
    pub proof: Periodicity,
}

pub(crate) struct Traces {
    pub waves: Vec<Vec<Event>>,
    /// Cluster labels with their kind ("compute"/"memory").
    pub clusters: Vec<(String, String)>,
    pub unrolled: Vec<LoopUnroll>,
    /// Per wave: (event position when the cluster was entered, cluster index).
    pub entries: Vec<Vec<(usize, usize)>>,
}

/// Upper bound on events per wave, so a mistaken parameter cannot exhaust memory.
const MAX_EVENTS: usize = 2_000_000;

struct Walker<'a> {
    k: &'a Kernel,
    params: &'a [i64],
    block: &'a [i64],
    wave: u32,
    vars: Vec<i64>,
    iter: Vec<(VarId, i64)>,
    cluster: Option<usize>,
    head: i64,
    period: i64,
    /// Registers some shared→register load fills (only their uses need tracking).
    tracked: &'a HashSet<RegId>,
    out: Vec<Event>,
    entries: Vec<(usize, usize)>,
    clusters: &'a mut Vec<(String, String)>,
    unrolled: &'a mut Vec<LoopUnroll>,
    /// Loop instances that must run in full.
    forbid: &'a HashSet<LoopKey>,
    /// Barriers executed so far per domain, skipped ones included (their ordinals in the full trace).
    barriers: Counters,
    skips: Vec<Skip>,
    /// Loop instances whose skipped iterations turned out not to repeat.
    nonperiodic: Vec<LoopKey>,
}

type Counters = HashMap<Domain, usize>;

/// Number of ops in a body, counted as [`Kernel::ops`] does (both branches of conditionals).
pub(crate) fn count_ops(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Op { .. } => 1,
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => count_ops(body),
            Stmt::If { then, els, .. } => count_ops(then) + count_ops(els),
            Stmt::Roles { producer, consumer } => count_ops(producer) + count_ops(consumer),
        })
        .sum()
}

impl Walker<'_> {
    fn env(&self) -> Env<'_> {
        Env {
            params: self.params,
            vars: &self.vars,
            block: self.block,
            wave: self.wave as i64,
        }
    }

    /// Element `i` of an `i32` global ([`Expr::Elem`]) as the analysis sees it:
    /// [`super::elem_value`] of the element size after the kernel's parameters, unknown without one.
    fn read(&self, i: i64) -> Option<i64> {
        super::elem_value(self.k, self.params, i)
    }

    fn eval(&self, e: &Expr, op: usize) -> Result<i64, AnalysisError> {
        e.eval_in(&self.env(), &|_, i| self.read(i))
            .ok_or_else(|| AnalysisError::Eval {
                op,
                expr: e.to_string(),
            })
    }

    fn cond(&self, c: &Cond, op: usize) -> Result<bool, AnalysisError> {
        c.eval_in(&self.env(), &|_, i| self.read(i))
            .ok_or_else(|| AnalysisError::Eval {
                op,
                expr: format!("{c:?}"),
            })
    }

    /// Walks `body` whose first op has index `idx`; returns the index after it.
    fn walk(&mut self, body: &[Stmt], mut idx: usize) -> Result<usize, AnalysisError> {
        for s in body {
            match s {
                Stmt::Op { op, .. } => {
                    self.op(op, idx)?;
                    idx += 1;
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    self.for_loop(*var, start, end, body, idx)?;
                    idx += count_ops(body);
                }
                Stmt::If { cond, then, els } => {
                    if self.cond(cond, idx)? {
                        self.walk(then, idx)?;
                    } else {
                        self.walk(els, idx + count_ops(then))?;
                    }
                    idx += count_ops(then) + count_ops(els);
                }
                Stmt::Cluster { kind, label, body } => {
                    let kind = format!("{kind:?}").to_lowercase();
                    let id = match self
                        .clusters
                        .iter()
                        .position(|(l, k)| *l == *label && *k == kind)
                    {
                        Some(i) => i,
                        None => {
                            self.clusters.push((label.clone(), kind));
                            self.clusters.len() - 1
                        }
                    };
                    let outer = self.cluster.replace(id);
                    self.entries.push((self.out.len(), id));
                    idx = self.walk(body, idx)?;
                    self.cluster = outer;
                }
                Stmt::Staggered { body } => idx = self.walk(body, idx)?,
                // Traced as the last arrival, which runs the body: its shared-memory effects are
                // the ones to order (global memory is not traced; the hand-off between blocks is
                // the interpreter's to model).
                Stmt::LastArrival { body, .. } => idx = self.walk(body, idx)?,
                Stmt::Roles { producer, consumer } => {
                    let producers = match self.k.schedule {
                        crate::ir::Schedule::ProducerConsumer { producers, .. } => producers,
                        _ => 0,
                    };
                    if self.wave / 4 < producers {
                        self.walk(producer, idx)?;
                    } else {
                        self.walk(consumer, idx + count_ops(producer))?;
                    }
                    idx += count_ops(producer) + count_ops(consumer);
                }
            }
        }
        Ok(idx)
    }

    /// Runs the first `head` iterations and a tail, skipping a multiple of `period` in between when the
    /// loop is longer than `2·head + period` and the skipped iterations provably repeat the kept ones
    /// ([`super::period`]); otherwise every iteration.
    fn for_loop(
        &mut self,
        var: VarId,
        start: &Expr,
        end: &Expr,
        body: &[Stmt],
        idx: usize,
    ) -> Result<(), AnalysisError> {
        let (s, e) = (self.eval(start, idx)?, self.eval(end, idx)?);
        let trip = e.saturating_sub(s).max(0);
        let key = LoopKey {
            op: idx,
            outer: self.iter.iter().map(|&(_, x)| x).collect(),
        };
        // Only loops whose bounds are the same for every wave are shortened: every wave must skip the
        // same barriers, or the count-matching of later barriers would shift.
        let uniform = !mentions_wave(start) && !mentions_wave(end);
        let (head, period) = (self.head, self.period);
        let skipped = if uniform && trip > 2 * head + period && !self.forbid.contains(&key) {
            (trip - 2 * head) / period * period
        } else {
            0
        };
        let proof = if period::body_is_periodic(body, var, period) {
            Periodicity::Program
        } else {
            Periodicity::Traced
        };
        let slot = var.0 as usize;
        if self.vars.len() <= slot {
            self.vars.resize(slot + 1, 0);
        }
        let saved = self.vars[slot];
        let depth = self.iter.len();
        // Barrier ordinals per domain when the skip starts and ends (skipped ones are counted too).
        // Iterations from `from` on are shown periodic (traced: compared with the one a period later).
        let from = match proof {
            Periodicity::Program => 0,
            Periodicity::Traced => (head - period).max(0),
        };
        let mut at_from: Option<Counters> = None;
        let (mut at_skip, mut after_skip): (Option<Counters>, Option<Counters>) = (None, None);
        // The last `period` iterations' traces, to compare each skipped one with the one a period later.
        let mut recent: VecDeque<Vec<Event>> = VecDeque::new();
        let mut i = 0;
        while i < trip {
            let skipping = i >= head && i < head + skipped;
            if i == from {
                at_from = Some(self.barriers.clone());
            }
            if skipping && at_skip.is_none() {
                at_skip = Some(self.barriers.clone());
            }
            if skipped > 0 && i == head + skipped && after_skip.is_none() {
                after_skip = Some(self.barriers.clone());
            }
            if skipping && proof == Periodicity::Program && i == head + period {
                // The rest of the skip repeats its first period: count its barriers and jump.
                let periods = ((head + skipped - i) / period) as usize;
                let start = at_skip.as_ref().expect("set when the skip starts");
                for (d, n) in self.barriers.iter_mut() {
                    *n += (*n - start.get(d).copied().unwrap_or(0)) * periods;
                }
                i = head + skipped;
                continue;
            }
            let mark = (self.out.len(), self.entries.len());
            self.vars[slot] = s + i;
            self.iter.push((var, s + i));
            self.walk(body, idx)?;
            self.iter.pop();
            if proof == Periodicity::Traced
                && skipped > 0
                && i >= from
                && i < head + skipped + period
            {
                let this = self.out[mark.0..].to_vec();
                if recent.len() == period as usize {
                    let old = recent.pop_front().expect("non-empty");
                    if !period::same_iteration(&old, &this, depth) {
                        // Not periodic: this trace is discarded and redone with the loop in full.
                        self.nonperiodic.push(key);
                        self.vars[slot] = saved;
                        return Ok(());
                    }
                }
                recent.push_back(this);
            }
            if skipping {
                self.out.truncate(mark.0);
                self.entries.truncate(mark.1);
            }
            i += 1;
        }
        self.vars[slot] = saved;
        if let (Some(verified), Some(start), Some(end)) = (at_from, at_skip, after_skip) {
            let name = self
                .k
                .vars
                .get(slot)
                .map_or(format!("v{}", var.0), |v| v.name.clone());
            let u = LoopUnroll {
                var: name,
                trip,
                kept: trip - skipped,
                skipped,
                proof,
            };
            if !self.unrolled.contains(&u) {
                self.unrolled.push(u);
            }
            for (&domain, &to) in &end {
                let from = start.get(&domain).copied().unwrap_or(0);
                if to > from {
                    self.skips.push(Skip {
                        key: key.clone(),
                        domain,
                        start: from,
                        count: to - from,
                        verified_from: verified.get(&domain).copied().unwrap_or(0),
                    });
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, op: usize, kind: EvKind) -> Result<(), AnalysisError> {
        if self.out.len() >= MAX_EVENTS {
            return Err(AnalysisError::TooLarge {
                wave: self.wave,
                events: MAX_EVENTS,
            });
        }
        self.out.push(Event {
            op,
            kind,
            iter: self.iter.clone(),
            cluster: self.cluster,
        });
        Ok(())
    }

    fn region(&self, v: &SharedView, rows: (i64, i64), op: usize) -> Result<Region, AnalysisError> {
        let decl = self
            .k
            .shared
            .get(v.buf.0 as usize)
            .ok_or(AnalysisError::NoSuchBuffer { op })?;
        let slot = self.eval(&v.index, op)?;
        if slot < 0 || slot >= decl.count as i64 {
            return Err(AnalysisError::SlotOutOfRange {
                op,
                buffer: decl.name.clone(),
                slot,
                count: decl.count,
            });
        }
        let (r0, c0) = (self.eval(&v.row0, op)?, self.eval(&v.col0, op)?);
        Ok(Region {
            buf: v.buf,
            slot,
            rows: (r0 + rows.0, r0 + rows.1),
            cols: (c0, c0 + v.cols as i64),
        })
    }

    fn op(&mut self, op: &Op, idx: usize) -> Result<(), AnalysisError> {
        let mem = |write, region, queue| EvKind::Mem {
            write,
            region,
            queue,
            coop: None,
        };
        match op {
            Op::LoadAsync { dst, scope, .. } => {
                // The waves of the scope split the copy, but how is the lowering's choice (a HipKittens
                // G::load gives each thread 16-byte chunks strided over the tile), so each wave's part
                // is taken to be anywhere in the view: sound for any split.
                let n = scope.waves(self.k.waves).max(1);
                let r = self.region(dst, (0, dst.rows as i64), idx)?;
                let coop = (n > 1).then_some(self.wave / n);
                self.push(
                    idx,
                    EvKind::Mem {
                        write: true,
                        region: r,
                        queue: Some(WaitQueue::Async),
                        coop,
                    },
                )?;
            }
            Op::LoadShared { src, dst } => {
                let r = self.region(src, (0, src.rows as i64), idx)?;
                self.push(idx, mem(false, r, Some(WaitQueue::Shared)))?;
                let kind = EvKind::Reg {
                    reg: *dst,
                    write: true,
                    queue: Some(WaitQueue::Shared),
                };
                return self.push(idx, kind);
            }
            Op::StoreShared { dst, .. } => {
                // AMD ds_write is counted by lgkmcnt like ds_read (HipKittens D.5).
                let r = self.region(dst, (0, dst.rows as i64), idx)?;
                self.push(idx, mem(true, r, Some(WaitQueue::Shared)))?;
            }
            Op::Mma { a, b, .. } => {
                for v in [a, b].into_iter().filter_map(|o| match o {
                    MmaOperand::Shared(v) => Some(v),
                    MmaOperand::Reg(_) => None,
                }) {
                    let r = self.region(v, (0, v.rows as i64), idx)?;
                    self.push(idx, mem(false, r, None))?;
                }
            }
            Op::Wait { queue, count } => self.push(
                idx,
                EvKind::Wait {
                    queue: *queue,
                    count: *count,
                },
            )?,
            Op::Barrier { scope } => {
                let domain = match scope {
                    Scope::Wave => return Ok(()),
                    Scope::WarpGroup => Domain::Group(self.wave / 4),
                    Scope::Block => Domain::Block,
                    Scope::Consumers => match self.k.schedule.consumer_waves() {
                        Some(c) => Domain::From(c.start),
                        None => Domain::Block,
                    },
                };
                *self.barriers.entry(domain).or_insert(0) += 1;
                self.push(idx, EvKind::Barrier { domain })?;
            }
            _ => {}
        }
        let (reads, writes) = reg_effects(op);
        for (reg, write) in reads
            .into_iter()
            .map(|r| (r, false))
            .chain(writes.into_iter().map(|r| (r, true)))
        {
            if self.tracked.contains(&reg) {
                self.push(
                    idx,
                    EvKind::Reg {
                        reg,
                        write,
                        queue: None,
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// The registers an op reads and writes (a private adapter over [`Op`]; a new op kind that touches
/// registers must be added here for the analysis to see it).
fn reg_effects(op: &Op) -> (Vec<RegId>, Vec<RegId>) {
    let operand = |o: &MmaOperand| match o {
        MmaOperand::Reg(r) => Some(*r),
        MmaOperand::Shared(_) => None,
    };
    match op {
        Op::LoadShared { dst, .. } | Op::LoadGlobal { dst, .. } | Op::Fill { dst, .. } => {
            (vec![], vec![*dst])
        }
        // The atomic add touches global memory only: a commutative reduction, which no block
        // orders against another (module docs: global memory is not traced).
        Op::StoreShared { src, .. } | Op::StoreGlobal { src, .. } | Op::AtomicAdd { src, .. } => {
            (vec![*src], vec![])
        }
        Op::Mma { d, a, b, c, .. } => (
            [operand(a), operand(b), *c].into_iter().flatten().collect(),
            vec![*d],
        ),
        Op::Map { dst, args, .. } => {
            let reads = args
                .iter()
                .filter_map(|a| match a {
                    Arg::Reg(r) | Arg::RowBcast(r) | Arg::ColBcast(r) => Some(*r),
                    Arg::Scalar(_) => None,
                })
                .collect();
            (reads, vec![*dst])
        }
        Op::Reduce { dst, src, acc, .. } => (
            [Some(*src), *acc].into_iter().flatten().collect(),
            vec![*dst],
        ),
        Op::Transpose { dst, src } | Op::SwapLayout { dst, src } => (vec![*src], vec![*dst]),
        Op::Mask { dst, .. } => (vec![*dst], vec![*dst]),
        Op::Alibi { dst, slope, .. } => (vec![*dst, *slope], vec![*dst]),
        Op::Random { dst, .. } => (vec![], vec![*dst]),
        _ => (vec![], vec![]),
    }
}

/// The traces of every wave of one block. Long loops are shortened where [`super::period`] proves it
/// exact and every wave of each barrier domain skips the same barrier instances; the waves are traced
/// again with a loop instance in full whenever one of those fails.
pub(crate) fn trace(
    k: &Kernel,
    params: &[i64],
    block: &[i64],
    head: i64,
) -> Result<Traces, AnalysisError> {
    let mut forbid = HashSet::new();
    loop {
        let (traces, bad) = trace_once(k, params, block, head, &forbid)?;
        if bad.is_empty() {
            return Ok(traces);
        }
        // Each round forbids at least one more loop instance, so this ends.
        forbid.extend(bad);
    }
}

/// One tracing of every wave; also returns the loop instances that must not be shortened after all.
fn trace_once(
    k: &Kernel,
    params: &[i64],
    block: &[i64],
    head: i64,
    forbid: &HashSet<LoopKey>,
) -> Result<(Traces, HashSet<LoopKey>), AnalysisError> {
    // The ring period: slot indices are loop counters modulo the ring sizes, so skipping a multiple of
    // the least common multiple of the ring sizes keeps every slot index where it was.
    let period = k.shared.iter().map(|s| s.count.max(1) as i64).fold(1, lcm);
    let (mut clusters, mut unrolled) = (vec![], vec![]);
    let mut tracked = HashSet::new();
    k.for_each_op(|r| {
        if let Op::LoadShared { dst, .. } = r.op {
            tracked.insert(*dst);
        }
    });
    let mut waves = Vec::with_capacity(k.waves as usize);
    let mut entries = Vec::with_capacity(k.waves as usize);
    let mut skips = Vec::with_capacity(k.waves as usize);
    let mut bad = HashSet::new();
    for wave in 0..k.waves {
        let mut w = Walker {
            k,
            params,
            block,
            wave,
            vars: vec![0; k.vars.len()],
            iter: vec![],
            cluster: None,
            head,
            period,
            tracked: &tracked,
            out: vec![],
            entries: vec![],
            clusters: &mut clusters,
            unrolled: &mut unrolled,
            forbid,
            barriers: Counters::new(),
            skips: vec![],
            nonperiodic: vec![],
        };
        w.walk(&k.body, 0)?;
        bad.extend(w.nonperiodic);
        waves.push(w.out);
        entries.push(w.entries);
        skips.push(w.skips);
    }
    bad.extend(inconsistent_skips(&skips));
    let traces = Traces {
        waves,
        clusters,
        unrolled,
        entries,
    };
    Ok((traces, bad))
}

/// Loop instances whose skipped barriers would change which barriers meet. Per domain, every member
/// wave must skip the same number of barriers in the same order of skips; where the waves start
/// skipping at different ordinals (the ping-pong's stagger puts one warpgroup a barrier ahead), the
/// later ones' barriers between the earliest start and their own must lie in iterations shown
/// periodic, so that the barrier the shortened trace pairs instead is a copy of the skipped one.
fn inconsistent_skips(skips: &[Vec<Skip>]) -> HashSet<LoopKey> {
    let n = skips.len() as u32;
    let mut domains: Vec<Domain> = skips.iter().flatten().map(|s| s.domain).collect();
    domains.sort();
    domains.dedup();
    let mut bad = HashSet::new();
    for d in domains {
        let members = d.members(n as usize);
        let of = |w: usize| -> Vec<&Skip> { skips[w].iter().filter(|s| s.domain == d).collect() };
        let first = of(members[0]);
        let consistent = members.iter().all(|&w| {
            let mine = of(w);
            mine.len() == first.len() && mine.iter().zip(&first).all(|(a, b)| a.count == b.count)
        }) && (0..first.len()).all(|j| {
            let earliest = members.iter().map(|&w| of(w)[j].start).min();
            let verified = members.iter().map(|&w| of(w)[j].verified_from).max();
            earliest >= verified
        });
        if !consistent {
            for &w in &members {
                bad.extend(of(w).into_iter().map(|s| s.key.clone()));
            }
        }
    }
    bad
}

fn mentions_wave(e: &Expr) -> bool {
    match e {
        Expr::Wave => true,
        Expr::Bin(_, a, b) => mentions_wave(a) || mentions_wave(b),
        Expr::Elem(_, i) => mentions_wave(i),
        _ => false,
    }
}

fn lcm(a: i64, b: i64) -> i64 {
    fn gcd(a: i64, b: i64) -> i64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
}
