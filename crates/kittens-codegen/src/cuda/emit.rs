//! The sm_90a lowering's shared base: its error type, the emission state ([`Emit`]) with the
//! helpers every part of the lowering writes through (lines, C expressions, extents), the role being
//! emitted and the warpgroup barrier. The parts (`lower.rs` and the `lower_*.rs` files) each add
//! `impl Emit` blocks of their own; this module imports none of them.

use std::collections::BTreeSet;

use kittens_ir::{Cond, Expr, Kernel, RegId};

use super::WgmmaInput;
use crate::cexpr::{self, ident};
use crate::lowered::TmaMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaLowerError {
    #[error("the sm_90a lowering does not support {0}")]
    Unsupported(String),
    /// The schedule analysis found a hazard: no backend lowers a racy kernel.
    #[error("sm_90a lowering refused: {0}")]
    Schedule(#[from] kittens_ir::analysis::ScheduleError),
}

/// A warpgroup's own barrier (its 128 threads; the TMA-store slab, consumer stores to shared memory
/// read back by `wgmma`). Named barrier 0 is the block's; 1..=3 are the turn ring of up to three
/// consumer warpgroups ([`Emit::turn`]); the warpgroups' own start at 4, so that no barrier ID is
/// used with two thread counts at once (a warpgroup barrier on a turn's ID faulted the atomic-dQ
/// backward at B16 H16 N4096 with an illegal instruction).
pub(super) const WG_BARRIER: &str = "kt::named_barrier(4 + threadIdx.x / 128, 128);";

pub(super) fn unsupported<T>(what: impl Into<String>) -> Result<T, CudaLowerError> {
    Err(CudaLowerError::Unsupported(what.into()))
}

/// Which role's code is being emitted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Role {
    None,
    Producer,
    Consumer,
}

