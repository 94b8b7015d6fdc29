//! One block: its waves (each on its own program counter over the flattened body, running until it
//! reaches a barrier; waves between the same two barriers run one after another, in wave order), their
//! registers, shared memory and pending async loads.

mod compute;

use super::program::{Inst, Program};
use super::InterpError;
use crate::expr::{Env, Expr};
use crate::ir::*;
use crate::numerics::round;
use kittens_hw::dtype::DType;
use std::collections::VecDeque;

/// The global stores of one block, applied by the driver in block order, then its atomic adds
/// (f32, in program order: [`Op::AtomicAdd`]), and its arrivals on counters ([`Stmt::LastArrival`]).
pub struct Writes {
    pub block: i64,
    pub stores: Vec<(usize, usize, f32)>,
    pub adds: Vec<(usize, usize, f32)>,
    pub arrivals: Vec<Arrival>,
}

/// One arrival of a block on a counter element ([`Stmt::LastArrival`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// The counter (global index) and its element.
    pub key: (usize, i64),
    /// The arrivals the program expects on the element.
    pub expected: i64,
    /// How many of the block's stores (from the first) the arrival released.
    pub released: usize,
    /// The instruction arrived at (one arrival per block, instruction and element).
    pc: usize,
}

/// What a block sees of the launch's other blocks: in the first run nothing (`last` empty, no
/// `acquired`); when run again as the last arrival of the elements in `last`, the stores those
/// elements' arrivals released (`acquired`, over the launch's inputs).
#[derive(Default, Clone, Copy)]
pub struct Handoff<'a> {
    pub last: Option<&'a std::collections::HashSet<(usize, i64)>>,
    pub acquired: Option<&'a std::collections::HashMap<(usize, usize), f32>>,
}

/// An async load issued but not yet waited for: shared offsets and the values read at issue.
struct Pending {
    buf: usize,
    data: Vec<(usize, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    /// Stopped at a barrier of this scope.
    Barrier(Scope),
    Done,
}

struct Wave {
    regs: Vec<Vec<f32>>,
    vars: Vec<i64>,
    /// Loop bounds, one slot per loop of the program.
    ends: Vec<i64>,
    pc: usize,
    state: State,
    pending: VecDeque<Pending>,
}

struct Block<'a> {
    k: &'a Kernel,
    params: &'a [i64],
    inputs: &'a [&'a [f32]],
    coords: &'a [i64],
    shared: Vec<Vec<f32>>,
    waves: Vec<Wave>,
    stores: Vec<(usize, usize, f32)>,
    adds: Vec<(usize, usize, f32)>,
    arrivals: Vec<Arrival>,
    handoff: Handoff<'a>,
    ops: u64,
}

fn err(op: &Op, detail: impl Into<String>) -> InterpError {
    InterpError::Op {
        op: op.name(),
        detail: detail.into(),
    }
}

fn store_round(x: f32, dt: DType, mode: Rounding) -> f32 {
    if dt == DType::F32 {
        x
    } else {
        round(x, dt, mode)
    }
}

/// Runs one block; returns its global stores and the number of wave-ops executed.
pub fn run_block(
    k: &Kernel,
    prog: &Program,
    params: &[i64],
    inputs: &[&[f32]],
    coords: &[i64],
    id: i64,
    handoff: Handoff,
) -> Result<(Writes, u64), InterpError> {
    let elems = |what: &str, dims: &[u32]| {
        dims.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d as usize))
            .ok_or_else(|| InterpError::Overflow {
                what: format!("the size of {what}"),
            })
    };
    let shared = k
        .shared
        .iter()
        .map(|s| {
            let n = elems(&s.name, &[s.tile.rows, s.tile.cols, s.count])?;
            Ok(vec![0.0; n])
        })
        .collect::<Result<_, InterpError>>()?;
    let regs: Vec<Vec<f32>> = k
        .regs
        .iter()
        .map(|r| {
            let (rows, cols) = r.shape();
            Ok(vec![0.0; elems(&r.name, &[rows, cols])?])
        })
        .collect::<Result<_, InterpError>>()?;
    let waves = (0..k.waves)
        .map(|_| Wave {
            regs: regs.clone(),
            vars: vec![0; k.vars.len()],
            ends: vec![0; prog.loops],
            pc: 0,
            state: State::Running,
            pending: VecDeque::new(),
        })
        .collect();
    let mut b = Block {
        k,
        params,
        inputs,
        coords,
        shared,
        waves,
        stores: vec![],
        adds: vec![],
        arrivals: vec![],
        handoff,
        ops: 0,
    };
    b.run(prog)?;
    Ok((
        Writes {
            block: id,
            stores: b.stores,
            adds: b.adds,
            arrivals: b.arrivals,
        },
        b.ops,
    ))
}

