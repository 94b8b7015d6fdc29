//! Happens-before between the waves of a block: barrier matching and vector clocks, and when each
//! asynchronous access completes.
//!
//! Barrier semantics, modelled as AMD hardware executes `s_barrier` (CDNA3 ISA reference, `S_BARRIER`):
//! the instruction carries no identity, so the k-th barrier a wave executes pairs with the k-th barrier
//! of every other wave, wherever in the program each one sits. That is exactly what makes the 8-wave
//! ping-pong's conditional stagger work (HipKittens E.1): the barrier warpgroup 1 executes inside
//! `if (warp_row == 1)` pairs with warpgroup 0's next unconditional barrier, holding group 1 one cluster
//! behind until group 0's closing conditional barrier re-aligns them. A wave that has ended no longer
//! holds a barrier back (our reading of `S_BARRIER` in AMD's ISA guides: it waits on the waves still
//! alive; not verified on hardware here), so it is treated as arrived
//! at every later instance. Warpgroup-scoped barriers (NVIDIA named barriers) are matched by count per
//! warpgroup in the same way. A barrier orders execution only: it does not wait for a wave's
//! outstanding loads (`s_barrier` is not `s_waitcnt`), which is why a load must be waited on by its own
//! wave *before* the barrier that publishes it.

use super::event::{Domain, EvKind, Event};
use crate::ir::WaitQueue;
use std::collections::{HashMap, VecDeque};

/// Where each wave stopped when the barriers could not all be matched.
#[derive(Debug, Clone)]
pub(crate) struct Stuck {
    /// (wave, event position of the barrier it waits at).
    pub waiting: Vec<(usize, usize)>,
}

pub(crate) struct Order {
    /// Per wave: (position of a barrier, clock after it). `clock[a]` = how many of wave a's events are
    /// known to have happened before.
    epochs: Vec<Vec<(usize, Vec<usize>)>>,
    pub stuck: Option<Stuck>,
    /// Per wave, the number of block barriers it executes.
    pub block_barriers: Vec<usize>,
}

impl Order {
    /// Simulates the barrier rendezvous of all waves.
    pub fn new(waves: &[Vec<Event>]) -> Order {
        let n = waves.len();
        let mut pc = vec![0usize; n];
        let mut clock = vec![vec![0usize; n]; n];
        let mut done = vec![false; n];
        let mut arrived: Vec<Option<(Domain, usize)>> = vec![None; n];
        let mut seen: Vec<HashMap<Domain, usize>> = vec![HashMap::new(); n];
        let mut epochs = vec![vec![]; n];
        let members = |d: Domain| -> Vec<usize> { d.members(n) };
        loop {
            let mut progress = false;
            for w in 0..n {
                if done[w] || arrived[w].is_some() {
                    continue;
                }
                while pc[w] < waves[w].len()
                    && !matches!(waves[w][pc[w]].kind, EvKind::Barrier { .. })
                {
                    pc[w] += 1;
                }
                progress = true;
                match waves[w].get(pc[w]).map(|e| &e.kind) {
                    Some(EvKind::Barrier { domain }) => {
                        let k = seen[w].entry(*domain).or_insert(0);
                        arrived[w] = Some((*domain, *k));
                        *k += 1;
                    }
                    _ => {
                        done[w] = true;
                        clock[w][w] = waves[w].len();
                    }
                }
            }
            let pending: Vec<(Domain, usize)> = arrived.iter().flatten().copied().collect();
            for inst in pending {
                let ms = members(inst.0);
                if !ms.iter().all(|&m| done[m] || arrived[m] == Some(inst)) {
                    continue;
                }
                let mut merged = vec![0usize; n];
                for &m in &ms {
                    let mut c = clock[m].clone();
                    if !done[m] {
                        c[m] = pc[m];
                    }
                    merged
                        .iter_mut()
                        .zip(&c)
                        .for_each(|(x, y)| *x = (*x).max(*y));
                }
                for &m in ms.iter().filter(|&&m| !done[m]) {
                    clock[m] = merged.clone();
                    epochs[m].push((pc[m], merged.clone()));
                    pc[m] += 1;
                    arrived[m] = None;
                }
                progress = true;
            }
            if done.iter().all(|&d| d) {
                break;
            }
            if !progress {
                let waiting = (0..n).filter(|&w| !done[w]).map(|w| (w, pc[w])).collect();
                let block_barriers = seen
                    .iter()
                    .map(|s| s.get(&Domain::Block).copied().unwrap_or(0))
                    .collect();
                return Order {
                    epochs,
                    stuck: Some(Stuck { waiting }),
                    block_barriers,
                };
            }
        }
        let block_barriers = seen
            .iter()
            .map(|s| s.get(&Domain::Block).copied().unwrap_or(0))
            .collect();
        Order {
            epochs,
            stuck: None,
            block_barriers,
        }
    }

