//! The backward's tile program: `waves` waves per block, key blocks and query blocks in one grid
//! (the module documentation of [`super`] says why), K/V or Q/dO/O streamed through double-buffered
//! shared rings, everything else in registers.
//!
//! Orientation. Both kinds of block compute the scores transposed, `Sᵀ = K·Qᵀ` (keys × queries), as
//! the AMD forward does (HipKittens E.3): every product is then an `mma_atb` of column-layout operands
//! (the MFMA's natural form), the per-query statistics (lse and D) are column vectors of the score
//! accumulator, and
//!
//! - `dVᵀ += dOᵀ·P`: `mma_atb(dvᵀ, dO, P)` with dO read from shared memory in column layout and `P`
//!   the transpose of `Pᵀ` rounded to bf16 in row layout (a register rename);
//! - `dKᵀ += Qᵀ·dS`: the same with Q and dS;
//! - `dQᵀ += Kᵀ·dSᵀ`: `mma_atb(dqᵀ, K, dSᵀ)` with K read in column layout.
//!
//! The key block reads each Q and dO tile twice from shared memory, in row layout (transposed in
//! registers into the `Qᵀ`, `dOᵀ` operands of `Sᵀ` and `dPᵀ`) and in column layout (the `Q`, `dO`
//! operands of dK and dV): HipKittens §3's row and column loads of one shared tile.
//!
//! Statistics. The log-sum-exp arrives as a column vector of the score tile through a `16 × queries`
//! f32 tile read from the `lse` tensor declared with a zero stride along its rows (every row the same
//! values: one column maximum is the value). `D = rowsum(dO∘O)` is a row sum over an f32 product of
//! `queries × 32` chunks (a queries-per-row vector) copied into the score tile's column vector: on the
//! MFMA lane maps both hold query `i` in the lanes with `lane % 16 = i % 16`.

use super::{name, BwdConfig};
use crate::attn_fwd::strides;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, ReduceOp, RegId,
    Schedule, SharedView,
};
use kittens_tile::{BaseShape, Layout, SharedTile};

/// Rows of the zero-stride tile the log-sum-exp is read through (one base tile of the accumulator).
const LSE_ROWS: u32 = 16;
/// Columns of one chunk of the `dO∘O` product.
const D_CHUNK: u32 = 32;

/// The tensors and parameters, in declaration order.
struct Io {
    batch: Expr,
    heads: Expr,
    heads_kv: Expr,
    seq_q: Expr,
    seq_kv: Expr,
    q: GlobalId,
    k: GlobalId,
    v: GlobalId,
    o: GlobalId,
    d_o: GlobalId,
    lse: GlobalId,
    dq: GlobalId,
    dk: GlobalId,
    dv: GlobalId,
}

fn declare_io(k: &mut KernelBuilder, cfg: &BwdConfig) -> Io {
    let [batch, heads, heads_kv, seq_q, seq_kv] =
        ["batch", "heads", "heads_kv", "seq_q", "seq_kv"].map(|n| k.param(n));
    let dim = Expr::c(i64::from(cfg.dim));
    let tensor = |k: &mut KernelBuilder, name: &str, h: &Expr, s: &Expr, access| -> GlobalId {
        let dims = [
            ("b", batch.clone()),
            ("h", h.clone()),
            ("s", s.clone()),
            ("d", dim.clone()),
        ];
        k.global_strided(name, Bf16, &dims, strides(cfg.layout, h, s, &dim), access)
    };
    let q = tensor(k, "q", &heads, &seq_q, Access::Read);
    let kg = tensor(k, "k", &heads_kv, &seq_kv, Access::Read);
    let v = tensor(k, "v", &heads_kv, &seq_kv, Access::Read);
    let o = tensor(k, "o", &heads, &seq_q, Access::Read);
    let d_o = tensor(k, "do", &heads, &seq_q, Access::Read);
    // `[b, h, s]` contiguous, seen as `[b, h, r, s]` with a zero stride along `r`.
    let lse = k.global_strided(
        "lse",
        F32,
        &[
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("r", Expr::c(i64::from(LSE_ROWS))),
            ("s", seq_q.clone()),
        ],
        vec![
            &heads * seq_q.clone(),
            seq_q.clone(),
            Expr::c(0),
            Expr::c(1),
        ],
        Access::Read,
    );
    let dq = tensor(k, "dq", &heads, &seq_q, Access::Write);
    let dk = tensor(k, "dk", &heads_kv, &seq_kv, Access::Write);
    let dv = tensor(k, "dv", &heads_kv, &seq_kv, Access::Write);
    Io {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_kv,
        q,
        k: kg,
        v,
        o,
        d_o,
        lse,
        dq,
        dk,
        dv,
    }
}

