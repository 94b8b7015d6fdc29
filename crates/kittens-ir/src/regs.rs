//! Register liveness for the per-wave register estimate: which register tiles and vectors each op
//! touches, and the op-index range over which each one holds a value.

use crate::ir::{Arg, Kernel, MmaOperand, Op, RegId, RegKind, Stmt};

impl Op {
    /// The register tiles and vectors this op reads or writes.
    pub fn regs(&self) -> Vec<RegId> {
        let mut v = Vec::new();
        let operand = |o: &MmaOperand, v: &mut Vec<RegId>| {
            if let MmaOperand::Reg(r) = o {
                v.push(*r)
            }
        };
        match self {
            Op::LoadShared { dst, .. }
            | Op::LoadGlobal { dst, .. }
            | Op::Fill { dst, .. }
            | Op::Random { dst, .. }
            | Op::Mask { dst, .. } => v.push(*dst),
            Op::StoreShared { src, .. }
            | Op::StoreGlobal { src, .. }
            | Op::AtomicAdd { src, .. } => v.push(*src),
            Op::Mma { d, a, b, c, .. } => {
                v.push(*d);
                operand(a, &mut v);
                operand(b, &mut v);
                v.extend(c);
            }
            Op::Map { dst, args, .. } => {
                v.push(*dst);
                v.extend(args.iter().filter_map(|a| match a {
                    Arg::Reg(r) | Arg::RowBcast(r) | Arg::ColBcast(r) => Some(*r),
                    Arg::Scalar(_) => None,
                }));
            }
            Op::Reduce { dst, src, acc, .. } => v.extend([*dst, *src].into_iter().chain(*acc)),
            Op::Transpose { dst, src } | Op::SwapLayout { dst, src } => v.extend([*dst, *src]),
            _ => {}
        }
        v
    }
}

fn walk(
    body: &[Stmt],
    next: &mut usize,
    touch: &mut dyn FnMut(usize, &Op),
    loops: &mut Vec<(usize, usize)>,
) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                touch(*next, op);
                *next += 1;
            }
            Stmt::For { body, .. } => {
                let lo = *next;
                walk(body, next, touch, loops);
                loops.push((lo, *next));
            }
            Stmt::If { then, els, .. } => {
                walk(then, next, touch, loops);
                walk(els, next, touch, loops);
            }
            Stmt::Cluster { body, .. } | Stmt::Staggered { body } => walk(body, next, touch, loops),
            Stmt::Roles { producer, consumer } => {
                walk(producer, next, touch, loops);
                walk(consumer, next, touch, loops);
            }
        }
    }
}

/// For each register, the half-open range of op indices over which it is live: from its first to its
/// last reference, widened to the whole of any loop that references it (its value may cross the back
/// edge). `None` for registers no op touches.
pub fn live_ranges(k: &Kernel) -> Vec<Option<(usize, usize)>> {
    let mut ranges: Vec<Option<(usize, usize)>> = vec![None; k.regs.len()];
    let mut loops = Vec::new();
    let mut next = 0;
    let mut touch = |i: usize, op: &Op| {
        for r in op.regs() {
            if let Some(slot) = ranges.get_mut(r.0 as usize) {
                let (lo, hi) = slot.unwrap_or((i, i + 1));
                *slot = Some((lo.min(i), hi.max(i + 1)));
            }
        }
    };
    walk(&k.body, &mut next, &mut touch, &mut loops);
    for (lo, hi) in loops {
        for (a, b) in ranges.iter_mut().flatten() {
            if *a < hi && lo < *b {
                (*a, *b) = ((*a).min(lo), (*b).max(hi));
            }
        }
    }
    ranges
}

/// 32-bit registers per lane one register holds on a wave of `lanes` lanes. A vector is assumed spread
/// so that 16 consecutive entries share a lane group (the 16-row base tiles of HipKittens §3.2.2).
pub fn regs_per_lane(kind: &RegKind, lanes: u32) -> u32 {
    match kind {
        RegKind::Tile(t) => t.regs_per_lane(lanes),
        RegKind::Vec(v) => (v.len.div_ceil(16) * v.dtype.bytes()).div_ceil(4),
    }
}