    /// Does position `i` of wave `a` happen before position `j` of wave `b`?
    pub fn hb(&self, a: usize, i: usize, b: usize, j: usize) -> bool {
        if a == b {
            return i < j;
        }
        let e = &self.epochs[b];
        let k = e.partition_point(|(p, _)| *p < j);
        k > 0 && i < e[k - 1].1[a]
    }

    /// Number of barriers wave `w` has passed before position `j` (its barrier interval).
    pub fn interval(&self, w: usize, j: usize) -> usize {
        self.epochs[w].partition_point(|(p, _)| *p < j)
    }
}

/// For every event of one wave, the position at which it has completed: its own position for synchronous
/// accesses, the covering wait for queued ones (loads complete in issue order, HipKittens D.5: `vmcnt(n)`
/// lets all but the n most recent land), `None` when no wait ever covers it. `count_of` gives the count
/// each wait op runs with (as written, chosen for `Auto`, or a trial value).
pub(crate) fn completions(wave: &[Event], count_of: &dyn Fn(usize) -> u32) -> Vec<Option<usize>> {
    let mut done = vec![None; wave.len()];
    // One queue entry per op: its access and, for a shared→register load, its register write.
    let mut queues: HashMap<WaitQueue, VecDeque<Vec<usize>>> = HashMap::new();
    for (pos, e) in wave.iter().enumerate() {
        match &e.kind {
            EvKind::Mem { queue: None, .. } | EvKind::Reg { queue: None, .. } => {
                done[pos] = Some(pos)
            }
            EvKind::Mem { queue: Some(q), .. } => {
                queues.entry(*q).or_default().push_back(vec![pos])
            }
            EvKind::Reg { queue: Some(q), .. } => {
                let q = queues.entry(*q).or_default();
                match q.back_mut() {
                    Some(entry) if wave[entry[0]].op == e.op => entry.push(pos),
                    _ => q.push_back(vec![pos]),
                }
            }
            EvKind::Wait { queue, .. } => {
                let n = count_of(e.op) as usize;
                let q = queues.entry(*queue).or_default();
                while q.len() > n {
                    for p in q.pop_front().expect("non-empty") {
                        done[p] = Some(pos);
                    }
                }
            }
            EvKind::Barrier { .. } => {}
        }
    }
    done
}

/// The number of ops outstanding on `queue` at each instance of wait op `op`, the largest over waves.
pub(crate) fn max_outstanding(
    waves: &[Vec<Event>],
    op: usize,
    count_of: &dyn Fn(usize) -> u32,
) -> u32 {
    let mut best = 0;
    for wave in waves {
        let done = completions(wave, count_of);
        for (pos, e) in wave.iter().enumerate() {
            if let EvKind::Wait { queue, .. } = &e.kind {
                if e.op == op {
                    let outstanding = wave[..pos]
                        .iter()
                        .enumerate()
                        .filter(|(p, x)| {
                            matches!(&x.kind, EvKind::Mem { queue: Some(q), .. } if q == queue)
                                && done[*p].is_none_or(|d| d >= pos)
                        })
                        .count();
                    best = best.max(outstanding as u32);
                }
            }
        }
    }
    best
}
