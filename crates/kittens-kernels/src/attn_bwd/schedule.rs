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

use super::ctx::{declare_io, Ctx, LSE_ROWS};
use super::key_block::KeyBlock;
use super::{name_blocks, BwdBlocks, BwdConfig, BwdSchedule};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Axis, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, ReduceOp, Schedule};
use kittens_tile::{BaseShape, Layout, SharedTile};

/// The backward's tile program for `cfg`: key blocks and query blocks in one grid (or either alone).
pub(super) fn build(cfg: &BwdConfig) -> Result<Kernel, KernelError> {
    let schedule = match cfg.schedule {
        BwdSchedule::Interleave4 => Schedule::Interleave4,
        BwdSchedule::PingPong8 => Schedule::PingPong8,
        _ => Schedule::Plain { waves: cfg.waves },
    };
    let mut k = KernelBuilder::new(&name_blocks(cfg), schedule);
    let io = declare_io(&mut k, cfg);
    let (d, step) = (cfg.dim, cfg.step);
    let key_block = i64::from(cfg.waves * cfg.key_rows);
    let query_block = i64::from(cfg.waves * cfg.query_rows);
    let group = &io.heads / io.heads_kv.clone();
    let n_kb = io.seq_kv.ceil_div(key_block);
    let n_qb = io.seq_q.ceil_div(query_block);
    let blocks = match cfg.blocks {
        BwdBlocks::Both => &n_kb + group.clone() * n_qb.clone(),
        BwdBlocks::Keys => n_kb.clone(),
        // `group` is at least 1 in every problem a launch takes (heads_kv divides heads); the
        // schedule analysis also samples sizes where it is 0, which would leave the grid empty.
        BwdBlocks::Queries => group.clone().max(1) * n_qb.clone(),
    };
    k.grid(
        vec![io.batch.clone(), io.heads_kv.clone(), blocks],
        GridOrder::RowMajor,
    );
    let (b, hk, z) = (k.block(0), k.block(1), k.block(2));
    let ring = |k: &mut KernelBuilder, name| k.shared_tile(name, SharedTile::new(Bf16, step, d), 2);
    let (qk_s, dov_s, o_s) = (
        ring(&mut k, "qk_s"),
        ring(&mut k, "dov_s"),
        ring(&mut k, "o_s"),
    );
    let c = std::f32::consts::LOG2_E * cfg.logits.softmax_scale(d);
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
        scale: cfg.logits.scale(d),
    };
    match cfg.blocks {
        BwdBlocks::Both => k.if_else(
            z.lt(n_kb.clone()),
            |k| key_block_body(k, &ctx, &z),
            |k| query_block_body(k, &ctx, &(&z - n_kb.clone()), &n_qb),
        ),
        BwdBlocks::Keys => key_block_body(&mut k, &ctx, &z),
        BwdBlocks::Queries => query_block_body(&mut k, &ctx, &z, &n_qb),
    }
    Ok(k.finish()?)
}

/// A key block: keys `z·waves·key_rows + wave·key_rows` .. `+ key_rows` of this wave; dK and dV,
/// with the loop the configuration's schedule names.
fn key_block_body(k: &mut KernelBuilder, x: &Ctx, z: &Expr) {
    let kb = KeyBlock::declare(k, x, z);
    kb.prologue(k);
    match x.cfg.schedule {
        BwdSchedule::Interleave4 => super::interleave4::key_loop(k, &kb),
        BwdSchedule::PingPong8 => super::ping_pong::key_loop(k, &kb),
        _ => plain_key_loop(k, &kb),
    }
    kb.epilogue(k);
}

