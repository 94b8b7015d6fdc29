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
            Op::Alibi { dst, slope, .. } => v.extend([*dst, *slope]),
            _ => {}
        }
        v
    }
}

impl Op {
    /// The register this op writes whole without reading its old value (a load, a fill, a map or
    /// `mma` that does not read its destination), if any: the register's earlier value is dead here.
    pub fn full_def(&self) -> Option<RegId> {
        let reads = self.reads_of_dst();
        match self {
            Op::LoadShared { dst, .. }
            | Op::LoadGlobal { dst, .. }
            | Op::Fill { dst, .. }
            | Op::Random { dst, .. } => Some(*dst),
            Op::Map { dst, .. }
            | Op::Reduce { dst, .. }
            | Op::Transpose { dst, .. }
            | Op::SwapLayout { dst, .. }
            | Op::Mma { d: dst, .. }
                if !reads =>
            {
                Some(*dst)
            }
            _ => None,
        }
    }

    /// Whether the op reads the register it writes (an accumulator, an in-place map).
    fn reads_of_dst(&self) -> bool {
        match self {
            Op::Map { dst, args, .. } => args.iter().any(|a| match a {
                Arg::Reg(r) | Arg::RowBcast(r) | Arg::ColBcast(r) => r == dst,
                Arg::Scalar(_) => false,
            }),
            Op::Reduce { dst, src, acc, .. } => src == dst || *acc == Some(*dst),
            Op::Transpose { dst, src } | Op::SwapLayout { dst, src } => src == dst,
            Op::Mma { d, a, b, c, .. } => {
                *c == Some(*d)
                    || [a, b]
                        .iter()
                        .any(|o| matches!(o, MmaOperand::Reg(r) if r == d))
            }
            _ => true,
        }
    }
}

/// Per op (by index): the innermost loop it is in (an index into the loops list, `None` at top
/// level) and whether it runs on every iteration of that loop (not inside a conditional or an inner
/// loop, which may run no times).
struct Placement {
    ops: Vec<(Option<usize>, bool)>,
    /// Loops in the order they close (inner before outer), as half-open op ranges.
    loops: Vec<(usize, usize)>,
}

fn walk(
    body: &[Stmt],
    next: &mut usize,
    touch: &mut dyn FnMut(usize, &Op),
    place: &mut Placement,
    inner: Option<usize>,
    every: bool,
) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                touch(*next, op);
                place.ops.push((inner, every));
                *next += 1;
            }
            Stmt::For { body, .. } => {
                let lo = *next;
                // The loop's slot is reserved now so that its body can name it; filled when it closes.
                let id = place.loops.len();
                place.loops.push((lo, lo));
                walk(body, next, touch, place, Some(id), true);
                place.loops[id] = (lo, *next);
            }
            Stmt::If { then, els, .. } => {
                walk(then, next, touch, place, inner, false);
                walk(els, next, touch, place, inner, false);
            }
            Stmt::LastArrival { body, .. } => walk(body, next, touch, place, inner, false),
            Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                walk(body, next, touch, place, inner, every)
            }
            Stmt::Roles { producer, consumer } => {
                walk(producer, next, touch, place, inner, false);
                walk(consumer, next, touch, place, inner, false);
            }
        }
    }
}

