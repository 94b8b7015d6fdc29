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
/// shared memory only as `mma` operands inside a loop whose iteration starts with a block barrier.
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
        Op::LoadAsync { .. } | Op::LoadShared { .. } | Op::StoreShared { .. } => {
            unsupported(format!("`{}` in the consumer role", op.name()))
        }
        Op::Mma { a, b, .. }
            if !guarded && [a, b].iter().any(|o| matches!(o, MmaOperand::Shared(_))) =>
        {
            unsupported("a shared mma operand read outside a loop that starts with a barrier")
        }
        Op::Barrier { scope } if *scope != Scope::Block => {
            unsupported("a wave or warpgroup barrier in the consumer role")
        }
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

/// Visits every op with whether it sits in a loop whose body starts with a block barrier.
fn walk(
    body: &[Stmt],
    guarded: bool,
    f: &mut dyn FnMut(&Op, bool) -> Result<(), CudaLowerError>,
) -> Result<(), CudaLowerError> {
    for s in body {
        match s {
            Stmt::Op { op, .. } => f(op, guarded)?,
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
                walk(body, guarded || starts, f)?
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
