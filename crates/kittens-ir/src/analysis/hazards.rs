//! Conflicting accesses that no wait or barrier orders, and the largest safe wait counts.

use super::event::{EvKind, Event};
use super::order::{completions, max_outstanding, Order};
use super::trace::Traces;
use crate::ir::{WaitCount, WaitQueue};
use std::collections::{BTreeMap, HashMap};

/// One unordered conflicting pair, by (wave, event position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Race {
    /// `pending` was issued before `access` is (program order, or a barrier orders the issues) but has
    /// not completed by then: its wave lacks a wait on `queue`.
    MissingWait {
        queue: WaitQueue,
        pending: (usize, usize),
        access: (usize, usize),
    },
    /// Neither access is ordered before the other, even by issue: nothing separates them.
    MissingBarrier {
        a: (usize, usize),
        b: (usize, usize),
    },
}

/// What can conflict: a slot of a shared ring, or one register of one wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Shared(u32, i64),
    Reg(usize, u32),
}

/// The access an event makes: (is a write, queue it completes through, place).
struct Access<'e> {
    write: bool,
    queue: Option<WaitQueue>,
    region: Option<&'e super::Region>,
    coop: Option<u32>,
}

fn access(e: &Event) -> Option<Access<'_>> {
    match &e.kind {
        EvKind::Mem {
            write,
            region,
            queue,
            coop,
        } => Some(Access {
            write: *write,
            queue: *queue,
            region: Some(region),
            coop: *coop,
        }),
        EvKind::Reg { write, queue, .. } => Some(Access {
            write: *write,
            queue: *queue,
            region: None,
            coop: None,
        }),
        _ => None,
    }
}

/// The analysis context that does not depend on wait counts.
pub(crate) struct Ctx<'a> {
    pub waves: &'a [Vec<Event>],
    pub order: &'a Order,
    /// Accesses grouped by what they touch.
    groups: Vec<Vec<(usize, usize)>>,
    /// Every wait op: its queue and count as written.
    pub written: BTreeMap<usize, (WaitQueue, WaitCount)>,
    /// See [`super::Options::trust_lds_latency`].
    trust_lds_latency: bool,
}

/// Counts that replace the written ones, by wait op index (`Auto` waits without one run with 0).
pub(crate) type Counts = HashMap<usize, u32>;

fn count_of(overrides: &Counts, op: usize, written: WaitCount) -> u32 {
    match (overrides.get(&op), written) {
        (Some(n), _) => *n,
        (None, WaitCount::Outstanding(n)) => n,
        (None, WaitCount::Auto) => 0,
    }
}

