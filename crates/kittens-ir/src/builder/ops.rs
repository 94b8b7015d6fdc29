//! The builder's ops ([`KernelBuilder`]'s methods that append one op: memory, mma, element-wise maps,
//! reductions, masks); declarations, views, synchronisation and control flow are in [`super`].

use super::{Arg, KernelBuilder};
use crate::expr::Expr;
use crate::ir::*;
use kittens_hw::dtype::DType;
use kittens_tile::{BaseShape, Layout};

impl KernelBuilder {
    /// Appends one op to the current body.
    pub fn op(&mut self, op: Op) {
        self.stack
            .last_mut()
            .expect("builder body stack is never empty")
            .push(Stmt::Op { op, implied: false });
    }

    /// Async global→shared load shared by every wave of the block.
    pub fn load_async(&mut self, dst: SharedView, src: GlobalView) {
        self.op(Op::LoadAsync {
            dst,
            src,
            scope: Scope::Block,
        });
    }
    pub fn load_async_by(&mut self, scope: Scope, dst: SharedView, src: GlobalView) {
        self.op(Op::LoadAsync { dst, src, scope });
    }
    /// Shared→register load.
    pub fn load(&mut self, dst: RegId, src: SharedView) {
        self.op(Op::LoadShared { dst, src });
    }
    pub fn load_global(&mut self, dst: RegId, src: GlobalView) {
        self.op(Op::LoadGlobal { dst, src });
    }
    pub fn store(&mut self, dst: GlobalView, src: RegId) {
        self.op(Op::StoreGlobal {
            dst,
            src,
            rounding: self.rounding,
        });
    }
    /// `dst += src` element by element, atomically per element ([`Op::AtomicAdd`]): an f32 tensor
    /// that several blocks accumulate into.
    pub fn atomic_add(&mut self, dst: GlobalView, src: RegId) {
        self.op(Op::AtomicAdd { dst, src });
    }
    pub fn store_shared(&mut self, dst: SharedView, src: RegId) {
        self.op(Op::StoreShared {
            dst,
            src,
            rounding: self.rounding,
        });
    }

    /// The general multiply-accumulate; `c: None` starts from zero.
    pub fn mma(&mut self, form: MmaForm, d: RegId, a: MmaOperand, b: MmaOperand, c: Option<RegId>) {
        self.op(Op::Mma { form, d, a, b, c });
    }
    /// [`Self::mma`] of register operands, accumulating onto `c`.
    fn mma_regs(&mut self, form: MmaForm, d: RegId, a: RegId, b: RegId, c: RegId) {
        let (a, b) = (MmaOperand::Reg(a), MmaOperand::Reg(b));
        self.mma(form, d, a, b, Some(c));
    }
    /// `d = a·b + c`.
    pub fn mma_ab(&mut self, d: RegId, a: RegId, b: RegId, c: RegId) {
        self.mma_regs(MmaForm::Ab, d, a, b, c);
    }
    /// `d = a·bᵀ + c`.
    pub fn mma_abt(&mut self, d: RegId, a: RegId, b: RegId, c: RegId) {
        self.mma_regs(MmaForm::Abt, d, a, b, c);
    }
    /// `d = aᵀ·b + c`.
    pub fn mma_atb(&mut self, d: RegId, a: RegId, b: RegId, c: RegId) {
        self.mma_regs(MmaForm::Atb, d, a, b, c);
    }
    /// `d = aᵀ·bᵀ + c`.
    pub fn mma_atbt(&mut self, d: RegId, a: RegId, b: RegId, c: RegId) {
        self.mma_regs(MmaForm::Atbt, d, a, b, c);
    }

    pub fn fill(&mut self, dst: RegId, value: f32) {
        self.op(Op::Fill { dst, value });
    }
    pub fn zero(&mut self, dst: RegId) {
        self.fill(dst, 0.0);
    }
    pub fn neg_infty(&mut self, dst: RegId) {
        self.fill(dst, f32::NEG_INFINITY);
    }