/// For each register, the half-open range of op indices over which it is live: from its first to its
/// last reference, widened to the whole of any loop that references it (its value may cross the back
/// edge) — unless the loop's first reference to it is an op that writes it whole without reading it
/// ([`Op::full_def`]) and runs on every iteration: then no value crosses the back edge (K and V tiles
/// loaded afresh each step of an attention's key loop), and the range stays first-to-last reference.
/// `None` for registers no op touches.
pub fn live_ranges(k: &Kernel) -> Vec<Option<(usize, usize)>> {
    let mut ranges: Vec<Option<(usize, usize)>> = vec![None; k.regs.len()];
    let mut refs: Vec<Vec<(usize, bool)>> = vec![Vec::new(); k.regs.len()];
    let mut place = Placement {
        ops: Vec::new(),
        loops: Vec::new(),
    };
    let mut next = 0;
    let mut touch = |i: usize, op: &Op| {
        let def = op.full_def();
        for r in op.regs() {
            if let Some(slot) = ranges.get_mut(r.0 as usize) {
                let (lo, hi) = slot.unwrap_or((i, i + 1));
                *slot = Some((lo.min(i), hi.max(i + 1)));
                // Several operands may name one register: a read among them is a read.
                let full = def == Some(r) && op.regs().iter().filter(|&&x| x == r).count() == 1;
                refs[r.0 as usize].push((i, full));
            }
        }
    };
    walk(&k.body, &mut next, &mut touch, &mut place, None, true);
    // Inner loops first, as they close.
    let mut order: Vec<usize> = (0..place.loops.len()).collect();
    order.sort_by_key(|&l| (place.loops[l].1, std::cmp::Reverse(place.loops[l].0)));
    for l in order {
        let (lo, hi) = place.loops[l];
        for (r, range) in ranges.iter_mut().enumerate() {
            let Some((a, b)) = range else { continue };
            if !(*a < hi && lo < *b) {
                continue;
            }
            let first = refs[r].iter().find(|(i, _)| (lo..hi).contains(i));
            let fresh = first.is_some_and(|&(i, full)| full && place.ops[i] == (Some(l), true));
            if !fresh {
                (*a, *b) = ((*a).min(lo), (*b).max(hi));
            }
        }
    }
    ranges
}

/// 32-bit registers per lane one register holds on a wave of `lanes` lanes. A vector is assumed spread
/// so that 16 consecutive entries share a lane group (the 16-row base tiles of HipKittens §3.2.2).
///
/// Strip registers (base shape `BaseShape::STRIP`, the memory-bound kernels) are counted the way the
/// strip emitter (`kittens_codegen::strip`) holds them: one f32 register per element whatever the
/// dtype; a tile's rows cut into chunks of 8, 4, 2 or 1 elements (the largest dividing the width)
/// dealt to the lanes round robin; a column vector spread like a one-row tile (one chunk per lane when
/// it has fewer chunks than lanes); a row vector replicated in every lane.
pub fn regs_per_lane(kind: &RegKind, lanes: u32) -> u32 {
    let chunk = |cols: u32| {
        [8, 4, 2, 1]
            .into_iter()
            .find(|v| cols.is_multiple_of(*v))
            .unwrap_or(1)
    };
    let lanes = lanes.max(1);
    match kind {
        RegKind::Tile(t) if t.base == kittens_tile::BaseShape::STRIP => {
            let v = chunk(t.cols);
            (t.rows.saturating_mul(t.cols / v)).div_ceil(lanes) * v
        }
        RegKind::Vec(v) if v.base == kittens_tile::BaseShape::STRIP => match v.axis {
            crate::ir::Axis::Cols => {
                let c = chunk(v.len);
                (v.len / c).div_ceil(lanes) * c
            }
            crate::ir::Axis::Rows => v.len,
        },
        RegKind::Tile(t) => t.regs_per_lane(lanes),
        RegKind::Vec(v) => (v.len.div_ceil(16) * v.dtype.bytes()).div_ceil(4),
    }
}

