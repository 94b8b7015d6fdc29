//! Conflicting shared-memory accesses that no wait or barrier orders, and the largest safe wait counts.

use super::order::{completions, max_outstanding, Order};
use super::trace::{EvKind, Event, Traces};
use crate::ir::{WaitCount, WaitQueue};
use std::collections::{BTreeMap, HashMap};

/// One unordered conflicting pair, by (wave, event position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Race {
    /// `pending` was issued before `access` is (a wait or barrier orders the issues) but has not
    /// completed by then: its wave lacks a wait on `queue`.
    MissingWait {
        queue: WaitQueue,
        pending: (usize, usize),
        access: (usize, usize),
    },
    /// Neither access is ordered before the other, even by issue: nothing separates them.
    MissingBarrier { a: (usize, usize), b: (usize, usize) },
}

/// The analysis context that does not depend on wait counts.
pub(crate) struct Ctx<'a> {
    pub waves: &'a [Vec<Event>],
    pub order: &'a Order,
    /// Shared accesses grouped by (buffer, slot).
    groups: Vec<Vec<(usize, usize)>>,
    /// Every wait op: its queue and count as written.
    pub written: BTreeMap<usize, (WaitQueue, WaitCount)>,
}

/// Count of wait op `op` as written (`Auto` reads `overrides`, default 0; an override wins).
pub(crate) type Counts = HashMap<usize, u32>;

fn count_of(overrides: &Counts, op: usize, written: WaitCount) -> u32 {
    match (overrides.get(&op), written) {
        (Some(n), _) => *n,
        (None, WaitCount::Outstanding(n)) => n,
        (None, WaitCount::Auto) => 0,
    }
}

impl<'a> Ctx<'a> {
    pub fn new(traces: &'a Traces, order: &'a Order) -> Ctx<'a> {
        let mut by_key: HashMap<(u32, i64), Vec<(usize, usize)>> = HashMap::new();
        for (w, wave) in traces.waves.iter().enumerate() {
            for (p, e) in wave.iter().enumerate() {
                if let EvKind::Mem { region, .. } = &e.kind {
                    by_key.entry((region.buf.0, region.slot)).or_default().push((w, p));
                }
            }
        }
        let mut groups: Vec<_> = by_key.into_iter().collect();
        groups.sort_by_key(|(k, _)| *k);
        let written = traces
            .waves
            .iter()
            .flatten()
            .filter_map(|e| match e.kind {
                EvKind::Wait { queue, count } => Some((e.op, (queue, count))),
                _ => None,
            })
            .collect();
        let groups = groups.into_iter().map(|(_, v)| v).collect();
        Ctx {
            waves: &traces.waves,
            order,
            groups,
            written,
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
                for &y in &g[n + 1..] {
                    if let Some(r) = self.race(x, y, &done) {
                        out.push(r);
                    }
                }
            }
        }
        out
    }

    fn race(&self, x: (usize, usize), y: (usize, usize), done: &[Vec<Option<usize>>]) -> Option<Race> {
        let (ex, ey) = (&self.waves[x.0][x.1], &self.waves[y.0][y.1]);
        let (
            EvKind::Mem {
                write: wx,
                region: rx,
                queue: qx,
            },
            EvKind::Mem {
                write: wy,
                region: ry,
                queue: qy,
            },
        ) = (&ex.kind, &ey.kind)
        else {
            return None;
        };
        if !(*wx || *wy) || !rx.overlaps(ry) {
            return None;
        }
        // Shared-memory instructions of one wave execute in order (the LDS queue is FIFO), so two of them
        // need no wait between each other; async global→shared copies take another path.
        let fifo = x.0 == y.0 && *qx == Some(WaitQueue::Shared) && *qy == Some(WaitQueue::Shared);
        let hb = |a: (usize, usize), b: (usize, usize)| self.order.hb(a.0, a.1, b.0, b.1);
        let end = |e: (usize, usize)| if fifo { Some(e.1) } else { done[e.0][e.1] };
        let before = |a: (usize, usize), b: (usize, usize)| end(a).is_some_and(|d| hb((a.0, d), b));
        if before(x, y) || before(y, x) {
            return None;
        }
        Some(if hb(x, y) {
            MissingWait {
                queue: qx.expect("a synchronous access issued first would be ordered"),
                pending: x,
                access: y,
            }
        } else if hb(y, x) {
            MissingWait {
                queue: qy.expect("a synchronous access issued first would be ordered"),
                pending: y,
                access: x,
            }
        } else if *wy && !*wx {
            MissingBarrier { a: y, b: x }
        } else {
            MissingBarrier { a: x, b: y }
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
        // Invariant: `lo` is safe; find the largest safe in [lo, hi_ok].
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

use Race::{MissingBarrier, MissingWait};
