//! The body flattened into a linear program with jumps, so each wave can run on its own program counter
//! and stop at a barrier until the other waves arrive (warp-specialised and staggered schedules have
//! waves in different places of the body at the same time).

use crate::expr::{Cond, Expr, VarId};
use crate::ir::{GlobalId, Op, Stmt};

pub enum Inst<'k> {
    Op(&'k Op),
    /// `var = start`; `ends[slot] = end` (evaluated once, at loop entry).
    Enter {
        var: VarId,
        start: &'k Expr,
        end: &'k Expr,
        slot: usize,
    },
    /// Leave the loop (jump to `exit`) when `var >= ends[slot]`.
    Test {
        var: VarId,
        slot: usize,
        exit: usize,
    },
    /// `var += 1`, jump to the loop's `Test`.
    Next {
        var: VarId,
        test: usize,
    },
    /// Jump to `els` when `cond` is false.
    Branch {
        cond: &'k Cond,
        els: usize,
    },
    Jump(usize),
    /// The block arrives on element `index` of `counter` ([`Stmt::LastArrival`]; the barrier over
    /// its scope comes before); jump to `els` (past the body) unless it is the last of `arrivals`.
    Arrive {
        counter: GlobalId,
        index: &'k Expr,
        arrivals: &'k Expr,
        els: usize,
    },
}

pub struct Program<'k> {
    pub insts: Vec<Inst<'k>>,
    /// Number of loop-end slots each wave needs.
    pub loops: usize,
}

impl<'k> Program<'k> {
    pub fn new(body: &'k [Stmt]) -> Program<'k> {
        let mut p = Program {
            insts: Vec::new(),
            loops: 0,
        };
        p.emit(body);
        p
    }

    fn emit(&mut self, body: &'k [Stmt]) {
        for s in body {
            match s {
                Stmt::Op { op, .. } => self.insts.push(Inst::Op(op)),
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let slot = self.loops;
                    self.loops += 1;
                    self.insts.push(Inst::Enter {
                        var: *var,
                        start,
                        end,
                        slot,
                    });
                    let test = self.insts.len();
                    self.insts.push(Inst::Test {
                        var: *var,
                        slot,
                        exit: 0,
                    });
                    self.emit(body);
                    self.insts.push(Inst::Next { var: *var, test });
                    let exit = self.insts.len();
                    self.insts[test] = Inst::Test {
                        var: *var,
                        slot,
                        exit,
                    };
                }
                Stmt::If { cond, then, els } => {
                    let branch = self.insts.len();
                    self.insts.push(Inst::Jump(0));
                    self.emit(then);
                    let jump = self.insts.len();
                    self.insts.push(Inst::Jump(0));
                    let else_at = self.insts.len();
                    self.emit(els);
                    let end = self.insts.len();
                    self.insts[branch] = Inst::Branch { cond, els: else_at };
                    self.insts[jump] = Inst::Jump(end);
                }
                Stmt::Cluster { body, .. } | Stmt::Staggered { body } => self.emit(body),
                Stmt::LastArrival {
                    counter,
                    index,
                    arrivals,
                    body,
                    ..
                } => {
                    let at = self.insts.len();
                    self.insts.push(Inst::Jump(0));
                    self.emit(body);
                    self.insts[at] = Inst::Arrive {
                        counter: *counter,
                        index,
                        arrivals,
                        els: self.insts.len(),
                    };
                }
                Stmt::Roles { producer, consumer } => {
                    // Only reachable for an unexpanded body; run both sides (a kernel from the builder
                    // never has one).
                    self.emit(producer);
                    self.emit(consumer);
                }
            }
        }
    }
}