/// What both kinds of block share: the tensors, the block's batch and KV head, the rings.
struct Ctx {
    io: Io,
    cfg: BwdConfig,
    b: Expr,
    hk: Expr,
    group: Expr,
    /// Q (key blocks) or K (query blocks).
    qk_s: kittens_ir::SharedId,
    /// dO (key blocks) or V (query blocks).
    dov_s: kittens_ir::SharedId,
    /// O (key blocks).
    o_s: kittens_ir::SharedId,
    /// `exp(x) = exp2(x·log2 e)`; `c = log2(e)/√d` on the unscaled scores.
    c: f32,
    scale: f32,
}

impl Ctx {
    /// `rows` rows of head `h` of tensor `g` from position `s0`, all `dim` columns.
    fn view(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        h: &Expr,
        s0: Expr,
        rows: u32,
    ) -> kittens_ir::GlobalView {
        k.gview(
            g,
            vec![self.b.clone(), h.clone(), s0, Expr::c(0)],
            2,
            3,
            rows,
            self.cfg.dim,
        )
    }

    /// The log-sum-exp of `n` queries of head `h` from `q0`, times log2(e), into `lse_c` (a column
    /// vector of a score tile), through the zero-stride tile `lse_t`.
    fn load_lse(
        &self,
        k: &mut KernelBuilder,
        lse_t: RegId,
        lse_c: RegId,
        h: &Expr,
        q0: &Expr,
        n: u32,
    ) {
        let view = k.gview(
            self.io.lse,
            vec![self.b.clone(), h.clone(), Expr::c(0), q0.clone()],
            2,
            3,
            LSE_ROWS,
            n,
        );
        k.load_global(lse_t, view);
        k.reduce(Axis::Cols, ReduceOp::Max, lse_c, lse_t, None);
        k.mul(lse_c, lse_c, std::f32::consts::LOG2_E);
    }

    /// `Pᵀ = exp(Sᵀ/√d − lse)` in place on the f32 scores (masked entries are −∞ and become 0), and
    /// `dSᵀ = Pᵀ∘(dPᵀ − D)` in place on `dp`.
    fn probs_and_ds(&self, k: &mut KernelBuilder, s: RegId, dp: RegId, lse_c: RegId, d: RegId) {
        k.mul(s, s, self.c);
        k.sub_col(s, s, lse_c);
        k.exp2(s, s);
        k.sub_col(dp, dp, d);
        k.mul(dp, s, dp);
    }
}

