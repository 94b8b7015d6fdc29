//! The ops one wave executes on its block ([`super::Block`]): the op dispatch, mma, element-wise maps,
//! reductions, random numbers and masks; memory, addressing and scheduling are in [`super`].

use super::{err, store_round, Block};
use crate::expr::Expr;
use crate::interp::InterpError;
use crate::ir::*;

impl Block<'_> {
    pub(super) fn op(&mut self, w: usize, op: &Op) -> Result<(), InterpError> {
        match op {
            Op::LoadAsync { .. }
            | Op::Wait { .. }
            | Op::LoadShared { .. }
            | Op::LoadGlobal { .. }
            | Op::StoreShared { .. }
            | Op::StoreGlobal { .. }
            | Op::AtomicAdd { .. } => self.memory(w, op),
            Op::Mma { form, d, a, b, c } => self.mma(w, op, *form, *d, a, b, *c),
            Op::Map {
                dst,
                f,
                args,
                rounding,
            } => self.map(w, op, *dst, *f, args, *rounding),
            Op::Reduce {
                dst,
                src,
                axis,
                op: rop,
                acc,
            } => self.reduce(w, *dst, *src, *axis, *rop, *acc),
            Op::Fill { dst, value } => {
                let n = self.waves[w].regs[dst.0 as usize].len();
                self.set_reg(w, *dst, vec![*value; n], Rounding::Rtne);
                Ok(())
            }
            Op::Random {
                dst,
                seed,
                offset,
                index0,
                row_stride,
            } => {
                let [s0, s1] = seed;
                let [o0, o1] = offset;
                self.random(w, op, *dst, [s0, s1, o0, o1, index0, row_stride])
            }
            Op::Transpose { dst, src } => {
                let (rows, cols) = self.k.regs[src.0 as usize].shape();
                let t = transpose(
                    &self.waves[w].regs[src.0 as usize],
                    rows as usize,
                    cols as usize,
                );
                self.set_reg(w, *dst, t, Rounding::Rtne);
                Ok(())
            }
            Op::SwapLayout { dst, src } => {
                let s = self.waves[w].regs[src.0 as usize].clone();
                self.set_reg(w, *dst, s, Rounding::Rtne);
                Ok(())
            }
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => self.mask(w, *dst, rule, row0, col0, *value),
            Op::Alibi {
                dst,
                slope,
                row0,
                col0,
            } => self.alibi(w, *dst, *slope, row0, col0),
            Op::Barrier { .. } | Op::Priority(_) | Op::Hint(_) | Op::SetMaxRegs { .. } => Ok(()),
        }
    }

    /// An mma operand as a row-major matrix (rows, cols, values).
    fn operand(&self, w: usize, o: &MmaOperand) -> Result<(usize, usize, Vec<f32>), InterpError> {
        match o {
            MmaOperand::Reg(r) => {
                let (rows, cols) = self.k.regs[r.0 as usize].shape();
                Ok((
                    rows as usize,
                    cols as usize,
                    self.waves[w].regs[r.0 as usize].clone(),
                ))
            }
            MmaOperand::Shared(v) => {
                let buf = &self.shared[v.buf.0 as usize];
                let vals = self
                    .shared_offsets(w, v)?
                    .into_iter()
                    .map(|o| buf[o])
                    .collect();
                Ok((v.rows as usize, v.cols as usize, vals))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mma(
        &mut self,
        w: usize,
        op: &Op,
        form: MmaForm,
        d: RegId,
        a: &MmaOperand,
        b: &MmaOperand,
        c: Option<RegId>,
    ) -> Result<(), InterpError> {
        let (ar, ac, av) = self.operand(w, a)?;
        let (br, bc, bv) = self.operand(w, b)?;
        // A as M×K row-major and B as N×K row-major, so the inner loop is two contiguous rows.
        let (m, kk, a_mk) = if form.a_transposed() {
            (ac, ar, transpose(&av, ar, ac))
        } else {
            (ar, ac, av)
        };
        let (n, b_nk) = if form.b_transposed() {
            (br, bv)
        } else {
            (bc, transpose(&bv, br, bc))
        };
        if b_nk.len() != n * kk {
            return Err(err(op, "operand shapes disagree"));
        }
        let mut out = match c {
            Some(c) => self.waves[w].regs[c.0 as usize].clone(),
            None => vec![0.0; m * n],
        };
        for i in 0..m {
            let ar = &a_mk[i * kk..(i + 1) * kk];
            for j in 0..n {
                let br = &b_nk[j * kk..(j + 1) * kk];
                let mut acc = out[i * n + j];
                for (x, y) in ar.iter().zip(br) {
                    acc += x * y;
                }
                out[i * n + j] = acc;
            }
        }
        self.set_reg(w, d, out, Rounding::Rtne);
        Ok(())
    }

    fn map(
        &mut self,
        w: usize,
        op: &Op,
        dst: RegId,
        f: MapFn,
        args: &[Arg],
        mode: Rounding,
    ) -> Result<(), InterpError> {
        let (rows, cols) = self.k.regs[dst.0 as usize].shape();
        let (rows, cols) = (rows as usize, cols as usize);
        let regs = &self.waves[w].regs;
        let at = |a: &Arg, i: usize, j: usize| match *a {
            Arg::Reg(r) => regs[r.0 as usize][i * cols + j],
            Arg::RowBcast(r) => regs[r.0 as usize][i],
            Arg::ColBcast(r) => regs[r.0 as usize][j],
            Arg::Scalar(s) => s,
        };
        if args.len() != f.arity() {
            return Err(err(op, "wrong number of arguments"));
        }
        let mut out = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            for j in 0..cols {
                let x = at(&args[0], i, j);
                let y = args.get(1).map_or(0.0, |a| at(a, i, j));
                out.push(apply(f, x, y));
            }
        }
        self.set_reg(w, dst, out, mode);
        Ok(())
    }

    fn reduce(
        &mut self,
        w: usize,
        dst: RegId,
        src: RegId,
        axis: Axis,
        op: ReduceOp,
        acc: Option<RegId>,
    ) -> Result<(), InterpError> {
        let (rows, cols) = self.k.regs[src.0 as usize].shape();
        let (rows, cols) = (rows as usize, cols as usize);
        let s = &self.waves[w].regs[src.0 as usize];
        let (outer, inner) = if axis == Axis::Rows {
            (rows, cols)
        } else {
            (cols, rows)
        };
        let get = |o: usize, x: usize| {
            if axis == Axis::Rows {
                s[o * cols + x]
            } else {
                s[x * cols + o]
            }
        };
        let init = |o: usize| match acc {
            Some(a) => self.waves[w].regs[a.0 as usize][o],
            None => match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f32::NEG_INFINITY,
                ReduceOp::Min => f32::INFINITY,
            },
        };
        let out = (0..outer)
            .map(|o| {
                (0..inner).fold(init(o), |a, x| match op {
                    ReduceOp::Sum => a + get(o, x),
                    ReduceOp::Max => a.max(get(o, x)),
                    ReduceOp::Min => a.min(get(o, x)),
                })
            })
            .collect();
        self.set_reg(w, dst, out, Rounding::Rtne);
        Ok(())
    }

    /// [`Op::Random`]: `[seed lo, seed hi, offset lo, offset hi, index0, row_stride]`; a stream index
    /// outside `0..2^63` is an error rather than a wrapped (repeated) draw.
    fn random(&mut self, w: usize, op: &Op, dst: RegId, e: [&Expr; 6]) -> Result<(), InterpError> {
        let mut v = [0i64; 6];
        for (x, e) in v.iter_mut().zip(e) {
            *x = self.eval(w, e)?;
        }
        let word64 = |lo: i64, hi: i64| u64::from(lo as u32) | u64::from(hi as u32) << 32;
        let (seed, offset, i0, stride) = (word64(v[0], v[1]), word64(v[2], v[3]), v[4], v[5]);
        let (rows, cols) = self.k.regs[dst.0 as usize].shape();
        let mut out = Vec::with_capacity(rows as usize * cols as usize);
        for i in 0..i64::from(rows) {
            for j in 0..i64::from(cols) {
                let index = i
                    .checked_mul(stride)
                    .and_then(|x| x.checked_add(i0))
                    .and_then(|x| x.checked_add(j))
                    .and_then(|x| u64::try_from(x).ok())
                    .ok_or_else(|| err(op, format!("stream index {i0} + {i}·{stride} + {j}")))?;
                let word = crate::philox::stream(seed, offset, index);
                out.push(crate::philox::uniform(word));
            }
        }
        self.set_reg(w, dst, out, Rounding::Rtne);
        Ok(())
    }

    /// [`Op::Alibi`]: the bias in f32, then rounded to the tile's dtype (f32: exact).
    fn alibi(
        &mut self,
        w: usize,
        dst: RegId,
        slope: RegId,
        row0: &Expr,
        col0: &Expr,
    ) -> Result<(), InterpError> {
        let (r0, c0) = (self.eval(w, row0)?, self.eval(w, col0)?);
        let cols = self.k.regs[dst.0 as usize].shape().1 as usize;
        let by_row = self.k.regs[slope.0 as usize]
            .vec()
            .is_none_or(|v| v.axis == Axis::Rows);
        let sl = self.waves[w].regs[slope.0 as usize].clone();
        let mut out = self.waves[w].regs[dst.0 as usize].clone();
        for (x, e) in out.iter_mut().enumerate() {
            let (i, j) = (x / cols, x % cols);
            let dist = (r0 + i as i64 - c0 - j as i64).unsigned_abs() as f32;
            let s = if by_row { sl[i] } else { sl[j] };
            *e = s.mul_add(dist, *e);
        }
        self.set_reg(w, dst, out, Rounding::Rtne);
        Ok(())
    }

    fn mask(
        &mut self,
        w: usize,
        dst: RegId,
        rule: &MaskRule,
        row0: &Expr,
        col0: &Expr,
        value: f32,
    ) -> Result<(), InterpError> {
        let (r0, c0) = (self.eval(w, row0)?, self.eval(w, col0)?);
        let (keep_kind, bound) = match rule {
            MaskRule::Causal { offset } => (0, self.eval(w, offset)?),
            MaskRule::CausalT { offset } => (3, self.eval(w, offset)?),
            MaskRule::ColsBelow(l) => (1, self.eval(w, l)?),
            MaskRule::RowsBelow(l) => (2, self.eval(w, l)?),
            MaskRule::WindowStart { offset } => (4, self.eval(w, offset)?),
            MaskRule::WindowStartT { offset } => (5, self.eval(w, offset)?),
        };
        let (_, cols) = self.k.regs[dst.0 as usize].shape();
        let v = store_round(value, self.k.regs[dst.0 as usize].dtype(), Rounding::Rtne);
        let cols = cols as usize;
        for (x, e) in self.waves[w].regs[dst.0 as usize].iter_mut().enumerate() {
            let (r, c) = (r0 + (x / cols) as i64, c0 + (x % cols) as i64);
            let keep = match keep_kind {
                0 => c <= r + bound,
                1 => c < bound,
                2 => r < bound,
                3 => r <= c + bound,
                4 => c >= r + bound,
                _ => r >= c + bound,
            };
            if !keep {
                *e = v;
            }
        }
        Ok(())
    }
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|x| v[(x % rows) * cols + x / rows])
        .collect()
}

fn apply(f: MapFn, x: f32, y: f32) -> f32 {
    match f {
        MapFn::Add => x + y,
        MapFn::Sub => x - y,
        MapFn::Mul => x * y,
        MapFn::Div => x / y,
        MapFn::Max => x.max(y),
        MapFn::Min => x.min(y),
        MapFn::Exp => x.exp(),
        MapFn::Exp2 => x.exp2(),
        MapFn::Log => x.ln(),
        MapFn::Neg => -x,
        MapFn::Abs => x.abs(),
        MapFn::Rsqrt => 1.0 / x.sqrt(),
        MapFn::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        MapFn::Silu => x / (1.0 + (-x).exp()),
        MapFn::Tanh => x.tanh(),
        MapFn::Ge => f32::from(u8::from(x >= y)),
        MapFn::Copy => x,
    }
}
