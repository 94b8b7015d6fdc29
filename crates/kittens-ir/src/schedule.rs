//! Schedule expansion: a kernel names its [`Schedule`] and writes clusters; this pass inserts what the
//! schedule implies (docs/architecture.md principle 2), marking each inserted op `implied: true`.
//!
//! | schedule | `Staggered { body }` | compute cluster | memory cluster |
//! |---|---|---|---|
//! | 8-wave ping-pong (HipKittens E.1) | `if wg == 1 { barrier }`, body, `if wg == 0 { barrier }` | `prio 1`, body, `prio 0`, fence, barrier, fence | body, fence, barrier, fence |
//! | 4-wave interleave | body | body, fence | body, fence |
//! | producer/consumer, plain | body | body | body |
//!
//! `wg` is the warpgroup (`wave / 4`). The stagger barrier holds the second warpgroup back by one
//! cluster; from then on the two groups meet at every cluster-end barrier with opposite roles, and the
//! re-join barrier after the region (executed by the first group only) realigns them (HipKittens E.1 lines
//! 63–66 and 54–56 of the epilogue). `Roles { producer, consumer }` becomes
//! `if wg < producers { setmaxnreg(p); producer } else { setmaxnreg(c); consumer }`.

use crate::error::BuildError;
use crate::expr::Expr;
use crate::ir::{ClusterKind, Op, SchedHint, Schedule, Scope, Stmt};

fn implied(op: Op) -> Stmt {
    Stmt::Op { op, implied: true }
}

fn cluster_end(s: Schedule, kind: ClusterKind, body: Vec<Stmt>) -> Vec<Stmt> {
    let fence = || implied(Op::Hint(SchedHint::Fence));
    match s {
        Schedule::PingPong8 => {
            let mut v = Vec::new();
            if kind == ClusterKind::Compute {
                v.push(implied(Op::Priority(1)));
            }
            v.extend(body);
            if kind == ClusterKind::Compute {
                v.push(implied(Op::Priority(0)));
            }
            v.extend([
                fence(),
                implied(Op::Barrier {
                    scope: Scope::Block,
                }),
                fence(),
            ]);
            v
        }
        Schedule::Interleave4 => body.into_iter().chain([fence()]).collect(),
        _ => body,
    }
}

fn expand_body(s: Schedule, body: Vec<Stmt>) -> Result<Vec<Stmt>, BuildError> {
    let mut out = Vec::with_capacity(body.len());
    for st in body {
        match st {
            Stmt::Op { .. } => out.push(st),
            Stmt::For {
                var,
                start,
                end,
                body,
            } => out.push(Stmt::For {
                var,
                start,
                end,
                body: expand_body(s, body)?,
            }),
            Stmt::If { cond, then, els } => out.push(Stmt::If {
                cond,
                then: expand_body(s, then)?,
                els: expand_body(s, els)?,
            }),
            Stmt::LastArrival {
                counter,
                index,
                arrivals,
                scope,
                body,
            } => out.push(Stmt::LastArrival {
                counter,
                index,
                arrivals,
                scope,
                body: expand_body(s, body)?,
            }),
            Stmt::Cluster { kind, label, body } => {
                let body = cluster_end(s, kind, expand_body(s, body)?);
                out.push(Stmt::Cluster { kind, label, body });
            }
            Stmt::Staggered { body } => {
                let body = expand_body(s, body)?;
                if s == Schedule::PingPong8 {
                    let wg = Expr::Wave / 4;
                    let bar = || {
                        vec![implied(Op::Barrier {
                            scope: Scope::Block,
                        })]
                    };
                    out.push(Stmt::If {
                        cond: wg.clone().eq(1),
                        then: bar(),
                        els: vec![],
                    });
                    out.push(Stmt::Staggered { body });
                    out.push(Stmt::If {
                        cond: wg.eq(0),
                        then: bar(),
                        els: vec![],
                    });
                } else {
                    out.push(Stmt::Staggered { body });
                }
            }
            Stmt::Roles { producer, consumer } => {
                let Schedule::ProducerConsumer {
                    producers,
                    producer_regs,
                    consumer_regs,
                    ..
                } = s
                else {
                    return Err(BuildError::Structure(format!(
                        "producer/consumer roles in a {} schedule",
                        s.name()
                    )));
                };
                let mut then = vec![implied(Op::SetMaxRegs {
                    regs: producer_regs,
                })];
                then.extend(expand_body(s, producer)?);
                let mut els = vec![implied(Op::SetMaxRegs {
                    regs: consumer_regs,
                })];
                els.extend(expand_body(s, consumer)?);
                out.push(Stmt::If {
                    cond: (Expr::Wave / 4).lt(producers),
                    then,
                    els,
                });
            }
        }
    }
    Ok(out)
}

/// Expands every cluster, staggered region and role split of `body` for schedule `s`.
pub fn expand(s: Schedule, body: Vec<Stmt>) -> Result<Vec<Stmt>, BuildError> {
    expand_body(s, body)
}