pub(super) fn build(cfg: &BwdConfig) -> Result<Kernel, KernelError> {
    let mut k = KernelBuilder::new(name(cfg), Schedule::Plain { waves: cfg.waves });
    let io = declare_io(&mut k, cfg);
    let (d, step) = (cfg.dim, cfg.step);
    let key_block = i64::from(cfg.waves * cfg.key_rows);
    let query_block = i64::from(cfg.waves * cfg.query_rows);
    let group = &io.heads / io.heads_kv.clone();
    let n_kb = io.seq_kv.ceil_div(key_block);
    let n_qb = io.seq_q.ceil_div(query_block);
    k.grid(
        vec![
            io.batch.clone(),
            io.heads_kv.clone(),
            &n_kb + group.clone() * n_qb.clone(),
        ],
        GridOrder::RowMajor,
    );
    let (b, hk, z) = (k.block(0), k.block(1), k.block(2));
    let ring = |k: &mut KernelBuilder, name| k.shared_tile(name, SharedTile::new(Bf16, step, d), 2);
    let (qk_s, dov_s, o_s) = (
        ring(&mut k, "qk_s"),
        ring(&mut k, "dov_s"),
        ring(&mut k, "o_s"),
    );
    let c = std::f32::consts::LOG2_E / (d as f32).sqrt();
    let ctx = Ctx {
        io,
        cfg: *cfg,
        b,
        hk,
        group,
        qk_s,
        dov_s,
        o_s,
        c,
        scale: 1.0 / (d as f32).sqrt(),
    };
    k.if_else(
        z.lt(n_kb.clone()),
        |k| key_block_body(k, &ctx, &z),
        |k| query_block_body(k, &ctx, &(&z - n_kb.clone()), &n_qb),
    );
    Ok(k.finish()?)
}