impl<'a> Ctx<'a> {
    pub fn new(traces: &'a Traces, order: &'a Order, trust_lds_latency: bool) -> Ctx<'a> {
        let mut by_key: BTreeMap<Key, Vec<(usize, usize)>> = BTreeMap::new();
        let mut written = BTreeMap::new();
        for (w, wave) in traces.waves.iter().enumerate() {
            for (p, e) in wave.iter().enumerate() {
                let key = match &e.kind {
                    EvKind::Mem { region, .. } => Key::Shared(region.buf.0, region.slot),
                    EvKind::Reg { reg, .. } => Key::Reg(w, reg.0),
                    EvKind::Wait { queue, count } => {
                        written.insert(e.op, (*queue, *count));
                        continue;
                    }
                    EvKind::Barrier { .. } => continue,
                };
                by_key.entry(key).or_default().push((w, p));
            }
        }
        let groups = by_key.into_values().collect();
        Ctx {
            waves: &traces.waves,
            order,
            groups,
            written,
            trust_lds_latency,
        }
    }

    /// The count wait `op` runs with.
    fn count(&self, op: usize, overrides: &Counts) -> u32 {
        let written = self.written.get(&op).map_or(WaitCount::Auto, |w| w.1);
        count_of(overrides, op, written)
    }

    fn completions(&self, overrides: &Counts) -> Vec<Vec<Option<usize>>> {
        self.waves
            .iter()
            .map(|w| completions(w, &|op| self.count(op, overrides)))
            .collect()
    }

    /// Every unordered conflicting pair under the given wait counts.
    pub fn races(&self, overrides: &Counts) -> Vec<Race> {
        let done = self.completions(overrides);
        let mut out = vec![];
        for g in &self.groups {
            for (n, &x) in g.iter().enumerate() {
                out.extend(g[n + 1..].iter().filter_map(|&y| self.race(x, y, &done)));
            }
        }
        out
    }

    fn race(
        &self,
        x: (usize, usize),
        y: (usize, usize),
        done: &[Vec<Option<usize>>],
    ) -> Option<Race> {
        let (ax, ay) = (
            access(&self.waves[x.0][x.1])?,
            access(&self.waves[y.0][y.1])?,
        );
        let overlap = match (ax.region, ay.region) {
            (Some(rx), Some(ry)) => rx.overlaps(ry),
            _ => true, // the same register of the same wave (grouped by key)
        };
        if !(ax.write || ay.write) || !overlap {
            return None;
        }
        let (ex, ey) = (&self.waves[x.0][x.1], &self.waves[y.0][y.1]);
        if ax.coop.is_some()
            && ax.coop == ay.coop
            && ex.op == ey.op
            && ex.iter == ey.iter
            && x.0 != y.0
        {
            return None; // two waves' parts of one cooperative copy
        }
        // Shared-memory instructions of one wave execute in order (and fill registers in order), so two
        // of them need no wait between each other; an async global→shared copy takes another path and
        // can pass them (LLVM's AMDGPU memory model orders direct-to-LDS loads only through vmcnt).
        let fifo = x.0 == y.0
            && ax.queue == Some(WaitQueue::Shared)
            && ay.queue == Some(WaitQueue::Shared);
        let end = |e: (usize, usize), me: &Access, other: &Access| {
            let lds_read_vs_copy = !me.write
                && me.queue == Some(WaitQueue::Shared)
                && other.write
                && other.queue == Some(WaitQueue::Async);
            if fifo || (self.trust_lds_latency && lds_read_vs_copy) {
                Some(e.1)
            } else {
                done[e.0][e.1]
            }
        };
        let hb = |a: (usize, usize), b: (usize, usize)| self.order.hb(a.0, a.1, b.0, b.1);
        let before =
            |a, b, me: &Access, other: &Access| end(a, me, other).is_some_and(|d| hb((a.0, d), b));
        if before(x, y, &ax, &ay) || before(y, x, &ay, &ax) {
            return None;
        }
        let issued_first =
            |q: Option<WaitQueue>| q.expect("a synchronous access issued first is ordered");
        Some(if hb(x, y) {
            Race::MissingWait {
                queue: issued_first(ax.queue),
                pending: x,
                access: y,
            }
        } else if hb(y, x) {
            Race::MissingWait {
                queue: issued_first(ay.queue),
                pending: y,
                access: x,
            }
        } else if ay.write && !ax.write {
            Race::MissingBarrier { a: y, b: x }
        } else {
            Race::MissingBarrier { a: x, b: y }
        })
    }

    /// The largest count for wait `op` (others as in `overrides`) that adds no race over waiting for
    /// everything, and the most ops ever outstanding there. Fewer outstanding ops only complete accesses
    /// earlier, so the race set shrinks monotonically as the count falls: a binary search is exact.
    pub fn largest_safe(&self, op: usize, overrides: &Counts) -> (u32, u32) {
        let mut with = overrides.clone();
        let hi = max_outstanding(self.waves, op, &|o| self.count(o, overrides));
        with.insert(op, 0);
        let floor = self.races(&with).len();
        let (mut lo, mut hi_ok) = (0u32, hi);
        // Invariant: `lo` is safe; the largest safe count lies in [lo, hi_ok].
        while lo < hi_ok {
            let mid = lo + (hi_ok - lo).div_ceil(2);
            with.insert(op, mid);
            if self.races(&with).len() <= floor {
                lo = mid;
            } else {
                hi_ok = mid - 1;
            }
        }
        (lo, hi)
    }
}