impl<'a> Block<'a> {
    fn eval(&self, w: usize, e: &Expr) -> Result<i64, InterpError> {
        let env = Env {
            params: self.params,
            vars: &self.waves[w].vars,
            block: self.coords,
            wave: w as i64,
        };
        e.eval_in(&env, &|g, i| self.elem(g, i))
            .ok_or_else(|| InterpError::Eval {
                what: format!("index on wave {w}"),
                expr: e.to_string(),
            })
    }

    /// Element `i` along dimension 0 of the `i32` global `g` ([`Expr::Elem`]): 0 outside the tensor,
    /// `None` (an evaluation error) where `g` is not an `i32` tensor or its shape does not evaluate.
    fn elem(&self, g: GlobalId, i: i64) -> Option<i64> {
        let d = self.k.globals.get(g.0 as usize)?;
        if d.dtype != DType::I32 {
            return None;
        }
        let env = Env {
            params: self.params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        let n = d.dims.first()?.eval(&env)?;
        if !(0..n).contains(&i) {
            return Some(0);
        }
        let stride = d.strides.first()?.eval(&env)?;
        let x = *self
            .inputs
            .get(g.0 as usize)?
            .get(usize::try_from(i * stride).ok()?)?;
        Some(x as i64)
    }

    /// Element `o` of global `g` as this block sees it: a store another block released to it
    /// ([`Handoff::acquired`]), else the launch's input.
    fn read(&self, g: usize, o: usize) -> f32 {
        self.handoff
            .acquired
            .and_then(|a| a.get(&(g, o)).copied())
            .unwrap_or(self.inputs[g][o])
    }

    /// Runs every wave to its next barrier, releases the barrier, until all waves are done. Barriers
    /// match by count, as AMD `s_barrier` does: waves that have exited no longer count.
    fn run(&mut self, prog: &Program) -> Result<(), InterpError> {
        loop {
            for w in 0..self.waves.len() {
                if self.waves[w].state == State::Running {
                    self.run_wave(prog, w)?;
                }
            }
            if self.waves.iter().all(|x| x.state == State::Done) {
                return Ok(());
            }
            if !self.release() {
                let at: Vec<String> = self
                    .waves
                    .iter()
                    .enumerate()
                    .map(|(w, x)| format!("wave {w}: {:?}", x.state))
                    .collect();
                return Err(InterpError::Op {
                    op: "barrier".into(),
                    detail: format!("deadlock ({})", at.join(", ")),
                });
            }
        }
    }

    /// Releases a warpgroup whose live waves all wait at warpgroup barriers, else the consumer role's
    /// waves when all wait at consumers barriers, else the block when every live wave waits at a
    /// block barrier; false when none is possible (a deadlock).
    fn release(&mut self) -> bool {
        let n = self.waves.len();
        let mut any = false;
        for g in 0..n.div_ceil(4) {
            any |= self.release_if(g * 4..(g * 4 + 4).min(n), Scope::WarpGroup, false);
        }
        if any {
            return true;
        }
        if let Some(c) = self.k.schedule.consumer_waves() {
            if self.release_if(c.start as usize..n, Scope::Consumers, false) {
                return true;
            }
        }
        self.release_if(0..n, Scope::Block, true)
    }

    /// Sets the live waves of `ws` running when all of them wait at a barrier of `scope` (and there
    /// is at least one, unless `empty_ok`).
    fn release_if(&mut self, ws: std::ops::Range<usize>, scope: Scope, empty_ok: bool) -> bool {
        let live: Vec<usize> = ws.filter(|&w| self.waves[w].state != State::Done).collect();
        if (live.is_empty() && !empty_ok)
            || !live
                .iter()
                .all(|&w| self.waves[w].state == State::Barrier(scope))
        {
            return false;
        }
        live.iter()
            .for_each(|&w| self.waves[w].state = State::Running);
        true
    }

    /// Runs wave `w` until it stops at a barrier or reaches the end of the program.
    fn run_wave(&mut self, prog: &Program, w: usize) -> Result<(), InterpError> {
        loop {
            let pc = self.waves[w].pc;
            let Some(inst) = prog.insts.get(pc) else {
                self.waves[w].state = State::Done;
                return Ok(());
            };
            self.waves[w].pc = pc + 1;
            match inst {
                Inst::Op(op) => {
                    self.ops += 1;
                    match op {
                        Op::Barrier { scope: Scope::Wave } => {}
                        Op::Barrier { scope } => {
                            self.waves[w].state = State::Barrier(*scope);
                            return Ok(());
                        }
                        _ => self.op(w, op)?,
                    }
                }
                Inst::Enter {
                    var,
                    start,
                    end,
                    slot,
                } => {
                    let (s, e) = (self.eval(w, start)?, self.eval(w, end)?);
                    self.waves[w].vars[var.0 as usize] = s;
                    self.waves[w].ends[*slot] = e;
                }
                Inst::Test { var, slot, exit } => {
                    if self.waves[w].vars[var.0 as usize] >= self.waves[w].ends[*slot] {
                        self.waves[w].pc = *exit;
                    }
                }
                Inst::Next { var, test } => {
                    self.waves[w].vars[var.0 as usize] += 1;
                    self.waves[w].pc = *test;
                }
                Inst::Branch { cond, els } => {
                    let env = Env {
                        params: self.params,
                        vars: &self.waves[w].vars,
                        block: self.coords,
                        wave: w as i64,
                    };
                    let c = cond.eval_in(&env, &|g, i| self.elem(g, i));
                    let c = c.ok_or_else(|| InterpError::Eval {
                        what: "condition".into(),
                        expr: format!("{cond:?}"),
                    })?;
                    if !c {
                        self.waves[w].pc = *els;
                    }
                }
                Inst::Jump(t) => self.waves[w].pc = *t,
                Inst::Arrive {
                    counter,
                    index,
                    arrivals,
                    els,
                    ..
                } => {
                    let key = (counter.0 as usize, self.eval(w, index)?);
                    let expected = self.eval(w, arrivals)?;
                    // The scope's waves arrive together (a barrier over it comes first): the first
                    // of them to get here records the block's arrival, with every store so far.
                    if !self.arrivals.iter().any(|a| a.key == key && a.pc == pc) {
                        self.arrivals.push(Arrival {
                            key,
                            expected,
                            released: self.stores.len(),
                            pc,
                        });
                    }
                    if !self.handoff.last.is_some_and(|l| l.contains(&key)) {
                        self.waves[w].pc = *els;
                    }
                }
            }
        }
    }

    /// Global offset of view element (i, j), or None when outside the tensor.
    fn global_offsets(&self, w: usize, v: &GlobalView) -> Result<Vec<Option<usize>>, InterpError> {
        let g = &self.k.globals[v.tensor.0 as usize];
        let origin: Vec<i64> = v
            .origin
            .iter()
            .map(|e| self.eval(w, e))
            .collect::<Result<_, _>>()?;
        let mut dims: Vec<i64> = g
            .dims
            .iter()
            .map(|e| self.eval(w, e))
            .collect::<Result<_, _>>()?;
        if let Some(c) = &g.clip {
            let end = self.eval(w, &c.end)?;
            if let Some(d) = dims.get_mut(c.dim as usize) {
                *d = (*d).min(end.max(0));
            }
        }
        let strides: Vec<i64> = g
            .strides
            .iter()
            .map(|e| self.eval(w, e))
            .collect::<Result<_, _>>()?;
        let base_in = |skip: [usize; 2]| {
            (0..dims.len()).all(|d| skip.contains(&d) || (0..dims[d]).contains(&origin[d]))
        };
        let (rd, cd) = (v.row_dim as usize, v.col_dim as usize);
        let n = v.rows as usize * v.cols as usize;
        if !base_in([rd, cd]) {
            return Ok(vec![None; n]);
        }
        // Every coordinate used below is inside the tensor, so each offset is at most the one
        // `required_len` computed with checked arithmetic: none of these sums can overflow.
        let base: i64 = (0..dims.len())
            .filter(|&d| d != rd && d != cd)
            .map(|d| origin[d] * strides[d])
            .sum();
        let mut out = Vec::with_capacity(n);
        for i in 0..v.rows as i64 {
            let r = origin[rd].saturating_add(i);
            for j in 0..v.cols as i64 {
                let c = origin[cd].saturating_add(j);
                let inside = (0..dims[rd]).contains(&r) && (0..dims[cd]).contains(&c);
                out.push(inside.then(|| (base + r * strides[rd] + c * strides[cd]) as usize));
            }
        }
        Ok(out)
    }

    /// Offsets in the shared vector of buffer `v.buf` for view element (i, j), row-major.
    fn shared_offsets(&self, w: usize, v: &SharedView) -> Result<Vec<usize>, InterpError> {
        let d = &self.k.shared[v.buf.0 as usize];
        let (idx, r0, c0) = (
            self.eval(w, &v.index)?,
            self.eval(w, &v.row0)?,
            self.eval(w, &v.col0)?,
        );
        let (rows, cols) = (d.tile.rows as i64, d.tile.cols as i64);
        if !(0..d.count as i64).contains(&idx)
            || r0 < 0
            || c0 < 0
            || r0 + v.rows as i64 > rows
            || c0 + v.cols as i64 > cols
        {
            return Err(InterpError::Op {
                op: "shared view".into(),
                detail: format!(
                    "`{}`[{idx}] at ({r0}, {c0}) size {}x{} is out of bounds",
                    d.name, v.rows, v.cols
                ),
            });
        }
        let base = idx * rows * cols;
        let mut out = Vec::with_capacity((v.rows * v.cols) as usize);
        for i in 0..v.rows as i64 {
            for j in 0..v.cols as i64 {
                out.push((base + (r0 + i) * cols + c0 + j) as usize);
            }
        }
        Ok(out)
    }

    fn set_reg(&mut self, w: usize, r: RegId, vals: Vec<f32>, mode: Rounding) {
        let dt = self.k.regs[r.0 as usize].dtype();
        let dst = &mut self.waves[w].regs[r.0 as usize];
        for (d, v) in dst.iter_mut().zip(vals) {
            *d = store_round(v, dt, mode);
        }
    }

    /// Memory ops: async loads, waits on them, loads and stores.
    fn memory(&mut self, w: usize, op: &Op) -> Result<(), InterpError> {
        match op {
            Op::LoadAsync { dst, src, scope } => self.load_async(w, dst, src, *scope),
            Op::Wait {
                queue: WaitQueue::Async,
                count,
            } => {
                let keep = match count {
                    WaitCount::Outstanding(n) => *n as usize,
                    WaitCount::Auto => 0,
                };
                while self.waves[w].pending.len() > keep {
                    let p = self.waves[w].pending.pop_front().expect("len checked");
                    let buf = &mut self.shared[p.buf];
                    for (off, v) in p.data {
                        buf[off] = v;
                    }
                }
                Ok(())
            }
            Op::LoadShared { dst, src } => {
                let offs = self.shared_offsets(w, src)?;
                let buf = &self.shared[src.buf.0 as usize];
                let vals = offs.iter().map(|&o| buf[o]).collect();
                self.set_reg(w, *dst, vals, Rounding::Rtne);
                Ok(())
            }
            Op::LoadGlobal { dst, src } => {
                let offs = self.global_offsets(w, src)?;
                let g = src.tensor.0 as usize;
                let vals = offs
                    .iter()
                    .map(|o| o.map_or(0.0, |o| self.read(g, o)))
                    .collect();
                self.set_reg(w, *dst, vals, Rounding::Rtne);
                Ok(())
            }
            Op::StoreShared { dst, src, rounding } => {
                let offs = self.shared_offsets(w, dst)?;
                let dt = self.k.shared[dst.buf.0 as usize].tile.dtype;
                let vals = &self.waves[w].regs[src.0 as usize];
                let buf = &mut self.shared[dst.buf.0 as usize];
                for (o, v) in offs.into_iter().zip(vals) {
                    buf[o] = store_round(*v, dt, *rounding);
                }
                Ok(())
            }
            Op::StoreGlobal { dst, src, rounding } => {
                let offs = self.global_offsets(w, dst)?;
                let g = dst.tensor.0 as usize;
                let dt = self.k.globals[g].dtype;
                let vals = &self.waves[w].regs[src.0 as usize];
                for (o, v) in offs.into_iter().zip(vals) {
                    if let Some(o) = o {
                        self.stores.push((g, o, store_round(*v, dt, *rounding)));
                    }
                }
                Ok(())
            }
            Op::AtomicAdd { dst, src } => {
                let offs = self.global_offsets(w, dst)?;
                let g = dst.tensor.0 as usize;
                let vals = &self.waves[w].regs[src.0 as usize];
                for (o, v) in offs.into_iter().zip(vals) {
                    if let Some(o) = o {
                        self.adds.push((g, o, *v));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Wave `w`'s share of a cooperative load: a contiguous band of rows, by its rank in the scope.
    fn load_async(
        &mut self,
        w: usize,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
    ) -> Result<(), InterpError> {
        let n = scope.waves(self.k.waves) as usize;
        let rank = w % n;
        let band = (dst.rows as usize).div_ceil(n);
        let (lo, hi) = (
            (rank * band).min(dst.rows as usize),
            ((rank + 1) * band).min(dst.rows as usize),
        );
        let soffs = self.shared_offsets(w, dst)?;
        let goffs = self.global_offsets(w, src)?;
        let g = src.tensor.0 as usize;
        let cols = dst.cols as usize;
        let data = (lo * cols..hi * cols)
            .map(|x| (soffs[x], goffs[x].map_or(0.0, |o| self.read(g, o))))
            .collect();
        self.waves[w].pending.push_back(Pending {
            buf: dst.buf.0 as usize,
            data,
        });
        Ok(())
    }
}
