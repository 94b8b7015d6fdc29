//! Naming events for people: op sites, the waves × barrier-interval timeline, and the text report.

use super::event::EvKind;
use super::order::Order;
use super::trace::Traces;
use super::{Hazard, Region, Report, Site, WaitResult};
use crate::ir::{Kernel, WaitCount, WaitQueue};
use std::fmt;

pub(crate) struct Describer<'a> {
    k: &'a Kernel,
    traces: &'a Traces,
    order: &'a Order,
    names: Vec<String>,
}

impl<'a> Describer<'a> {
    pub fn new(k: &'a Kernel, traces: &'a Traces, order: &'a Order) -> Describer<'a> {
        let mut names = vec![String::new(); super::trace::count_ops(&k.body)];
        k.for_each_op(|r| names[r.index] = r.op.name());
        Describer {
            k,
            traces,
            order,
            names,
        }
    }

    pub fn op(&self, at: (usize, usize)) -> usize {
        self.traces.waves[at.0][at.1].op
    }

    pub fn region(&self, r: &Region) -> String {
        let name = self
            .k
            .shared
            .get(r.buf.0 as usize)
            .map_or("?", |s| s.name.as_str());
        format!(
            "{name}[{}] rows {}..{} cols {}..{}",
            r.slot, r.rows.0, r.rows.1, r.cols.0, r.cols.1
        )
    }

    pub fn site(&self, wave: usize, pos: usize) -> Site {
        let e = &self.traces.waves[wave][pos];
        let var = |v: crate::expr::VarId| {
            self.k
                .vars
                .get(v.0 as usize)
                .map_or(format!("v{}", v.0), |d| d.name.clone())
        };
        let rw = |w: bool| Some(if w { "write" } else { "read" }.to_string());
        let (access, target, region) = match &e.kind {
            EvKind::Mem { write, region, .. } => {
                (rw(*write), Some(self.region(region)), Some(*region))
            }
            EvKind::Reg { write, reg, .. } => {
                let name = self
                    .k
                    .regs
                    .get(reg.0 as usize)
                    .map_or("?", |r| r.name.as_str());
                (rw(*write), Some(format!("register {name}")), None)
            }
            _ => (None, None, None),
        };
        Site {
            op: e.op,
            op_name: self.names.get(e.op).cloned().unwrap_or_default(),
            wave: wave as u32,
            iter: e.iter.iter().map(|&(v, x)| (var(v), x)).collect(),
            interval: self.order.interval(wave, pos),
            cluster: e.cluster.map(|c| self.traces.clusters[c].0.clone()),
            access,
            target,
            region,
        }
    }
}

/// Per wave, per barrier interval, the clusters entered in it.
pub(crate) fn timeline(traces: &Traces, order: &Order) -> Vec<Vec<Vec<usize>>> {
    traces
        .entries
        .iter()
        .enumerate()
        .map(|(w, entries)| {
            let mut row: Vec<Vec<usize>> = vec![];
            for &(pos, c) in entries {
                let i = order.interval(w, pos);
                if row.len() <= i {
                    row.resize(i + 1, vec![]);
                }
                if !row[i].contains(&c) {
                    row[i].push(c);
                }
            }
            row
        })
        .collect()
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op #{} {} (wave {}", self.op, self.op_name, self.wave)?;
        for (v, x) in &self.iter {
            write!(f, ", {v}={x}")?;
        }
        write!(f, ", after {} barriers", self.interval)?;
        if let Some(c) = &self.cluster {
            write!(f, ", cluster {c}")?;
        }
        write!(f, ")")?;
        if let (Some(rw), Some(what)) = (&self.access, &self.target) {
            write!(f, " {rw}s {what}")?;
        }
        Ok(())
    }
}

fn queue_name(q: WaitQueue) -> &'static str {
    match q {
        WaitQueue::Async => "async (vmcnt)",
        WaitQueue::Shared => "shared (lgkmcnt)",
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hazard::MissingWait { queue, pending, access, instances } => write!(
                f,
                "missing wait on the {} queue: {pending}\n    is not complete when {access}\n    ({instances} instance(s))",
                queue_name(*queue)
            ),
            Hazard::MissingBarrier { first, second, instances } => write!(
                f,
                "missing barrier: {first}\n    races with {second}\n    ({instances} instance(s))"
            ),
            Hazard::Deadlock { waiting } => {
                write!(f, "deadlock: barriers cannot be matched; waiting:")?;
                waiting.iter().try_for_each(|s| write!(f, "\n    {s}"))
            }
        }
    }
}

