//! Why a long loop may be shortened: the proof that the iterations it skips repeat the ones it keeps.
//!
//! A loop of `trip` iterations is analysed as its first `h` iterations and its last `trip - h - s`,
//! skipping `s` (a multiple of the period `P`, the lcm of the ring sizes). Write `S_i` for the trace one
//! wave produces in iteration `i`, with that iteration's own counter value left out (everything else —
//! buffer, slot, rows and columns of every access, registers, waits with their counts, barriers with
//! their scope, clusters, inner loop counters — kept). When `S_i = S_{i+P}` for every skipped `i`, the
//! full trace is `S_0..S_{h-1} · B^(s/P) · T` and the shortened one `S_0..S_{h-1} · T`, where `T` (the
//! kept tail) starts with the period `B`: shortening removes whole copies of a block that the trace
//! really repeats. Two ways establish it:
//!
//! * **By the program** ([`body_is_periodic`]): every expression the analysis evaluates in the body
//!   (loop bounds, conditions, shared views) reads the loop counter only through `e % c` with `c`
//!   dividing `P` and `e` affine in the counter. Then `S_i` is a function of `i mod P`.
//! * **By the trace**: otherwise (a condition such as `t + 1 < n` or `t != 16`), every skipped
//!   iteration is traced and compared with the one `P` later; one mismatch and the loop runs in full.
//!
//! Barriers are matched by count across waves, so every wave must skip the same barrier instances: the
//! caller checks that the waves of each barrier domain skipped identical ordinal ranges
//! ([`Skip`]) and re-traces with the loop in full when they did not.

use super::event::{Domain, Event};
use crate::expr::{BinOp, Cond, Expr, VarId};
use crate::ir::{MmaOperand, Op, SharedView, Stmt};
use serde::Serialize;

/// One dynamic instance of a loop: the index of its body's first op and the values of the counters of
/// the loops around it (the same key in every wave that runs that instance).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LoopKey {
    pub op: usize,
    pub outer: Vec<i64>,
}

/// Barrier instances one wave skipped in one shortened loop instance: ordinals `start..start + count`
/// of its barriers in `domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skip {
    pub key: LoopKey,
    pub domain: Domain,
    pub start: usize,
    pub count: usize,
    /// Ordinal of the first barrier in the iterations shown periodic (the loop's first iteration for
    /// [`Periodicity::Program`]; a period before the skip for [`Periodicity::Traced`]).
    pub verified_from: usize,
}

/// How the repetition of the skipped iterations was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Periodicity {
    /// The body reads the counter only modulo divisors of the period.
    Program,
    /// Every skipped iteration was traced and equals the one a period later.
    Traced,
}

/// True when `e`'s value repeats with period `p` in `var` (the other variables fixed).
fn periodic(e: &Expr, var: VarId, p: i64) -> bool {
    match e {
        Expr::Var(v) => *v != var,
        Expr::Const(_) | Expr::Param(_) | Expr::Block(_) | Expr::Wave | Expr::Round => true,
        Expr::Bin(BinOp::Rem, a, b) => match b.as_const() {
            Some(c) if c > 0 && p % c == 0 => affine(a, var) || periodic(a, var, p),
            _ => periodic(a, var, p) && periodic(b, var, p),
        },
        Expr::Bin(_, a, b) => periodic(a, var, p) && periodic(b, var, p),
        Expr::Elem(_, i) => periodic(i, var, p),
    }
}

/// True when `e` is `a·var + b` with integer `a` and `b` free of `var` (so `e(i + c·P) ≡ e(i)` modulo
/// every divisor of P): sums, differences and products by var-free terms.
fn affine(e: &Expr, var: VarId) -> bool {
    match e {
        Expr::Bin(BinOp::Add | BinOp::Sub, a, b) => affine(a, var) && affine(b, var),
        Expr::Bin(BinOp::Mul, a, b) => {
            (affine(a, var) && !mentions(b, var)) || (!mentions(a, var) && affine(b, var))
        }
        _ => matches!(e, Expr::Var(_)) || !mentions(e, var),
    }
}

