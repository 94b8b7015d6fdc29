//! The attention forward as the 8-wave ping-pong, the AMD schedule (HipKittens Appendix E.3).
//!
//! Like HipKittens E.3 the scores are computed transposed, `Sᵀ = K·Qᵀ` (keys × queries), so the
//! accumulator's column layout feeds the `P·V` multiply directly and the softmax statistics are column
//! vectors (`col_max`, `sub_col`, `col_sum`, `mul_col`). Each of the 8 waves owns `q_rows` queries; K
//! and V stream through a double-buffered shared ring; the loop alternates memory and compute clusters
//! of the 8-wave ping-pong.
//!
//! The softmax scale stays out of the bf16 operands. Q enters the multiply as stored; the scale
//! `c = log2(e)/√d` is applied to the f32 scores inside the `exp2` argument, `exp2(s·c − max·c)`, as
//! FlashAttention-2 does (its `scale_softmax_log2`, one FMA per score). Scaling Q in bf16 instead rounds
//! every logit with a relative error of up to 2^-9: at logits of ±64 that is an absolute error of about
//! 0.1 in the exponent, a 6e-2 relative error of the output, where PyTorch-style bf16 attention (f32
//! scores) has 4e-3. The running max is kept on unscaled scores (`c > 0` preserves the order).

use super::{declare_io, AttnConfig, Io, Softmax};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Axis, Expr, Kernel, KernelBuilder, MaskRule, Schedule};
use kittens_tile::{BaseShape, Layout, SharedTile};

/// Slots of the K/V ring: 3 with 64-key blocks (gfx950's configuration, HipKittens E.3's block; 96 KiB
/// at head dimension 128 of its 160 KiB), so that the next block is prefetched one iteration ahead and
/// never awaited in the iteration that issues it; 2 with smaller blocks (gfx942's 64 KiB), where the
/// prefetch lands within the iteration.
fn ring(cfg: &AttnConfig) -> u32 {
    if cfg.kv_block >= 64 {
        3
    } else {
        2
    }
}