/// For each op (by index), the registers that hold a value while it runs: those live into it (read
/// later on some path before being written whole again, by a backward dataflow over the structured
/// program: loops may run no times or repeat, both branches of a conditional are paths) and those it
/// touches. A register written whole ([`Op::full_def`]) is dead before the write, so a tile reloaded
/// at the top of every iteration, or written in both branches of a conditional, is not live across
/// the back edge; an accumulator read by its own update is.
pub fn occupancy(k: &Kernel) -> Vec<Vec<RegId>> {
    let n_regs = k.regs.len();
    let mut ops: Vec<&Op> = Vec::new();
    k.for_each_op(|r| ops.push(r.op));
    let n = ops.len();
    // Nodes 0..n are the ops; then loop headers, branch points and the exit, which touch nothing.
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let exit = succ.len();
    succ.push(Vec::new());
    fn count(s: &Stmt) -> usize {
        match s {
            Stmt::Op { .. } => 1,
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => body.iter().map(count).sum(),
            Stmt::If { then, els, .. } => then.iter().chain(els).map(count).sum(),
            Stmt::Roles { producer, consumer } => producer.iter().chain(consumer).map(count).sum(),
        }
    }
    fn build(body: &[Stmt], first: usize, follow: usize, succ: &mut Vec<Vec<usize>>) -> usize {
        let mut starts = Vec::with_capacity(body.len());
        let mut at = first;
        for s in body {
            starts.push(at);
            at += count(s);
        }
        let mut entry = follow;
        for (s, &st) in body.iter().zip(&starts).rev() {
            entry = match s {
                Stmt::Op { .. } => {
                    succ[st] = vec![entry];
                    st
                }
                Stmt::For { body, .. } => {
                    let h = succ.len();
                    succ.push(Vec::new());
                    let b = build(body, st, h, succ);
                    succ[h] = vec![b, entry];
                    h
                }
                Stmt::If { then, els, .. } => {
                    let t = build(then, st, entry, succ);
                    let e = build(els, st + then.iter().map(count).sum::<usize>(), entry, succ);
                    let h = succ.len();
                    succ.push(vec![t, e]);
                    h
                }
                Stmt::LastArrival { body, .. } => {
                    // Run by the last arrival only: a conditional with nothing on the other side.
                    let t = build(body, st, entry, succ);
                    let h = succ.len();
                    succ.push(vec![t, entry]);
                    h
                }
                Stmt::Roles { producer, consumer } => {
                    let t = build(producer, st, entry, succ);
                    let e = build(
                        consumer,
                        st + producer.iter().map(count).sum::<usize>(),
                        entry,
                        succ,
                    );
                    let h = succ.len();
                    succ.push(vec![t, e]);
                    h
                }
                Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                    build(body, st, entry, succ)
                }
            };
        }
        entry
    }
    build(&k.body, 0, exit, &mut succ);
    let nodes = succ.len();
    let words = n_regs.div_ceil(64).max(1);
    let set = |v: &mut [u64], r: usize| v[r / 64] |= 1 << (r % 64);
    let mut uses = vec![vec![0u64; words]; nodes];
    let mut kill = vec![vec![0u64; words]; nodes];
    for (i, op) in ops.iter().enumerate() {
        let def = op
            .full_def()
            .filter(|d| op.regs().iter().filter(|&&x| x == *d).count() == 1);
        for r in op.regs() {
            if (r.0 as usize) < n_regs {
                if Some(r) == def {
                    set(&mut kill[i], r.0 as usize);
                } else {
                    set(&mut uses[i], r.0 as usize);
                }
            }
        }
    }
    let mut live_in = vec![vec![0u64; words]; nodes];
    let mut changed = true;
    while changed {
        changed = false;
        for v in (0..nodes).rev() {
            let mut out = vec![0u64; words];
            for &s in &succ[v] {
                for w in 0..words {
                    out[w] |= live_in[s][w];
                }
            }
            for w in 0..words {
                let x = uses[v][w] | (out[w] & !kill[v][w]);
                if x != live_in[v][w] {
                    live_in[v][w] = x;
                    changed = true;
                }
            }
        }
    }
    (0..n)
        .map(|i| {
            let mut v: Vec<RegId> = (0..n_regs)
                .filter(|&r| live_in[i][r / 64] >> (r % 64) & 1 == 1)
                .map(|r| RegId(r as u32))
                .collect();
            for r in ops[i].regs() {
                if (r.0 as usize) < n_regs && !v.contains(&r) {
                    v.push(r);
                }
            }
            v
        })
        .collect()
}