#[derive(Clone)]
pub(super) struct Emit<'k> {
    pub(super) k: &'k Kernel,
    pub(super) out: String,
    pub(super) depth: usize,
    pub(super) maps: Vec<TmaMap>,
    /// Shared-operand wgmma wrappers used with B K-major: (operand type, N).
    pub(super) wgmma_n: BTreeSet<(WgmmaInput, u32)>,
    /// Shared-operand wgmma wrappers used with B N-major (their N): bf16 only, since fp8 wgmma reads
    /// K-major operands only and `mma` refuses N-major fp8 before anything is recorded.
    pub(super) wgmma_tb: BTreeSet<u32>,
    /// The same with A M-major too (`mma_atb`): bf16 only.
    pub(super) wgmma_ta_tb: BTreeSet<u32>,
    /// The same with A M-major and B K-major (`mma_atbt`): bf16 only.
    pub(super) wgmma_ta: BTreeSet<u32>,
    /// Register-A wgmma wrappers used: (N, B transposed).
    pub(super) wgmma_rs: BTreeSet<(u32, bool)>,
    /// Register-A wgmma wrappers with D split over two accumulators (`lower_mma.rs`, fused pairs).
    pub(super) wgmma_rs_split: BTreeSet<(u32, bool)>,
    /// Per committed, possibly unfinished commit group, oldest first: the registers its chains write
    /// (D) or read (register A). Any other op on them waits for that group first (`lower_wait.rs`).
    pub(super) groups: Vec<BTreeSet<RegId>>,
    /// The registers of the commit group being issued (its `mma`s so far).
    pub(super) open_group: BTreeSet<RegId>,
    /// Groups committed since the last consumer barrier: a wait that leaves no more than these in
    /// flight may hand back the slots of earlier epochs.
    pub(super) since_barrier: usize,
    /// A shared `mma` operand is read later in the role's tile body: a retire outside the loops does
    /// not end the hand-off epoch then.
    pub(super) reads_ahead: bool,
    /// Per shared ring: an `mma` reads it later in the role's tile body. A tile-resident ring read
    /// no more goes back at a retire outside the loops even while other rings are read ahead.
    pub(super) ring_ahead: Vec<bool>,
    /// Registers the consumer's register work touched since the last `wgmma` wait: pinned before
    /// the next wait (`lower_wait.rs`), so that the compiler cannot sink that work below it.
    pub(super) dirty: BTreeSet<RegId>,
    /// Set where emission order does not say what is pending (a loop's head, after a loop).
    pub(super) unknown: bool,
    /// Per shared ring: loaded once per tile, outside the producer's loops (attention's Q), so read
    /// across many hand-off epochs and released when the tile's last chain retires.
    pub(super) resident: Vec<bool>,
    /// Per shared tile: stored by the consumer role itself (`lower_roles::consumer_owned`): read
    /// without full/empty barriers, ordered by warpgroup named barriers.
    pub(super) owned: Vec<bool>,
    /// The program has consumers barriers: consumer warpgroups may read each other's stored tiles
    /// (the schedule analysis has shown those reads ordered).
    pub(super) consumers_exchange: bool,
    /// The `mma` being emitted is followed by another: both go in one commit group.
    pub(super) group_continues: bool,
    /// A commit group is open (its `wgmma.fence` issued, not yet committed).
    pub(super) group_open: bool,
    /// Inside a consumer compute cluster: the warpgroup's turn on the tensor cores.
    pub(super) in_turn: bool,
    /// A group committed during the turn waits (`wait_group 1`) after the turn ends.
    pub(super) turn_wait: bool,
    /// A group was committed and its `wait_group 1` (retire the previous group, hand its slots back)
    /// is not yet emitted: deferred to the next barrier, loop edge or `mma`, or dropped when a
    /// `wait_group 0` comes first ([`Emit::settle`]).
    pub(super) owed_wait: bool,
    /// `full` barriers (first barrier of the ring, slot index as C) already waited on in this
    /// hand-off epoch on every path here: a second wait on the same phase is dropped, so that a
    /// commit group's `wgmma`s follow each other with no wait loop between them.
    pub(super) waited: BTreeSet<(u32, String)>,
    pub(super) cap: u32,
    pub(super) offsets: Vec<u32>,
    /// First mbarrier (= first bit of the phase masks) of each shared ring.
    pub(super) bars: Vec<u32>,
    pub(super) nbars: u32,
    pub(super) role: Role,
    /// For loops open inside the current role.
    pub(super) loops: u32,
    pub(super) producers: u32,
    /// Bytes of one consumer warpgroup's C staging slab.
    pub(super) slab: u32,
    /// The tensor map of the TMA-store epilogue, once a store asked for it.
    pub(super) store_map: Option<TmaMap>,
    /// Per shared ring: filled by `cp.async` (`SlotFill::CpAsync` of its global), not TMA.
    pub(super) cp_rings: Vec<bool>,
    /// Every producer thread runs the fills (some ring is filled by `cp.async`), not one.
    pub(super) threaded: bool,
}

impl Emit<'_> {
    pub(super) fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(s.as_ref());
        self.out.push('\n');
    }

    /// `e` as a C `int` expression; `wave` names the wave index to use.
    pub(super) fn ex_with(&self, e: &Expr, wave: &str) -> String {
        cexpr::expr_in(
            self.k,
            e,
            &cexpr::CNames {
                wave,
                ..cexpr::CUDA
            },
        )
    }
    pub(super) fn ex(&self, e: &Expr) -> String {
        self.ex_with(e, "wave")
    }
    pub(super) fn cond(&self, c: &Cond) -> String {
        cexpr::cond_in(self.k, c, &cexpr::CUDA)
    }

    /// The extent of dimension `dim` of global `g` as this block sees it: the declared size, or with
    /// a per-block clip on that dimension (`kittens_ir::Clip`: a varlen sequence's end, read from
    /// device memory) the smaller of the two, so that every bounds-checked load and store stops at
    /// the sequence's end and the next sequence's rows are neither read nor written.
    pub(super) fn extent(&self, g: &kittens_ir::GlobalDecl, dim: usize) -> String {
        let d = self.ex(&g.dims[dim]);
        match &g.clip {
            Some(c) if c.dim as usize == dim => format!("min({d}, {})", self.ex(&c.end)),
            _ => d,
        }
    }
}

/// The C name of a register's fragment (without the `r_` prefix).
pub(super) fn cname(r: &kittens_ir::RegDecl) -> String {
    ident(&r.name)
}