impl fmt::Display for WaitResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let written = match self.written {
            WaitCount::Outstanding(n) => n.to_string(),
            WaitCount::Auto => "auto".to_string(),
        };
        write!(
            f,
            "op #{:<4} {:<17} written {:>4}  computed {:>3}",
            self.op,
            queue_name(self.queue),
            written,
            self.computed
        )?;
        if self.computed >= self.max_outstanding && self.written != WaitCount::Auto {
            write!(
                f,
                "  (never more than {} outstanding: the wait is redundant)",
                self.max_outstanding
            )?;
        }
        Ok(())
    }
}

/// Columns of the timeline shown in text; JSON has all of them.
const SHOWN_INTERVALS: usize = 24;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        writeln!(
            f,
            "kernel {} ({}, {} waves), {}",
            self.kernel,
            self.schedule,
            self.waves,
            params.join(" ")
        )?;
        for u in &self.unrolled {
            let proof = match u.proof {
                super::Periodicity::Program => {
                    "the body reads the counter only modulo the ring period"
                }
                super::Periodicity::Traced => {
                    "each skipped iteration traced, equal to the one a period later"
                }
            };
            writeln!(
                f,
                "loop {}: {} iterations, {} analysed ({} skipped: {proof}; bound h = {})",
                u.var, u.trip, u.kept, u.skipped, self.head_iters
            )?;
        }
        let intervals = self.timeline.iter().map(Vec::len).max().unwrap_or(0);
        writeln!(
            f,
            "\nschedule: clusters per wave (columns = barrier intervals{})",
            if intervals > SHOWN_INTERVALS {
                format!(", first {SHOWN_INTERVALS} of {intervals}")
            } else {
                String::new()
            }
        )?;
        // Cells name clusters by id (kind initial + index: `M0` memory, `C1` compute); a legend follows.
        let id = |c: usize| {
            format!(
                "{}{c}",
                if self.clusters[c].kind == "compute" {
                    'C'
                } else {
                    'M'
                }
            )
        };
        let cell = |cs: &Vec<usize>| -> String {
            if cs.is_empty() {
                return ".".into();
            }
            cs.iter().map(|&c| id(c)).collect::<Vec<_>>().join("+")
        };
        let width = self
            .timeline
            .iter()
            .flatten()
            .map(|c| cell(c).chars().count())
            .max()
            .unwrap_or(1)
            .max(2);
        for (w, row) in self.timeline.iter().enumerate() {
            write!(f, "  wave {w:<2}")?;
            for i in 0..intervals.min(SHOWN_INTERVALS) {
                write!(f, " {:<width$}", row.get(i).map_or(".".into(), cell))?;
            }
            writeln!(f)?;
        }
        for (c, info) in self.clusters.iter().enumerate() {
            writeln!(f, "  {:<4} {} ({})", id(c), info.label, info.kind)?;
        }
        if self
            .block_barriers
            .iter()
            .any(|&b| b != self.block_barriers[0])
        {
            writeln!(
                f,
                "  block barriers per wave differ: {:?} (extra ones pair with other waves' exits)",
                self.block_barriers
            )?;
        }
        writeln!(f)?;
        if self.hazards.is_empty() {
            writeln!(f, "no hazards")?;
        } else {
            writeln!(f, "{} hazard(s):", self.hazards.len())?;
            for h in &self.hazards {
                writeln!(f, "  {h}")?;
            }
        }
        if !self.waits.is_empty() {
            writeln!(f, "\nwaits (counts in ops outstanding per wave):")?;
            for w in &self.waits {
                writeln!(f, "  {w}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for super::LaunchReport {
    /// The first block's report in full, then every class of blocks with its hazards.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(first) = self.classes.first() {
            write!(f, "{}", first.report)?;
        }
        let dims = if self.block_dims.is_empty() {
            "no grid coordinate".to_string()
        } else {
            format!("grid dimension(s) {:?}", self.block_dims)
        };
        writeln!(
            f,
            "\nblocks: {} in the grid; the schedule reads {dims}; {} traced{}, {} distinct schedule(s):",
            self.blocks,
            self.traced_blocks,
            if self.exhaustive {
                ""
            } else {
                " (a sample: too many to enumerate)"
            },
            self.classes.len()
        )?;
        for c in &self.classes {
            let r = &c.report;
            let loops: Vec<String> = r
                .unrolled
                .iter()
                .map(|u| format!("{} {} steps", u.var, u.trip))
                .collect();
            write!(f, "  block {:?} ({} block(s)", r.block, c.blocks)?;
            if !loops.is_empty() {
                write!(f, ", {}", loops.join(", "))?;
            }
            if r.hazards.is_empty() {
                writeln!(f, "): no hazards")?;
            } else {
                writeln!(f, "): {} hazard(s)", r.hazards.len())?;
                for h in &r.hazards {
                    writeln!(f, "    {h}")?;
                }
            }
        }
        Ok(())
    }
}