/// A key block: keys `z·waves·key_rows + wave·key_rows` .. `+ key_rows` of this wave; dK and dV.
fn key_block_body(k: &mut KernelBuilder, x: &Ctx, z: &Expr) {
    let (cfg, io) = (&x.cfg, &x.io);
    let (d, kr, qs) = (cfg.dim, cfg.key_rows, cfg.step);
    let block0 = z * i64::from(cfg.waves * kr);
    let k0 = &block0 + k.wave() * i64::from(kr);
    let k_r = k.tile("k_r", Bf16, kr, d, Layout::Row, BaseShape::S16X32);
    let k_t = k.tile("k_t", Bf16, d, kr, Layout::Col, BaseShape::S32X16);
    let v_r = k.tile("v_r", Bf16, kr, d, Layout::Row, BaseShape::S16X32);
    let v_t = k.tile("v_t", Bf16, d, kr, Layout::Col, BaseShape::S32X16);
    let dk_t = k.tile("dk_t", F32, d, kr, Layout::Col, BaseShape::S16X16);
    let dv_t = k.tile("dv_t", F32, d, kr, Layout::Col, BaseShape::S16X16);
    let q_r = k.tile("q_r", Bf16, qs, d, Layout::Row, BaseShape::S16X32);
    let q_t = k.tile("q_t", Bf16, d, qs, Layout::Col, BaseShape::S32X16);
    let q_c = k.tile("q_c", Bf16, qs, d, Layout::Col, BaseShape::S32X16);
    let do_r = k.tile("do_r", Bf16, qs, d, Layout::Row, BaseShape::S16X32);
    let do_t = k.tile("do_t", Bf16, d, qs, Layout::Col, BaseShape::S32X16);
    let do_c = k.tile("do_c", Bf16, qs, d, Layout::Col, BaseShape::S32X16);
    let s_t = k.tile("s_t", F32, kr, qs, Layout::Col, BaseShape::S16X16);
    let dp_t = k.tile("dp_t", F32, kr, qs, Layout::Col, BaseShape::S16X16);
    let p_b = k.tile("p_b", Bf16, kr, qs, Layout::Row, BaseShape::S16X32);
    let p_c = k.tile("p_c", Bf16, qs, kr, Layout::Col, BaseShape::S32X16);
    let ds_b = k.tile("ds_b", Bf16, kr, qs, Layout::Row, BaseShape::S16X32);
    let ds_c = k.tile("ds_c", Bf16, qs, kr, Layout::Col, BaseShape::S32X16);
    let lse_t = k.tile("lse_t", F32, LSE_ROWS, qs, Layout::Col, BaseShape::S16X16);
    let lse_c = k.col_vec("lse_c", s_t, F32);
    let d_c = k.col_vec("d_c", s_t, F32);
    let do_ch = k.tile("do_ch", Bf16, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
    let o_ch = k.tile("o_ch", Bf16, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
    let prod = k.tile("prod", F32, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
    let prod_ch = k.tile("prod_ch", F32, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
    let d_r = k.row_vec("d_r", prod, F32);
    let dk_r = k.tile("dk_r", F32, kr, d, Layout::Row, BaseShape::S16X16);
    let dv_r = k.tile("dv_r", F32, kr, d, Layout::Row, BaseShape::S16X16);

    k.load_global(k_r, x.view(k, io.k, &x.hk, k0.clone(), kr));
    k.load_global(v_r, x.view(k, io.v, &x.hk, k0.clone(), kr));
    k.transpose(k_t, k_r);
    k.transpose(v_t, v_r);
    k.zero(dk_t);
    k.zero(dv_t);
    let step = i64::from(qs);
    let n_q = io.seq_q.ceil_div(step);
    // Causal: the first query step that keeps any key of the block (key j ≥ block0 needs
    // i ≥ j − offset).
    let offset = cfg.causal.offset_expr(&io.seq_q, &io.seq_kv);
    let first = match &offset {
        Some(off) => (&block0 - off.clone()).max(0) / step,
        None => Expr::c(0),
    };
    // One pipeline over every (query head of the group, query step) pair: step `t` is query step
    // `first + t % steps` of the group's head `t / steps`, so the prefetch runs on across heads
    // (a loop over heads around a loop over steps kept four more scalar registers live on gfx942,
    // which clang spilled into vector lanes).
    let steps = &n_q - first.clone();
    let per_head = steps.max(1);
    let head_of = |t: &Expr| &x.hk * x.group.clone() + t / per_head.clone();
    let q0_of = |t: &Expr| (first.clone() + t % per_head.clone()) * step;
    let fill = |k: &mut KernelBuilder, slot: Expr, t: Expr| {
        let (h, q0) = (head_of(&t), q0_of(&t));
        for (ring, g) in [(x.qk_s, io.q), (x.dov_s, io.d_o), (x.o_s, io.o)] {
            k.load_async(k.smem(ring, slot.clone()), x.view(k, g, &h, q0.clone(), qs));
        }
    };
    fill(k, Expr::c(0), Expr::c(0));
    k.wait_async(0);
    k.barrier();
    k.for_range("t", 0, x.group.clone() * steps.max(0), |k, t| {
        let (tic, toc) = (&t % 2, (&t + 1) % 2);
        let (h, q0) = (head_of(&t), q0_of(&t));
        let slot = |k: &KernelBuilder, ring| k.smem(ring, tic.clone());
        // This step's row-layout Q and dO from shared memory.
        k.load(q_r, slot(k, x.qk_s));
        k.load(do_r, slot(k, x.dov_s));
        fill(k, toc.clone(), &t + 1);
        // D = rowsum(dO∘O): the products summed elementwise over D_CHUNK-column chunks, then
        // one row sum (the chunks' waits cover the loads above).
        for ch in 0..d / D_CHUNK {
            let sub = |k: &KernelBuilder, ring| -> SharedView {
                k.smem(ring, tic.clone()).sub(qs, D_CHUNK, 0, ch)
            };
            k.load(do_ch, sub(k, x.dov_s));
            k.load(o_ch, sub(k, x.o_s));
            k.wait_shared(0);
            if ch == 0 {
                k.mul(prod, do_ch, o_ch);
            } else {
                k.mul(prod_ch, do_ch, o_ch);
                k.add(prod, prod, prod_ch);
            }
        }
        k.reduce(Axis::Rows, ReduceOp::Sum, d_r, prod, None);
        k.copy(d_c, d_r);
        x.load_lse(k, lse_t, lse_c, &h, &q0, qs);
        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ.
        k.transpose(q_t, q_r);
        k.transpose(do_t, do_r);
        k.zero(s_t);
        k.mma_atb(s_t, k_t, q_t, s_t);
        k.zero(dp_t);
        k.mma_atb(dp_t, v_t, do_t, dp_t);
        let inf = f32::NEG_INFINITY;
        k.mask(s_t, MaskRule::ColsBelow(io.seq_q.clone()), &k0, &q0, inf);
        if let Some(off) = &offset {
            k.mask(
                s_t,
                MaskRule::CausalT {
                    offset: off.clone(),
                },
                &k0,
                &q0,
                inf,
            );
        }
        // The column-layout Q and dO only now, behind the softmax's vector work: loaded with the
        // row-layout ones they kept 64 more registers live over the products (gfx950: 149 AGPR
        // moves in the loop instead of 35).
        k.load(q_c, slot(k, x.qk_s));
        k.load(do_c, slot(k, x.dov_s));
        x.probs_and_ds(k, s_t, dp_t, lse_c, d_c);
        k.wait_shared(0);
        // dVᵀ += dOᵀ·P, dKᵀ += Qᵀ·dS.
        k.copy(p_b, s_t);
        k.transpose(p_c, p_b);
        k.mma_atb(dv_t, do_c, p_c, dv_t);
        k.copy(ds_b, dp_t);
        k.transpose(ds_c, ds_b);
        k.mma_atb(dk_t, q_c, ds_c, dk_t);
        k.wait_async(0);
        k.barrier();
    });
    k.mul(dk_t, dk_t, x.scale);
    k.transpose(dk_r, dk_t);
    k.store(x.view(k, io.dk, &x.hk, k0.clone(), kr), dk_r);
    k.transpose(dv_r, dv_t);
    k.store(x.view(k, io.dv, &x.hk, k0, kr), dv_r);
}

/// A query block: queries `qb·waves·query_rows + wave·query_rows` .. `+ query_rows` of query head
/// `hk·group + z / n_qb`; dQ.
fn query_block_body(k: &mut KernelBuilder, x: &Ctx, z: &Expr, n_qb: &Expr) {
    let (cfg, io) = (&x.cfg, &x.io);
    let (d, qr, kvs) = (cfg.dim, cfg.query_rows, cfg.step);
    let h = &x.hk * x.group.clone() + z / n_qb.clone();
    let block0 = (z % n_qb.clone()) * i64::from(cfg.waves * qr);
    let q0 = &block0 + k.wave() * i64::from(qr);
    let q_r = k.tile("qq_r", Bf16, qr, d, Layout::Row, BaseShape::S16X32);
    let q_t = k.tile("qq_t", Bf16, d, qr, Layout::Col, BaseShape::S32X16);
    let do_r = k.tile("qdo_r", Bf16, qr, d, Layout::Row, BaseShape::S16X32);
    let do_t = k.tile("qdo_t", Bf16, d, qr, Layout::Col, BaseShape::S32X16);
    let o_f = k.tile("qo_f", F32, qr, d, Layout::Row, BaseShape::S16X32);
    let d_r = k.row_vec("qd_r", o_f, F32);
    let kk_r = k.tile("kk_r", Bf16, kvs, d, Layout::Row, BaseShape::S16X32);
    let kk_t = k.tile("kk_t", Bf16, d, kvs, Layout::Col, BaseShape::S32X16);
    let kk_c = k.tile("kk_c", Bf16, kvs, d, Layout::Col, BaseShape::S32X16);
    let vv_r = k.tile("vv_r", Bf16, kvs, d, Layout::Row, BaseShape::S16X32);
    let vv_t = k.tile("vv_t", Bf16, d, kvs, Layout::Col, BaseShape::S32X16);
    let s_t = k.tile("qs_t", F32, kvs, qr, Layout::Col, BaseShape::S16X16);
    let dp_t = k.tile("qdp_t", F32, kvs, qr, Layout::Col, BaseShape::S16X16);
    let ds_b = k.tile("qds_b", Bf16, kvs, qr, Layout::Col, BaseShape::S32X16);
    let lse_t = k.tile("qlse_t", F32, LSE_ROWS, qr, Layout::Col, BaseShape::S16X16);
    let lse_c = k.col_vec("qlse_c", s_t, F32);
    let d_c = k.col_vec("qd_c", s_t, F32);
    let dq_t = k.tile("dq_t", F32, d, qr, Layout::Col, BaseShape::S16X16);
    let dq_r = k.tile("dq_r", F32, qr, d, Layout::Row, BaseShape::S16X16);

    let step = i64::from(kvs);
    // Causal: key steps up to the last one the block's last query keeps.
    let n_kv = io.seq_kv.ceil_div(step);
    let n_kv = match cfg.causal.offset_expr(&io.seq_q, &io.seq_kv) {
        Some(off) => n_kv.min(
            (&block0 + (i64::from(cfg.waves * qr)) + off)
                .max(0)
                .ceil_div(step),
        ),
        None => n_kv,
    };
    let fill = |k: &mut KernelBuilder, slot: Expr, j: Expr| {
        let k0 = j * step;
        k.load_async(
            k.smem(x.qk_s, slot.clone()),
            x.view(k, io.k, &x.hk, k0.clone(), kvs),
        );
        k.load_async(k.smem(x.dov_s, slot), x.view(k, io.v, &x.hk, k0, kvs));
    };
    fill(k, Expr::c(0), Expr::c(0));
    // This wave's queries: Q and dO transposed for the products, D = rowsum(dO∘O), lse.
    k.load_global(q_r, x.view(k, io.q, &h, q0.clone(), qr));
    k.load_global(do_r, x.view(k, io.d_o, &h, q0.clone(), qr));
    k.load_global(o_f, x.view(k, io.o, &h, q0.clone(), qr));
    k.transpose(q_t, q_r);
    k.transpose(do_t, do_r);
    k.mul(o_f, o_f, do_r);
    k.reduce(Axis::Rows, ReduceOp::Sum, d_r, o_f, None);
    k.copy(d_c, d_r);
    x.load_lse(k, lse_t, lse_c, &h, &q0, qr);
    k.zero(dq_t);
    k.wait_async(0);
    k.barrier();
    k.for_range("j", 0, n_kv, |k, j| {
        let (tic, toc) = (&j % 2, (&j + 1) % 2);
        let kv0 = &j * step;
        k.load(kk_r, k.smem(x.qk_s, tic.clone()));
        k.load(vv_r, k.smem(x.dov_s, tic.clone()));
        k.load(kk_c, k.smem(x.qk_s, tic.clone()));
        fill(k, toc, &j + 1);
        k.wait_shared(0);
        k.transpose(kk_t, kk_r);
        k.transpose(vv_t, vv_r);
        k.zero(s_t);
        k.mma_atb(s_t, kk_t, q_t, s_t);
        k.zero(dp_t);
        k.mma_atb(dp_t, vv_t, do_t, dp_t);
        let inf = f32::NEG_INFINITY;
        k.mask(s_t, MaskRule::RowsBelow(io.seq_kv.clone()), &kv0, &q0, inf);
        if let Some(off) = cfg.causal.offset_expr(&io.seq_q, &io.seq_kv) {
            k.mask(s_t, MaskRule::CausalT { offset: off }, &kv0, &q0, inf);
        }
        x.probs_and_ds(k, s_t, dp_t, lse_c, d_c);
        // dQᵀ += Kᵀ·dSᵀ.
        k.copy(ds_b, dp_t);
        k.mma_atb(dq_t, kk_c, ds_b, dq_t);
        k.wait_async(0);
        k.barrier();
    });
    k.mul(dq_t, dq_t, x.scale);
    k.transpose(dq_r, dq_t);
    k.store(x.view(k, io.dq, &h, q0, qr), dq_r);
}
