//! The shape check behind the sm_90a lowering's barrier → mbarrier hand-off (`lower.rs` module docs):
//! which programs may have their block barriers replaced by per-slot full/empty mbarriers.

use kittens_ir::{Cond, Kernel, MmaOperand, Op, Scope, Stmt, WaitQueue};

use super::lower::{unsupported, CudaLowerError};

/// The two role bodies of the expanded `Roles` split (each without its leading `set_max_regs`).
pub(super) struct Roles<'k> {
    pub(super) cond: &'k Cond,
    pub(super) producer: (&'k Op, &'k [Stmt]),
    pub(super) consumer: (&'k Op, &'k [Stmt]),
}

/// The shape the barrier → mbarrier hand-off needs (module docs): the body is the role split alone;
/// the producer only loads, waits and hands over; the consumer loads nothing asynchronously and reads
/// shared memory only as `mma` operands after a block barrier ([`walk`]), or tiles it stores itself
/// ([`consumer_owned`]: private to a warpgroup, ordered by warpgroup barriers).
pub(super) fn check_roles(k: &Kernel) -> Result<Roles<'_>, CudaLowerError> {
    let [Stmt::If { cond, then, els }] = k.body.as_slice() else {
        return unsupported("a body other than the producer/consumer role split");
    };
    let (Some(producer), Some(consumer)) = (split_role(then), split_role(els)) else {
        return unsupported("roles that do not start with set_max_regs");
    };
    walk(producer.1, false, &mut |op, _| match op {
        Op::LoadAsync { .. }
        | Op::Wait {
            queue: WaitQueue::Async,
            ..
        }
        | Op::Hint(_) => Ok(()),
        Op::Barrier {
            scope: Scope::Block,
        } => Ok(()),
        o => unsupported(format!(
            "`{}` in the producer role (it only loads and hands over)",
            o.name()
        )),
    })?;
    walk(consumer.1, false, &mut |op, guarded| match op {
        Op::LoadAsync { .. } | Op::LoadShared { .. } => {
            unsupported(format!("`{}` in the consumer role", op.name()))
        }
        Op::Mma { a, b, .. }
            if !guarded && [a, b].iter().any(|o| matches!(o, MmaOperand::Shared(_))) =>
        {
            unsupported("a shared mma operand read before any block barrier")
        }
        Op::Barrier { scope: Scope::Wave } => unsupported("a wave barrier in the consumer role"),
        _ => Ok(()),
    })?;
    Ok(Roles {
        cond,
        producer,
        consumer,
    })
}

/// A role body split into its leading `set_max_regs` and the rest.
fn split_role(b: &[Stmt]) -> Option<(&Op, &[Stmt])> {
    match b.split_first() {
        Some((
            Stmt::Op {
                op: op @ Op::SetMaxRegs { .. },
                ..
            },
            rest,
        )) => Some((op, rest)),
        _ => None,
    }
}

/// Visits every op with whether a block barrier hands its reads over: it sits in a loop whose body
/// starts with one, or after one (or after such a loop) in the same statement list — a key block
/// read before the loop that streams the rest, or after it (a rotated loop's first and last steps).
/// The lowering waits on each slot's `full` barrier before its first read in an epoch either way.
fn walk(
    body: &[Stmt],
    guarded: bool,
    f: &mut dyn FnMut(&Op, bool) -> Result<(), CudaLowerError>,
) -> Result<(), CudaLowerError> {
    let mut guarded = guarded;
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                f(op, guarded)?;
                if matches!(
                    op,
                    Op::Barrier {
                        scope: Scope::Block
                    }
                ) {
                    guarded = true;
                }
            }
            Stmt::For { body, .. } => {
                let starts = matches!(
                    body.first(),
                    Some(Stmt::Op {
                        op: Op::Barrier {
                            scope: Scope::Block
                        },
                        ..
                    })
                );
                walk(body, guarded || starts, f)?;
                guarded |= starts;
            }
            Stmt::If { then, els, .. } => {
                walk(then, guarded, f)?;
                walk(els, guarded, f)?
            }
            Stmt::Cluster { body, .. } | Stmt::Staggered { body } => walk(body, guarded, f)?,
            Stmt::Roles { .. } => return unsupported("unexpanded roles"),
        }
    }
    Ok(())
}

/// A chunk of a run of consecutive `load_async` ops: loads with the same ring-slot index into rings of
/// the same depth. One chunk becomes one fill: one `empty` wait, one `full` barrier armed with the sum
/// of the bytes, one TMA per load: one barrier pair per stage for A and B together.
pub(super) fn fill_chunks<'k>(k: &Kernel, run: &[&'k Op]) -> Vec<Vec<&'k Op>> {
    let key = |op: &Op| match op {
        Op::LoadAsync { dst, .. } => Some((dst.index.clone(), k.shared_decl(dst.buf).count)),
        _ => None,
    };
    let mut chunks: Vec<Vec<&Op>> = Vec::new();
    for &op in run {
        match chunks.last_mut() {
            Some(c) if key(c[0]) == key(op) && key(op).is_some() => c.push(op),
            _ => chunks.push(vec![op]),
        }
    }
    chunks
}

