//! Walking a kernel's body: every op has an index (its position in a pre-order walk of the body counting
//! ops only), which error messages, the analysis and the tests use to point at it.

use crate::ir::{Kernel, Op, Stmt};

/// Where an op sits, for listings and lowerings.
#[derive(Debug, Clone, Copy)]
pub struct OpRef<'a> {
    pub index: usize,
    pub op: &'a Op,
    pub implied: bool,
    /// Nesting depth (0 = top level of the body).
    pub depth: usize,
}

fn walk<'a>(body: &'a [Stmt], depth: usize, next: &mut usize, f: &mut dyn FnMut(OpRef<'a>)) {
    for s in body {
        match s {
            Stmt::Op { op, implied } => {
                f(OpRef {
                    index: *next,
                    op,
                    implied: *implied,
                    depth,
                });
                *next += 1;
            }
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => walk(body, depth + 1, next, f),
            Stmt::If { then, els, .. } => {
                walk(then, depth + 1, next, f);
                walk(els, depth + 1, next, f);
            }
            Stmt::Roles { producer, consumer } => {
                walk(producer, depth + 1, next, f);
                walk(consumer, depth + 1, next, f);
            }
        }
    }
}

/// Removes the op with pre-order index `target`; returns true when found.
fn remove(body: &mut Vec<Stmt>, next: &mut usize, target: usize) -> bool {
    let mut i = 0;
    while i < body.len() {
        let found = match &mut body[i] {
            Stmt::Op { .. } => {
                let hit = *next == target;
                *next += 1;
                if hit {
                    body.remove(i);
                    return true;
                }
                false
            }
            Stmt::For { body, .. }
            | Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => remove(body, next, target),
            Stmt::If { then, els, .. } => remove(then, next, target) || remove(els, next, target),
            Stmt::Roles { producer, consumer } => {
                remove(producer, next, target) || remove(consumer, next, target)
            }
        };
        if found {
            return true;
        }
        i += 1;
    }
    false
}

impl Kernel {
    /// Calls `f` on every op of the body in program order.
    pub fn for_each_op<'a>(&'a self, mut f: impl FnMut(OpRef<'a>)) {
        let mut next = 0;
        walk(&self.body, 0, &mut next, &mut f);
    }

    /// Every op with its index, in program order.
    pub fn ops(&self) -> Vec<OpRef<'_>> {
        let mut v = Vec::new();
        self.for_each_op(|r| v.push(r));
        v
    }

    pub fn op(&self, index: usize) -> Option<&Op> {
        self.ops()
            .into_iter()
            .find(|r| r.index == index)
            .map(|r| r.op)
    }

    /// A copy with op `index` deleted (for hazard tests: drop one barrier or one wait); `None` when no op
    /// has that index.
    pub fn without_op(&self, index: usize) -> Option<Kernel> {
        let mut k = self.clone();
        let mut next = 0;
        remove(&mut k.body, &mut next, index).then_some(k)
    }
}
