//! Commit groups and their waits in the sm_90a lowering (`lower.rs`): which `wgmma` groups may still
//! be in flight when an op touches their registers, and how few of them it waits for.
//!
//! Groups retire in commit order (PTX ISA §9.7.15.7.3 wgmma.wait_group: "wait until N or fewer of the
//! most recent groups are pending"), so an op on the registers of the `g`-th oldest listed group
//! waits with `wait_group(len − 1 − g)` and leaves the newer ones running: attention's softmax on
//! the scores of one key block runs while the previous block's P·V is still on the tensor cores.
//! The list may hold groups that already retired (a `wait_group 1` does not remove them): the waits
//! it gives are then longer than needed, never shorter.

use std::collections::BTreeSet;

use kittens_ir::{MmaOperand, Op, RegId, Stmt};

use super::emit::CudaLowerError;
use super::emit::{cname, Emit, Role};

/// Not a register: the marker a group holds when one of its `wgmma`s reads a shared tile the
/// consumers write themselves (`Emit::owned`), so that a store into such a tile, or a barrier
/// before others store into it, waits for those groups alone and not for the chains on the
/// producer's slots (the backward's dV and dK products stay in flight over dSᵀ's store).
pub(super) const OWNED_READ: RegId = RegId(u32::MAX);

/// Whether `next` continues the commit group of `op`: both `mma`, on the same accumulator (a chain
/// over K), with the same register A (the halves of one product), or both from shared memory over
/// the same B slot (the row slices of one block: the 256-row GEMM block's two chains per K step,
/// whose results are all read only after the loop). Other consecutive `mma`s are groups of their
/// own, so that each can be waited for alone (attention's Q·Kᵀ of one key block beside P·V of the
/// previous one).
pub(super) fn chained(op: &Op, next: &Op) -> bool {
    match (op, next) {
        (
            Op::Mma {
                d: d0,
                a: a0,
                b: b0,
                ..
            },
            Op::Mma {
                d: d1,
                a: a1,
                b: b1,
                ..
            },
        ) => {
            d0 == d1
                || matches!((a0, a1), (MmaOperand::Reg(x), MmaOperand::Reg(y)) if x == y)
                || matches!(
                    (a0, a1, b0, b1),
                    (
                        MmaOperand::Shared(_),
                        MmaOperand::Shared(_),
                        MmaOperand::Shared(x),
                        MmaOperand::Shared(y),
                    ) if x.buf == y.buf && x.index == y.index
                )
        }
        _ => false,
    }
}

/// Whether any statement reads a shared `mma` operand.
pub(super) fn reads_shared(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Op {
            op: Op::Mma { a, b, .. },
            ..
        } => [a, b].iter().any(|o| matches!(o, MmaOperand::Shared(_))),
        Stmt::For { body, .. }
        | Stmt::Cluster { body, .. }
        | Stmt::Staggered { body }
        | Stmt::LastArrival { body, .. } => reads_shared(body),
        Stmt::If { then, els, .. } => reads_shared(then) || reads_shared(els),
        Stmt::Op { .. } | Stmt::Roles { .. } => false,
    })
}

/// Marks in `out` (per shared ring) the rings a shared `mma` operand of `body` reads.
pub(super) fn rings_read(body: &[Stmt], out: &mut [bool]) {
    for s in body {
        match s {
            Stmt::Op {
                op: Op::Mma { a, b, .. },
                ..
            } => {
                for o in [a, b] {
                    if let MmaOperand::Shared(v) = o {
                        out[v.buf.0 as usize] = true;
                    }
                }
            }
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => rings_read(body, out),
            Stmt::If { then, els, .. } => {
                rings_read(then, out);
                rings_read(els, out)
            }
            Stmt::Op { .. } | Stmt::Roles { .. } => {}
        }
    }
}

/// The registers the ops of `body` touch, recursively.
pub(super) fn stmt_regs(body: &[Stmt], out: &mut Vec<RegId>) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => out.extend(op.regs()),
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => stmt_regs(body, out),
            Stmt::If { then, els, .. } => {
                stmt_regs(then, out);
                stmt_regs(els, out)
            }
            Stmt::Roles { .. } => {}
        }
    }
}

