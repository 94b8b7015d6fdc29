//! The events of one wave's symbolic trace (`trace.rs` produces them; the periodicity proof, the
//! hazard and order checks and the report read them): shared-memory accesses, register uses, waits
//! and barriers with the waves each barrier rendezvous.

use super::Region;
use crate::expr::VarId;
use crate::ir::{RegId, WaitCount, WaitQueue};

/// Which waves a barrier instance rendezvous: all waves of the block (AMD `s_barrier`, counted per
/// workgroup) or the four waves of one warpgroup (an NVIDIA named barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Domain {
    Block,
    Group(u32),
    /// The waves from this one to the block's last: a producer/consumer schedule's consumers.
    From(u32),
}

impl Domain {
    /// The member waves of the domain in a block of `n` waves.
    pub(crate) fn members(self, n: usize) -> Vec<usize> {
        match self {
            Domain::Block => (0..n).collect(),
            Domain::Group(g) => (4 * g as usize..(4 * g as usize + 4).min(n)).collect(),
            Domain::From(w) => (w as usize..n).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum EvKind {
    /// A shared-memory access. `queue: None` completes at issue; otherwise it completes when a wait on
    /// that queue covers it.
    Mem {
        write: bool,
        region: Region,
        queue: Option<WaitQueue>,
        /// For one wave's part of a cooperative async copy: which instance of the op's scope it belongs
        /// to (`wave / scope size`); the parts of one instance never conflict with each other.
        coop: Option<u32>,
    },
    /// A use of a wave's register that a shared→register load fills: reading it (or overwriting it)
    /// before the load's wait is the register form of a missing wait.
    Reg {
        reg: RegId,
        write: bool,
        queue: Option<WaitQueue>,
    },
    Wait {
        queue: WaitQueue,
        count: WaitCount,
    },
    Barrier {
        domain: Domain,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// Pre-order op index (as [`Kernel::ops`] numbers them).
    pub op: usize,
    pub kind: EvKind,
    /// Values of the enclosing loop variables, outermost first.
    pub iter: Vec<(VarId, i64)>,
    /// Innermost enclosing cluster (index into the trace's cluster list, `trace::Traces::clusters`).
    pub cluster: Option<usize>,
}