pub(crate) fn mentions(e: &Expr, var: VarId) -> bool {
    match e {
        Expr::Var(v) => *v == var,
        Expr::Bin(_, a, b) => mentions(a, var) || mentions(b, var),
        _ => false,
    }
}

fn cond_periodic(c: &Cond, var: VarId, p: i64) -> bool {
    match c {
        Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => {
            periodic(a, var, p) && periodic(b, var, p)
        }
        Cond::And(a, b) | Cond::Or(a, b) => cond_periodic(a, var, p) && cond_periodic(b, var, p),
        Cond::Not(a) => cond_periodic(a, var, p),
    }
}

/// The shared views an op names (what the trace evaluates besides control flow).
pub(crate) fn views(op: &Op) -> Vec<&SharedView> {
    match op {
        Op::LoadAsync { dst, .. } | Op::StoreShared { dst, .. } => vec![dst],
        Op::LoadShared { src, .. } => vec![src],
        Op::Mma { a, b, .. } => [a, b]
            .into_iter()
            .filter_map(|o| match o {
                MmaOperand::Shared(v) => Some(v),
                MmaOperand::Reg(_) => None,
            })
            .collect(),
        _ => vec![],
    }
}

/// Every expression and condition the trace evaluates in `body` (loop bounds, conditions, the slot,
/// row and column of every shared view), for `f` and `g` to inspect. Global views, masks and scalars
/// do not reach the trace.
pub(crate) fn for_each_traced(body: &[Stmt], f: &mut dyn FnMut(&Expr), g: &mut dyn FnMut(&Cond)) {
    for s in body {
        match s {
            Stmt::Op { op, .. } => {
                for v in views(op) {
                    f(&v.index);
                    f(&v.row0);
                    f(&v.col0);
                }
            }
            Stmt::For {
                start, end, body, ..
            } => {
                f(start);
                f(end);
                for_each_traced(body, f, g);
            }
            Stmt::If { cond, then, els } => {
                g(cond);
                for_each_traced(then, f, g);
                for_each_traced(els, f, g);
            }
            Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => for_each_traced(body, f, g),
            Stmt::Roles { producer, consumer } => {
                for_each_traced(producer, f, g);
                for_each_traced(consumer, f, g);
            }
        }
    }
}

/// True when every expression the trace evaluates in `body` repeats with period `p` in `var`.
pub(crate) fn body_is_periodic(body: &[Stmt], var: VarId, p: i64) -> bool {
    let (mut ok_e, mut ok_c) = (true, true);
    for_each_traced(body, &mut |e| ok_e &= periodic(e, var, p), &mut |c| {
        ok_c &= cond_periodic(c, var, p)
    });
    ok_e && ok_c
}

/// Two iterations' traces are the same, up to the value of the counter at loop depth `depth`.
pub(crate) fn same_iteration(a: &[Event], b: &[Event], depth: usize) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.op == y.op
                && x.cluster == y.cluster
                && x.kind == y.kind
                && x.iter.len() == y.iter.len()
                && x.iter
                    .iter()
                    .zip(&y.iter)
                    .enumerate()
                    .all(|(i, (u, v))| i == depth || u == v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_slots_are_periodic_and_raw_counters_are_not() {
        let t = Expr::Var(VarId(0));
        let n = Expr::Param(crate::expr::ParamId(0));
        assert!(periodic(&(&t % 2), VarId(0), 2));
        assert!(periodic(&((&t + 1) % 2), VarId(0), 4));
        assert!(periodic(&((&t * 3 + &n) % 2 * 64), VarId(0), 2));
        assert!(!periodic(&(&t % 3), VarId(0), 2));
        assert!(!periodic(&(&t / 2 % 2), VarId(0), 2));
        assert!(!periodic(&(&t * 64), VarId(0), 2));
        assert!(periodic(&(&n * 64), VarId(0), 2));
        assert!(!cond_periodic(&t.ne(16), VarId(0), 2));
        assert!(cond_periodic(&(&t % 2).eq(0), VarId(0), 2));
    }
}