/// The commit groups that may be in flight at a loop's head, when emission can tell
/// ([`Emit::loop_head`]).
pub(super) struct Head {
    groups: Option<Vec<BTreeSet<RegId>>>,
    /// Fewest groups committed since the last barrier, over the entry and the back edge.
    since_barrier: usize,
}

impl Emit<'_> {
    /// The groups in flight at the head of a loop over `body`: those on entry, merged with what an
    /// iteration that starts from them leaves at its back edge, until that no longer changes (a
    /// few trial emissions of the body, thrown away). A loop that leaves the last step's products
    /// on the tensor cores (the backward's dK chain) then lets the next step's register work that
    /// does not touch them — loading the statistics — start before they retire, where an unknown
    /// head would wait for every group first.
    pub(super) fn loop_head(&self, body: &[Stmt]) -> Result<Head, CudaLowerError> {
        let mut head = Head {
            groups: None,
            since_barrier: self.since_barrier,
        };
        if self.unknown || self.role != Role::Consumer {
            return Ok(head);
        }
        let mut groups = self.groups.clone();
        for _ in 0..4 {
            let mut trial = self.clone();
            trial.out = String::new();
            trial.groups = groups.clone();
            trial.stmts(body)?;
            trial.settle();
            if trial.unknown {
                return Ok(head);
            }
            let mut merged = trial.clone();
            merged.groups = groups.clone();
            merged.merge_groups(trial.groups.clone());
            if merged.unknown {
                return Ok(head);
            }
            head.since_barrier = head.since_barrier.min(trial.since_barrier);
            if merged.groups == groups {
                head.groups = Some(groups);
                return Ok(head);
            }
            groups = merged.groups;
        }
        Ok(head)
    }

    /// Takes the state of a loop's head (on entry to the body and on leaving the loop).
    pub(super) fn enter_head(&mut self, head: &Head) {
        match &head.groups {
            Some(g) => {
                self.groups = g.clone();
                self.unknown = false;
                self.since_barrier = self.since_barrier.min(head.since_barrier);
            }
            None => self.unknown = true,
        }
    }

    /// The open group is committed: it joins the list of groups in flight.
    pub(super) fn commit_group(&mut self) {
        let g = std::mem::take(&mut self.open_group);
        self.groups.push(g);
        self.since_barrier += 1;
    }

    /// After an `if`: the groups the other path left (`self.groups`) and this path's. Waits only
    /// remove the oldest groups, so where one list ends the other the longer one is what may still be
    /// in flight; anything else makes the state unknown.
    pub(super) fn merge_groups(&mut self, other: Vec<BTreeSet<RegId>>) {
        let (a, b) = (&self.groups, &other);
        let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
        if long[long.len() - short.len()..] == short[..] {
            self.groups = long.clone();
        } else {
            self.unknown = true;
            let mut all = self.groups.clone();
            all.extend(other);
            self.groups = all;
        }
    }

    /// Before an op on `regs`: waits for the newest listed group that touches one of them (and so
    /// for every older one), leaving the newer groups in flight.
    pub(super) fn retire_for(&mut self, regs: &[RegId]) {
        if self.unknown {
            return self.retire_all();
        }
        let Some(g) = self
            .groups
            .iter()
            .rposition(|grp| regs.iter().any(|r| grp.contains(r)))
        else {
            return;
        };
        let newer = self.groups.len() - 1 - g;
        if newer == 0 {
            return self.retire_all();
        }
        self.pin_dirty();
        self.line(format!(
            "kt::wgmma_wait<{newer}>(); // {newer} newer group(s) stay in flight"
        ));
        let retired: BTreeSet<RegId> = self.groups.drain(..=g).flatten().collect();
        for r in retired.into_iter().filter(|&r| r != OWNED_READ) {
            self.line(format!("kt::reg_fence(r_{});", cname(self.k.reg(r))));
        }
        // The groups still running were committed after the last barrier: they read none of the
        // slots of earlier epochs.
        if newer <= self.since_barrier {
            self.line("kt_release(kt_bars, kt_rel); kt_rel = 0;");
        }
        if newer == 1 {
            self.owed_wait = false;
        }
    }

    /// Pins the register work done since the last wait above the wait about to be emitted: the
    /// wait is an `asm volatile`, but the work is plain C++ (and `ex2.approx` a non-volatile asm)
    /// that the compiler may otherwise move below it — on the H100 build it sank the softmax of one
    /// key block below the wait for the previous block's P·V, which undid their overlap. Registers
    /// of groups that may be in flight are left alone: touching them would be a non-`wgmma` read of
    /// an accumulator in flight, which makes ptxas serialise the `wgmma`s (C7514).
    fn pin_dirty(&mut self) {
        let busy: BTreeSet<RegId> = self.groups.iter().flatten().copied().collect();
        let dirty = std::mem::take(&mut self.dirty);
        if self.unknown {
            return;
        }
        for r in dirty.difference(&busy) {
            self.line(format!("kt::reg_fence(r_{});", cname(self.k.reg(*r))));
        }
    }

    /// Emits a deferred `wait_group 1` and the release of the slots it retires. Deferring it past the
    /// register work that follows a commit matters on sm_90a: a `wait_group 1` while the just
    /// committed group is in flight, followed by a `wait_group 0` before the accumulators are read,
    /// made ptxas (NVRTC 13.0) serialise every `wgmma` of the attention kernel (C7514: it waited for
    /// each before issuing the next); with the `wait_group 0` alone it pipelines them.
    pub(super) fn settle(&mut self) {
        if std::mem::take(&mut self.owed_wait) {
            self.pin_dirty();
            self.line(
                "kt::wgmma_wait<1>(); // the previous group has retired: its slots can go back",
            );
            self.line("kt_release(kt_bars, kt_rel); kt_rel = 0;");
        }
    }

    /// Before the accumulator is touched by anything but wgmma: every chain retires and its slots go
    /// back. Outside the loops, when no shared operand is read later in the tile (`reads_ahead`), the
    /// slots of this epoch go back too — the producer refills them during the epilogue — and so do
    /// the slots of rings read for the whole tile.
    pub(super) fn retire_all(&mut self) {
        // `wait_group 0` retires what a deferred `wait_group 1` would have, and the release below
        // hands back its slots.
        self.owed_wait = false;
        self.pin_dirty();
        self.line("kt::wgmma_wait<0>();");
        // The registers the retired chains wrote or read, pinned after the wait.
        let fenced: BTreeSet<RegId> = if self.unknown {
            self.k
                .ops()
                .into_iter()
                .filter_map(|r| match r.op {
                    Op::Mma { d, a, .. } => Some([
                        Some(*d),
                        match a {
                            MmaOperand::Reg(r) => Some(*r),
                            MmaOperand::Shared(_) => None,
                        },
                    ]),
                    _ => None,
                })
                .flatten()
                .flatten()
                .collect()
        } else {
            self.groups.iter().flatten().copied().collect()
        };
        for r in fenced.into_iter().filter(|&r| r != OWNED_READ) {
            self.line(format!("kt::reg_fence(r_{});", cname(self.k.reg(r))));
        }
        if self.loops == 0 && !self.reads_ahead {
            self.waited.clear();
            self.line("kt_rel |= kt_held; kt_cpar ^= kt_held; kt_held = 0;");
            if self.resident.iter().any(|&r| r) {
                self.line("kt_rel |= kt_res; kt_cpar ^= kt_res; kt_res = 0;");
            }
        } else if self.loops == 0 {
            // Tile-resident rings the rest of the tile does not read (the tile-pair forward's first
            // Q) go back now: the producer fills them for the next tile meanwhile.
            let mask = (0..self.k.shared.len())
                .filter(|&r| self.resident[r] && !self.ring_ahead[r])
                .flat_map(|r| (0..self.k.shared[r].count).map(move |i| (r, i)))
                .fold(0u32, |m, (r, i)| m | 1u32 << (self.bars[r] + i));
            if mask != 0 {
                self.line(format!(
                    "{{ const u32 m = kt_res & {mask:#x}u; kt_rel |= m; kt_cpar ^= m; kt_res &= ~m; }}"
                ));
            }
        }
        self.line("kt_release(kt_bars, kt_rel); kt_rel = 0;");
        self.groups.clear();
        self.unknown = false;
    }
}