    /// `dst = 1/√src`.
    pub fn rsqrt(&mut self, dst: RegId, src: impl Into<Arg>) {
        self.map(dst, MapFn::Rsqrt, vec![src.into()]);
    }
    /// `dst = −src`.
    pub fn neg(&mut self, dst: RegId, src: impl Into<Arg>) {
        self.map(dst, MapFn::Neg, vec![src.into()]);
    }
    /// `dst = 1 / (1 + e^(−src))` ([`MapFn::Sigmoid`]).
    pub fn sigmoid(&mut self, dst: RegId, src: impl Into<Arg>) {
        self.map(dst, MapFn::Sigmoid, vec![src.into()]);
    }
    /// `dst = tanh(src)` ([`MapFn::Tanh`]).
    pub fn tanh(&mut self, dst: RegId, src: impl Into<Arg>) {
        self.map(dst, MapFn::Tanh, vec![src.into()]);
    }
    /// `dst = src · sigmoid(src)` ([`MapFn::Silu`]).
    pub fn silu(&mut self, dst: RegId, src: impl Into<Arg>) {
        self.map(dst, MapFn::Silu, vec![src.into()]);
    }
    /// `dst = (a ≥ b) ? 1 : 0`.
    pub fn ge(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Ge, vec![a.into(), b.into()]);
    }
    /// Uniform values in [0, 1) from the Philox stream keyed by `(seed, offset)` (each as 32-bit words
    /// `[low, high]`), element `(i, j)` drawing stream index `index0 + i·row_stride + j` ([`Op::Random`]).
    pub fn random(
        &mut self,
        dst: RegId,
        seed: [Expr; 2],
        offset: [Expr; 2],
        index0: impl Into<Expr>,
        row_stride: impl Into<Expr>,
    ) {
        self.op(Op::Random {
            dst,
            seed,
            offset,
            index0: index0.into(),
            row_stride: row_stride.into(),
        });
    }
    /// `dst = f(args…)` elementwise, rounded with the builder's rounding.
    pub fn map(&mut self, dst: RegId, f: MapFn, args: Vec<Arg>) {
        self.op(Op::Map {
            dst,
            f,
            args,
            rounding: self.rounding,
        });
    }
    pub fn add(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Add, vec![a.into(), b.into()]);
    }
    pub fn sub(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Sub, vec![a.into(), b.into()]);
    }
    pub fn mul(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Mul, vec![a.into(), b.into()]);
    }
    pub fn div(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Div, vec![a.into(), b.into()]);
    }
    pub fn max(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Max, vec![a.into(), b.into()]);
    }
    pub fn min(&mut self, dst: RegId, a: impl Into<Arg>, b: impl Into<Arg>) {
        self.map(dst, MapFn::Min, vec![a.into(), b.into()]);
    }
    pub fn exp(&mut self, dst: RegId, src: RegId) {
        self.map(dst, MapFn::Exp, vec![Arg::Reg(src)]);
    }
    pub fn exp2(&mut self, dst: RegId, src: RegId) {
        self.map(dst, MapFn::Exp2, vec![Arg::Reg(src)]);
    }
    pub fn log(&mut self, dst: RegId, src: RegId) {
        self.map(dst, MapFn::Log, vec![Arg::Reg(src)]);
    }
    /// Copy, converting to `dst`'s dtype with the builder's rounding.
    pub fn copy(&mut self, dst: RegId, src: RegId) {
        self.map(dst, MapFn::Copy, vec![Arg::Reg(src)]);
    }
    /// Copy, converting with an explicit rounding mode.
    pub fn convert(&mut self, dst: RegId, src: RegId, rounding: Rounding) {
        self.op(Op::Map {
            dst,
            f: MapFn::Copy,
            args: vec![Arg::Reg(src)],
            rounding,
        });
    }
    /// `dst[i,j] = src[i,j] - v[i]`.
    pub fn sub_row(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Sub, vec![Arg::Reg(src), Arg::RowBcast(v)]);
    }
    pub fn mul_row(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Mul, vec![Arg::Reg(src), Arg::RowBcast(v)]);
    }
    pub fn div_row(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Div, vec![Arg::Reg(src), Arg::RowBcast(v)]);
    }
    /// `dst[i,j] = src[i,j] - v[j]`.
    pub fn sub_col(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Sub, vec![Arg::Reg(src), Arg::ColBcast(v)]);
    }
    /// `dst[i,j] = src[i,j] + v[j]` (a bias along a row).
    pub fn add_col(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Add, vec![Arg::Reg(src), Arg::ColBcast(v)]);
    }
    pub fn mul_col(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Mul, vec![Arg::Reg(src), Arg::ColBcast(v)]);
    }
    pub fn div_col(&mut self, dst: RegId, src: RegId, v: RegId) {
        self.map(dst, MapFn::Div, vec![Arg::Reg(src), Arg::ColBcast(v)]);
    }

    pub fn reduce(&mut self, axis: Axis, op: ReduceOp, dst: RegId, src: RegId, acc: Option<RegId>) {
        self.op(Op::Reduce {
            dst,
            src,
            axis,
            op,
            acc,
        });
    }
    /// `dst[i] = max_j src[i,j]`.
    pub fn row_max(&mut self, dst: RegId, src: RegId) {
        self.reduce(Axis::Rows, ReduceOp::Max, dst, src, None);
    }
    /// `dst[i] = max(acc[i], max_j src[i,j])`.
    pub fn row_max_acc(&mut self, dst: RegId, src: RegId, acc: RegId) {
        self.reduce(Axis::Rows, ReduceOp::Max, dst, src, Some(acc));
    }
    pub fn row_sum(&mut self, dst: RegId, src: RegId) {
        self.reduce(Axis::Rows, ReduceOp::Sum, dst, src, None);
    }
    pub fn row_sum_acc(&mut self, dst: RegId, src: RegId, acc: RegId) {
        self.reduce(Axis::Rows, ReduceOp::Sum, dst, src, Some(acc));
    }
    /// The block-wide row sum of a row split over `parts` waves: `v` (a one-row vector holding this
    /// wave's partial sum of its share of the row) becomes the row's total. Each wave writes its
    /// partial to column `part` of row `row` of the `[rows, parts]` f32 buffer `index` of shared ring
    /// `buf`, the block meets at a barrier, and every wave reads its row's `parts` partials back and
    /// sums them in the same order, so the waves of a row hold bitwise the same total.
    ///
    /// The ops are the ones a kernel would write by hand (shared store, wait, barrier, load, wait,
    /// `row_sum`); every wave of the block must make the call (the barrier). A buffer may be written
    /// again only after a barrier that every wave reaches after reading it: calls in a row (or in a
    /// loop) alternate between two buffers of the ring, whose barriers then order each other's reads.
    pub fn row_sum_across_waves(
        &mut self,
        v: RegId,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        part: impl Into<Expr>,
        parts: u32,
    ) {
        self.row_reduce_across_waves(ReduceOp::Sum, v, buf, index, row, part, parts);
    }

    /// [`Self::row_sum_across_waves`] with the maximum: `v` (this wave's partial maximum) becomes the
    /// row's maximum over its `parts` waves (a softmax's row maximum over a row split over waves).
    pub fn row_max_across_waves(
        &mut self,
        v: RegId,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        part: impl Into<Expr>,
        parts: u32,
    ) {
        self.row_reduce_across_waves(ReduceOp::Max, v, buf, index, row, part, parts);
    }

    /// [`Self::row_sum_across_waves`] of several values at one barrier: each `(v, index)` becomes its
    /// row's total through buffer `index` of ring `buf` (distinct buffers), every partial stored before
    /// the block meets once. The rule for reusing a buffer is [`Self::row_sum_across_waves`]'s.
    pub fn row_sums_across_waves(
        &mut self,
        vs: &[(RegId, Expr)],
        buf: SharedId,
        row: impl Into<Expr>,
        part: impl Into<Expr>,
        parts: u32,
    ) {
        self.reduce_across_waves(ReduceOp::Sum, vs, buf, row.into(), part.into(), parts);
    }

    #[allow(clippy::too_many_arguments)]
    fn row_reduce_across_waves(
        &mut self,
        op: ReduceOp,
        v: RegId,
        buf: SharedId,
        index: impl Into<Expr>,
        row: impl Into<Expr>,
        part: impl Into<Expr>,
        parts: u32,
    ) {
        let vs = [(v, index.into())];
        self.reduce_across_waves(op, &vs, buf, row.into(), part.into(), parts);
    }

    fn reduce_across_waves(
        &mut self,
        op: ReduceOp,
        vs: &[(RegId, Expr)],
        buf: SharedId,
        row: Expr,
        part: Expr,
        parts: u32,
    ) {
        let mut alls = Vec::with_capacity(vs.len());
        for (v, index) in vs {
            let base = format!("{}_{}", self.reg_name(*v), self.k.regs.len());
            let one = self.tile(
                &format!("{base}_partial"),
                DType::F32,
                1,
                1,
                Layout::Row,
                BaseShape::STRIP,
            );
            let all = self.tile(
                &format!("{base}_partials"),
                DType::F32,
                1,
                parts,
                Layout::Row,
                BaseShape::STRIP,
            );
            let slot = self.smem(buf, index.clone());
            self.copy(one, *v);
            self.store_shared(slot.sub(1, 1, row.clone(), part.clone()), one);
            alls.push((all, slot));
        }
        self.wait_shared(0);
        self.barrier();
        for ((v, _), (all, slot)) in vs.iter().zip(alls) {
            self.load(all, slot.sub(1, parts, row.clone(), 0));
            self.wait_shared(0);
            self.reduce(Axis::Rows, op, *v, all, None);
        }
    }

    fn reg_name(&self, r: RegId) -> String {
        self.k
            .regs
            .get(r.0 as usize)
            .map_or_else(|| format!("r{}", r.0), |d| d.name.clone())
    }

    pub fn col_max(&mut self, dst: RegId, src: RegId) {
        self.reduce(Axis::Cols, ReduceOp::Max, dst, src, None);
    }
    pub fn col_sum(&mut self, dst: RegId, src: RegId) {
        self.reduce(Axis::Cols, ReduceOp::Sum, dst, src, None);
    }
    /// `dst[j] = max(acc[j], max_i src[i,j])`.
    pub fn col_max_acc(&mut self, dst: RegId, src: RegId, acc: RegId) {
        self.reduce(Axis::Cols, ReduceOp::Max, dst, src, Some(acc));
    }
    /// `dst[j] = acc[j] + Σ_i src[i,j]`.
    pub fn col_sum_acc(&mut self, dst: RegId, src: RegId, acc: RegId) {
        self.reduce(Axis::Cols, ReduceOp::Sum, dst, src, Some(acc));
    }
    /// `dst[i,j] = v[i]` (broadcast a per-row vector along the rows).
    pub fn broadcast_row(&mut self, dst: RegId, v: RegId) {
        self.map(dst, MapFn::Copy, vec![Arg::RowBcast(v)]);
    }
    /// `dst[i,j] = v[j]`.
    pub fn broadcast_col(&mut self, dst: RegId, v: RegId) {
        self.map(dst, MapFn::Copy, vec![Arg::ColBcast(v)]);
    }
    /// `dst = srcᵀ`, layout swapped (free on the device).
    pub fn transpose(&mut self, dst: RegId, src: RegId) {
        self.op(Op::Transpose { dst, src });
    }
    pub fn swap_layout(&mut self, dst: RegId, src: RegId) {
        self.op(Op::SwapLayout { dst, src });
    }
    /// Elements of `dst` at global `(row0 + i, col0 + j)` that `rule` does not keep become `value`.
    pub fn mask(
        &mut self,
        dst: RegId,
        rule: MaskRule,
        row0: impl Into<Expr>,
        col0: impl Into<Expr>,
        value: f32,
    ) {
        self.op(Op::Mask {
            dst,
            rule,
            row0: row0.into(),
            col0: col0.into(),
            value,
        });
    }

    /// ALiBi's bias ([`Op::Alibi`]): `dst[i][j] += slope·|row0 + i − col0 − j|`, `slope` a row or
    /// column vector of `dst` broadcast along its axis.
    pub fn alibi(
        &mut self,
        dst: RegId,
        slope: RegId,
        row0: impl Into<Expr>,
        col0: impl Into<Expr>,
    ) {
        self.op(Op::Alibi {
            dst,
            slope,
            row0: row0.into(),
            col0: col0.into(),
        });
    }
}