/// The plain loop: one query step per iteration, its next step prefetched at the start.
fn plain_key_loop(k: &mut KernelBuilder, kb: &KeyBlock) {
    kb.fill(k, Expr::c(0), Expr::c(0));
    k.wait_async(0);
    k.barrier();
    k.for_range("t", 0, kb.steps(), |k, t| {
        let (tic, toc) = (&t % 2, (&t + 1) % 2);
        // This step's row-layout Q and dO from shared memory.
        kb.read_rows(k, &tic);
        kb.fill(k, toc.clone(), &t + 1);
        kb.delta(k, &tic, false);
        kb.lse(k, &t);
        kb.scores(k, &t);
        // The column-layout Q and dO only now, behind the softmax's vector work: loaded with the
        // row-layout ones they kept 64 more registers live over the products (gfx950: 149 AGPR
        // moves in the loop instead of 35).
        kb.read_cols(k, &tic);
        kb.probs(k);
        k.wait_shared(0);
        kb.grads(k);
        k.wait_async(0);
        k.barrier();
    });
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
    let slope = cfg.alibi.then(|| k.col_vec("qalibi_c", s_t, F32));

    let step = i64::from(kvs);
    // Causal: key steps up to the last one the block's last query keeps.
    let n_kv = io.seq_kv.ceil_div(step);
    let n_kv = match cfg.last_key_offset(&io.seq_q, &io.seq_kv) {
        Some(off) => n_kv.min(
            (&block0 + (i64::from(cfg.waves * qr)) + off)
                .max(0)
                .ceil_div(step),
        ),
        None => n_kv,
    };
    // A window's left side: from the key step holding the block's first query's first key.
    let start = cfg.first_key_offset(&io.seq_q, &io.seq_kv);
    let j0 = match &start {
        Some(st) => ((&block0 + st.clone()) / step).max(0),
        None => Expr::c(0),
    };
    let fill = |k: &mut KernelBuilder, slot: Expr, j: Expr| {
        let k0 = j * step;
        k.load_async(
            k.smem(x.qk_s, slot.clone()),
            x.view(k, io.k, &x.hk, k0.clone(), kvs),
        );
        k.load_async(k.smem(x.dov_s, slot), x.view(k, io.v, &x.hk, k0, kvs));
    };
    fill(k, Expr::c(0), j0.clone());
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
    let dl_c = cfg.dlse.then(|| k.col_vec("qdl_c", s_t, F32));
    x.fold_dlse(k, (lse_t, dl_c, d_c), &h, &q0, qr);
    x.load_slope(k, s_t, slope, &h);
    k.zero(dq_t);
    k.wait_async(0);
    k.barrier();
    k.for_range("j", 0, (n_kv - j0.clone()).max(0), |k, j| {
        let (tic, toc) = (&j % 2, (&j + 1) % 2);
        let kv0 = (&j0 + j.clone()) * step;
        k.load(kk_r, k.smem(x.qk_s, tic.clone()));
        k.load(vv_r, k.smem(x.dov_s, tic.clone()));
        k.load(kk_c, k.smem(x.qk_s, tic.clone()));
        fill(k, toc, &j0 + j.clone() + 1);
        k.wait_shared(0);
        k.transpose(kk_t, kk_r);
        k.transpose(vv_t, vv_r);
        k.zero(s_t);
        k.mma_atb(s_t, kk_t, q_t, s_t);
        k.zero(dp_t);
        k.mma_atb(dp_t, vv_t, do_t, dp_t);
        let inf = f32::NEG_INFINITY;
        let capped = cfg.logits.cap_t_with_grad(k, s_t, d, dp_t, d_c);
        x.alibi(k, s_t, slope, &kv0, &q0);
        k.mask(s_t, MaskRule::RowsBelow(io.seq_kv.clone()), &kv0, &q0, inf);
        if let Some(off) = cfg.last_key_offset(&io.seq_q, &io.seq_kv) {
            k.mask(s_t, MaskRule::CausalT { offset: off }, &kv0, &q0, inf);
        }
        if let Some(st) = &start {
            let rule = MaskRule::WindowStartT { offset: st.clone() };
            k.mask(s_t, rule, &kv0, &q0, inf);
        }
        x.probs_and_ds(k, s_t, dp_t, lse_c, d_c, capped);
        // dQᵀ += Kᵀ·dSᵀ.
        k.copy(ds_b, dp_t);
        k.mma_atb(dq_t, kk_c, ds_b, dq_t);
        k.wait_async(0);
        k.barrier();
    });
    k.mul(dq_t, dq_t, x.scale);
    k.transpose(dq_r, dq_t);
    if let Some(dq) = io.dq {
        k.store(x.view(k, dq, &h, q0, qr), dq_r);
    }
}