/// Per shared ring, the distinct slot expressions of the consumer's `mma` reads of it.
fn consumer_reads(body: &[Stmt], out: &mut Vec<Vec<kittens_ir::Expr>>) {
    for s in body {
        match s {
            Stmt::Op {
                op: Op::Mma { a, b, .. },
                ..
            } => {
                for o in [a, b] {
                    if let MmaOperand::Shared(v) = o {
                        let r = &mut out[v.buf.0 as usize];
                        if !r.contains(&v.index) {
                            r.push(v.index.clone());
                        }
                    }
                }
            }
            Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                consumer_reads(body, out)
            }
            Stmt::If { then, els, .. } => {
                consumer_reads(then, out);
                consumer_reads(els, out)
            }
            Stmt::Op { .. } | Stmt::Roles { .. } => {}
        }
    }
}

/// Maximal runs of consecutive `load_async` statements in one statement list, recursively.
pub(super) fn load_runs<'k>(body: &'k [Stmt], out: &mut Vec<Vec<&'k Op>>) {
    let mut run: Vec<&Op> = Vec::new();
    for s in body {
        if let Stmt::Op {
            op: op @ Op::LoadAsync { .. },
            ..
        } = s
        {
            run.push(op);
            continue;
        }
        if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
        match s {
            Stmt::For { body, .. } | Stmt::Cluster { body, .. } | Stmt::Staggered { body } => {
                load_runs(body, out)
            }
            Stmt::If { then, els, .. } => {
                load_runs(then, out);
                load_runs(els, out)
            }
            _ => {}
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
}

/// The first mbarrier of each shared ring and the number of mbarriers (per kind, full and empty).
/// Rings that are always filled together (every fill chunk that loads one of them loads exactly the
/// same set) share one barrier per slot; any other ring has its own.
///
/// Rings filled together share only if the consumer reads them with the same slot expressions: a ring
/// read a key block later than its partner (attention's V in the rotated loop) would otherwise find
/// the shared barrier's phase already advanced by the partner's hand-off — on the H100 that hung.
pub(super) fn ring_barriers(k: &Kernel, producer: &[Stmt], consumer: &[Stmt]) -> (Vec<u32>, u32) {
    let mut reads: Vec<Vec<kittens_ir::Expr>> = vec![Vec::new(); k.shared.len()];
    consumer_reads(consumer, &mut reads);
    let mut runs = Vec::new();
    load_runs(producer, &mut runs);
    let ring = |op: &Op| match op {
        Op::LoadAsync { dst, .. } => dst.buf.0 as usize,
        _ => usize::MAX,
    };
    // The set of rings filled together with each ring; None = not loaded yet; a ring seen with two
    // different sets goes alone.
    let mut set: Vec<Option<Vec<usize>>> = vec![None; k.shared.len()];
    let mut alone = vec![false; k.shared.len()];
    for run in &runs {
        for chunk in fill_chunks(k, run) {
            let mut rings: Vec<usize> = chunk.iter().map(|o| ring(o)).collect();
            rings.sort_unstable();
            let dup = rings.windows(2).any(|w| w[0] == w[1]);
            for &r in &rings {
                match &set[r] {
                    _ if dup => alone[r] = true,
                    None => set[r] = Some(rings.clone()),
                    Some(s) if *s != rings => alone[r] = true,
                    Some(_) => {}
                }
            }
        }
    }
    // A set is shared only if none of its members went alone and all are read with the same slot
    // expressions.
    for r in 0..k.shared.len() {
        if let Some(s) = &set[r] {
            let same = |x: &[kittens_ir::Expr], y: &[kittens_ir::Expr]| {
                x.len() == y.len() && x.iter().all(|e| y.contains(e))
            };
            let one = |o: usize| same(&reads[o], &reads[s[0]]);
            if s.iter().any(|&o| alone[o] || !one(o)) {
                alone[r] = true;
            }
        }
    }
    let mut first = vec![u32::MAX; k.shared.len()];
    let mut n = 0u32;
    for r in 0..k.shared.len() {
        if first[r] != u32::MAX {
            continue;
        }
        let members = match &set[r] {
            Some(s) if !alone[r] => s.clone(),
            _ => vec![r],
        };
        for &m in &members {
            first[m] = n;
        }
        n += k.shared[r].count;
    }
    (first, n)
}

/// Per shared ring: whether the producer fills it outside every loop of its body, once per tile
/// (attention's Q). Such a slot is read across the tile's hand-off epochs and goes back only when the
/// tile is done.
pub(super) fn resident_rings(k: &Kernel, producer: &[Stmt]) -> Vec<bool> {
    let mut res = vec![false; k.shared.len()];
    fn visit(body: &[Stmt], in_loop: bool, res: &mut Vec<bool>) {
        for s in body {
            match s {
                Stmt::Op {
                    op: Op::LoadAsync { dst, .. },
                    ..
                } if !in_loop => res[dst.buf.0 as usize] = true,
                Stmt::For { body, .. } => visit(body, true, res),
                Stmt::If { then, els, .. } => {
                    visit(then, in_loop, res);
                    visit(els, in_loop, res)
                }
                Stmt::Cluster { body, .. } | Stmt::Staggered { body } => visit(body, in_loop, res),
                _ => {}
            }
        }
    }
    visit(producer, false, &mut res);
    res
}

/// Per shared tile: whether the consumer role stores it ([`Op::StoreShared`]): a tile no producer
/// fills, read back by the same warpgroup's `wgmma`s after a warpgroup barrier (no full/empty
/// barriers; `lower.rs` orders it with named barriers).
pub(super) fn consumer_owned(k: &Kernel, consumer: &[Stmt]) -> Vec<bool> {
    let mut own = vec![false; k.shared.len()];
    let _ = walk(consumer, true, &mut |op, _| {
        if let Op::StoreShared { dst, .. } = op {
            own[dst.buf.0 as usize] = true;
        }
        Ok(())
    });
    own
}