/// The 8-wave ping-pong program; parameters and tensors as [`super::build`].
pub(super) fn build(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    let (d, qr, kv) = (cfg.dim, cfg.q_rows, cfg.kv_block);
    if d % 32 != 0 || qr % 16 != 0 || kv % 32 != 0 {
        return Err(KernelError::Config(format!(
            "attn_fwd: dim {d} and kv_block {kv} must be multiples of 32, q_rows {qr} of 16"
        )));
    }
    let mut k = KernelBuilder::new(super::name(cfg), Schedule::PingPong8);
    let Io {
        batch,
        heads,
        heads_kv,
        seq,
        seq_kv,
        q,
        k: kg,
        v: vg,
        o,
        lse,
    } = declare_io(&mut k, cfg);
    let block_q = 8 * qr as i64;
    k.grid(
        vec![batch.clone(), heads.clone(), seq.ceil_div(block_q)],
        cfg.remap,
    );
    let (b, h, qb) = (k.block(0), k.block(1), k.block(2));
    let hk = &h / (&heads / heads_kv.clone()); // GQA
    let q0 = &qb * block_q + k.wave() * qr as i64; // this wave's first query

    let k_s = k.shared_tile("k_s", SharedTile::new(Bf16, kv, d), ring(cfg));
    let v_s = k.shared_tile("v_s", SharedTile::new(Bf16, kv, d), ring(cfg));
    let q_f = k.tile("q_f", F32, qr, d, Layout::Row, BaseShape::S16X32);
    let q_r = k.tile("q_r", Bf16, qr, d, Layout::Row, BaseShape::S16X32);
    let q_t = k.tile("q_t", Bf16, d, qr, Layout::Col, BaseShape::S32X16);
    let k_r = k.tile("k_r", Bf16, kv, d, Layout::Row, BaseShape::S16X32);
    let k_t = k.tile("k_t", Bf16, d, kv, Layout::Col, BaseShape::S32X16);
    let v_r = k.tile("v_r", Bf16, kv, d, Layout::Col, BaseShape::S32X16);
    let att = k.tile("att", F32, kv, qr, Layout::Col, BaseShape::S16X16);
    let att_b = k.tile("att_b", Bf16, kv, qr, Layout::Col, BaseShape::S32X16);
    let o_r = k.tile("o_r", F32, d, qr, Layout::Col, BaseShape::S16X16);
    let o_q = k.tile("o_q", F32, qr, d, Layout::Row, BaseShape::S16X16);
    let mut softmax = Softmax::declare(&mut k, att, Axis::Cols, d);
    softmax.floor = cfg.empty_rows();
    let (max_v, scale, norm) = (softmax.max, softmax.scale, softmax.norm);
    let lse_v = lse.map(|_| k.col_vec("lse_v", att, F32));
    // Rows that keep no key divide a zero output by a zero sum: a guarded reciprocal instead.
    let inv_norm = softmax.floor.then(|| k.col_vec("inv_norm", att, F32));

    // `rows` rows of head `hh` of tensor `g` from sequence position `s0`, all `d` columns.
    let view = |k: &KernelBuilder, g, hh: &Expr, s0: Expr, rows| {
        k.gview(
            g,
            vec![b.clone(), hh.clone(), s0, Expr::c(0)],
            2,
            3,
            rows,
            d,
        )
    };
    let offset = cfg.causal_offset(&seq, &seq_kv);
    let n_kv = super::key_blocks(&seq_kv, &((&qb + 1) * block_q - 1), offset.as_ref(), kv);

    // Prologue: K0, V0 into slot 0; this wave's Q as stored (bf16, unscaled), transposed for K·Qᵀ.
    // Q passes through an f32 tile (both conversions are exact) so that the prologue consumes its
    // loads: the HIP compiler waits for a load at its first use and cannot see the async K/V loads, so
    // a first use inside the loop would make every step wait for the K/V prefetch.
    k.load_async(k.smem(k_s, 0), view(&k, kg, &hk, Expr::c(0), kv));
    k.load_async(k.smem(v_s, 0), view(&k, vg, &hk, Expr::c(0), kv));
    k.load_global(q_f, view(&k, q, &h, q0.clone(), qr));
    k.copy(q_r, q_f);
    k.transpose(q_t, q_r);
    k.zero(o_r);
    k.zero(norm);
    k.neg_infty(max_v);
    if ring(cfg) == 3 {
        // Step 1 in flight too; step 0 landed and visible.
        k.load_async(k.smem(k_s, 1), view(&k, kg, &hk, Expr::c(kv as i64), kv));
        k.load_async(k.smem(v_s, 1), view(&k, vg, &hk, Expr::c(kv as i64), kv));
        k.wait_async(2);
    } else {
        k.wait_async(0);
    }
    k.barrier();
    // S = K·Qᵀ masked, then the softmax: whole (`split` false), or without its running sum, which
    // then runs beside the P·V MFMAs.
    let scores = |k: &mut KernelBuilder, j: &Expr, split: bool| {
        k.transpose(k_t, k_r);
        k.zero(att);
        k.mma_atb(att, k_t, q_t, att);
        let (kv0, inf) = (j * kv as i64, f32::NEG_INFINITY);
        k.mask(att, MaskRule::RowsBelow(seq_kv.clone()), &kv0, &q0, inf);
        if let Some(offset) = &offset {
            let offset = offset.clone();
            k.mask(att, MaskRule::CausalT { offset }, &kv0, &q0, inf);
        }
        // Scores are Sᵀ = K·Qᵀ here: a query per column.
        if split {
            softmax.step_p(k, att);
        } else {
            softmax.step(k, att);
        }
        k.copy(att_b, att);
    };
    // MFMAs of P·V per wave: d × q_rows over kv keys, 16×16 tiles of K 32 (gfx950's MFMA).
    let pv_mfmas = (d / 16) * (qr / 16) * (kv / 32);
    let pv = |k: &mut KernelBuilder| {
        k.mul_col(o_r, o_r, scale);
        k.mma_atb(o_r, v_r, att_b, o_r);
    };
    k.staggered(|k| {
        k.for_range("j", 0, n_kv, |k, j| {
            if ring(cfg) == 3 {
                // Three slots, two blocks ahead: block j + 1 was issued one iteration ago and lands
                // at the end of this one; K and V reach registers one at a time, so a 64-key block
                // of each is never live at once.
                let (cur, ahead) = (&j % 3, (&j + 2) % 3);
                k.memory("K to registers, prefetch j+2", |k| {
                    k.load(k_r, k.smem(k_s, &cur));
                    let s0 = (&j + 2) * kv as i64;
                    k.load_async(k.smem(k_s, &ahead), view(k, kg, &hk, s0.clone(), kv));
                    k.load_async(k.smem(v_s, &ahead), view(k, vg, &hk, s0, kv));
                    k.wait_shared(0);
                });
                k.compute("K·Qᵀ, softmax max and P", |k| scores(k, &j, true));
                k.memory("V to registers, land j+1", |k| {
                    k.load(v_r, k.smem(v_s, &cur));
                    k.wait_async(2);
                    k.wait_shared(0);
                });
                k.compute("P·V || softmax sum", |k| {
                    pv(k);
                    softmax.step_sum(k, att);
                    // One MFMA, then one vector op, for each of the multiply's MFMAs.
                    k.sched_pairs(1, 1, pv_mfmas);
                });
                return;
            }
            let (tic, toc) = (&j % 2, (&j + 1) % 2);
            k.memory("kv to registers, prefetch next", |k| {
                k.load(k_r, k.smem(k_s, &tic));
                k.load(v_r, k.smem(v_s, &tic));
                k.load_async(
                    k.smem(k_s, &toc),
                    view(k, kg, &hk, (&j + 1) * kv as i64, kv),
                );
                k.load_async(
                    k.smem(v_s, &toc),
                    view(k, vg, &hk, (&j + 1) * kv as i64, kv),
                );
            });
            k.compute("K·Qᵀ, softmax", |k| {
                k.wait_shared(0);
                scores(k, &j, false);
            });
            k.memory("land next kv", |k| k.wait_async(0));
            k.compute("P·V", pv);
        });
    });
    if let Some(inv) = inv_norm {
        softmax.inv_norm(&mut k, inv);
        k.mul_col(o_r, o_r, inv);
    } else {
        k.div_col(o_r, o_r, norm);
    }
    k.transpose(o_q, o_r);
    k.store(view(&k, o, &h, q0.clone(), qr), o_q);
    if let (Some(g), Some(lv)) = (lse, lse_v) {
        // One value per query: the wave's queries are the columns of the transposed scores.
        softmax.lse(&mut k, lv);
        let dst = k.gview(g, vec![b.clone(), h.clone(), q0.clone()], 1, 2, 1, qr);
        k.store(dst, lv);
    }
    Ok(k.finish()?)
}
