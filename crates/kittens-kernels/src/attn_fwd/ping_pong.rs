//! The attention forward as the 8-wave ping-pong, the AMD schedule (HipKittens Appendix E.3).
//!
//! Like HipKittens E.3 the scores are computed transposed, `Sᵀ = K·Qᵀ` (keys × queries), so the
//! accumulator's column layout feeds the `P·V` multiply directly and the softmax statistics are column
//! vectors (`col_max`, `sub_col`, `col_sum`, `mul_col`). Each of the 8 waves owns `q_rows` queries; K
//! and V stream through a shared ring; the loop alternates memory and compute clusters of the 8-wave
//! ping-pong.
//!
//! With 64-key blocks (gfx950) each block is taken as two 32-key halves, so that a compute cluster
//! always has one half's MFMAs to issue while the softmax of the other proceeds (HipKittens E.3's
//! compute clusters): `K·Qᵀ` of the second half beside the max, `exp2` and P of the first; `P·V` of
//! the first half beside the softmax of the second; `P·V` of the second beside the running sums.
//! The online softmax steps once per half (FlashAttention-2 §3.1 over 32-key blocks), which costs one
//! more rescale of the output per block and changes nothing else.
//!
//! The softmax scale stays out of the bf16 operands. Q enters the multiply as stored; the scale
//! `c = log2(e)/√d` is applied to the f32 scores inside the `exp2` argument, `exp2(s·c − max·c)`, as
//! FlashAttention-2 does (its `scale_softmax_log2`, one FMA per score). Scaling Q in bf16 instead rounds
//! every logit with a relative error of up to 2^-9: at logits of ±64 that is an absolute error of about
//! 0.1 in the exponent, a 6e-2 relative error of the output, where PyTorch-style bf16 attention (f32
//! scores) has 4e-3. The running max is kept on unscaled scores (`c > 0` preserves the order).

use super::{declare_io, split, AttnConfig};
use crate::attn::score::Alibi;
use crate::attn::Softmax;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Axis, Expr, GlobalId, GlobalView, Kernel, KernelBuilder, MaskRule, RegId, Rounding, Schedule,
    SharedId,
};
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

/// What both loops share: the configuration, the rings, Q and the output, the softmax, and where this
/// wave's queries and this block's KV head are.
struct Body<'a> {
    cfg: &'a AttnConfig,
    k_s: SharedId,
    v_s: SharedId,
    kg: GlobalId,
    vg: GlobalId,
    q_t: RegId,
    o_r: RegId,
    /// The key blocks this block walks (all, or its part under a key split) with the keys it keeps,
    /// the last key's offset (the causal mask's diagonal, top-left or bottom-right, or a window's
    /// right side) and the first key's (a window's left side).
    keys: split::KeyRange,
    offset: Option<Expr>,
    start: Option<Expr>,
    q0: Expr,
    b: Expr,
    hk: Expr,
    /// ALiBi: the slope (a column vector of the score tiles) and `seq_kv − seq`.
    alibi: Option<(RegId, Expr)>,
}

impl Body<'_> {
    /// `rows` rows of KV head `hk` of tensor `g` from sequence position `s0`, all `d` columns.
    fn kv_view(&self, k: &KernelBuilder, g: GlobalId, s0: Expr, rows: u32) -> GlobalView {
        k.gview(
            g,
            vec![self.b.clone(), self.hk.clone(), s0, Expr::c(0)],
            2,
            3,
            rows,
            self.cfg.dim,
        )
    }

    /// Step `j`'s key block of K and of V into ring slot `slot`, asynchronously.
    fn prefetch(&self, k: &mut KernelBuilder, slot: &Expr, j: Expr) {
        let s0 = self.keys.at(&j) * self.cfg.kv_block as i64;
        let kv = self.cfg.kv_block;
        k.load_async(
            k.smem(self.k_s, slot),
            self.kv_view(k, self.kg, s0.clone(), kv),
        );
        k.load_async(k.smem(self.v_s, slot), self.kv_view(k, self.vg, s0, kv));
    }

    /// `att = K·Qᵀ` from the K rows in `k_r` (keys `kv0..`), masked past the keys kept and, when
    /// causal, above the (possibly offset) diagonal.
    fn scores(&self, k: &mut KernelBuilder, k_r: RegId, k_t: RegId, att: RegId, kv0: &Expr) {
        k.transpose(k_t, k_r);
        k.zero(att);
        k.mma_atb(att, k_t, self.q_t, att);
        self.cfg.logits.cap(k, att, self.cfg.dim);
        if let Some((slope, delta)) = &self.alibi {
            // Keys per row, queries per column.
            Alibi::add(k, att, *slope, kv0, &(&self.q0 + delta.clone()));
        }
        let inf = f32::NEG_INFINITY;
        k.mask(
            att,
            MaskRule::RowsBelow(self.keys.limit.clone()),
            kv0,
            &self.q0,
            inf,
        );
        if let Some(offset) = &self.offset {
            let rule = MaskRule::CausalT {
                offset: offset.clone(),
            };
            k.mask(att, rule, kv0, &self.q0, inf);
        }
        if let Some(offset) = &self.start {
            let rule = MaskRule::WindowStartT {
                offset: offset.clone(),
            };
            k.mask(att, rule, kv0, &self.q0, inf);
        }
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
    let mut k = KernelBuilder::new(&super::name(cfg), Schedule::PingPong8);
    let mut io = declare_io(&mut k, cfg);
    let [b, h, qb, hk] = super::query_grid(&mut k, &mut io, cfg, cfg.remap);
    let block_q = 8 * qr as i64;
    let q0 = &qb * block_q + k.wave() * qr as i64; // this wave's first query

    let k_s = k.shared_tile("k_s", SharedTile::new(Bf16, kv, d), ring(cfg));
    let v_s = k.shared_tile("v_s", SharedTile::new(Bf16, kv, d), ring(cfg));
    let q_f = k.tile("q_f", F32, qr, d, Layout::Row, BaseShape::S16X32);
    let q_r = k.tile("q_r", Bf16, qr, d, Layout::Row, BaseShape::S16X32);
    let q_t = k.tile("q_t", Bf16, d, qr, Layout::Col, BaseShape::S32X16);
    let o_r = k.tile("o_r", F32, d, qr, Layout::Col, BaseShape::S16X16);
    let o_q = k.tile("o_q", F32, qr, d, Layout::Row, BaseShape::S16X16);
    let offset = cfg.last_key_offset(&io.seq, &io.seq_kv);
    let start = cfg.first_key_offset(&io.seq, &io.seq_kv);
    // This block's key blocks: all its queries need, or its part of them (`super::split`).
    let q_rows = (&qb * block_q, (&qb + 1) * block_q - 1);
    let keys = split::KeyRange::new(&io, cfg, &q_rows.0, &q_rows.1);
    let n_kv = keys.count.clone();
    let mut body = Body {
        cfg,
        k_s,
        v_s,
        kg: io.k,
        vg: io.v,
        q_t,
        o_r,
        keys,
        offset,
        start,
        q0: q0.clone(),
        b: b.clone(),
        hk,
        alibi: None,
    };
    // The score tiles: one per block, or one per half-block (module docs).
    let rows = if ring(cfg) == 3 { kv / 2 } else { kv };
    let att = k.tile("att", F32, rows, qr, Layout::Col, BaseShape::S16X16);
    let mut softmax = Softmax::declare(&mut k, att, Axis::Cols, cfg);
    softmax.floor = cfg.empty_rows();
    let lse_v = io.lse.map(|_| k.col_vec("lse_v", att, F32));
    // Rows that keep no key divide a zero output by a zero sum: a guarded reciprocal instead.
    let inv_norm = softmax.floor.then(|| k.col_vec("inv_norm", att, F32));

    // Prologue: K0, V0 into slot 0; this wave's Q as stored (bf16, unscaled), transposed for K·Qᵀ.
    // Q passes through an f32 tile (both conversions are exact) so that the prologue consumes its
    // loads: the HIP compiler waits for a load at its first use and cannot see the async K/V loads, so
    // a first use inside the loop would make every step wait for the K/V prefetch.
    body.prefetch(&mut k, &Expr::c(0), Expr::c(0));
    k.load_global(
        q_f,
        k.gview(
            io.q,
            vec![b.clone(), h.clone(), q0.clone(), Expr::c(0)],
            2,
            3,
            qr,
            d,
        ),
    );
    k.copy(q_r, q_f);
    k.transpose(q_t, q_r);
    k.zero(o_r);
    k.zero(softmax.norm);
    k.neg_infty(softmax.max);
    let delta = &io.seq_kv - io.seq.clone();
    body.alibi = io
        .alibi_slope(&mut k, cfg, (&b, &h), (att, Axis::Cols))
        .map(|v| (v, delta));
    if ring(cfg) == 3 {
        // Step 1 in flight too; step 0 landed and visible.
        body.prefetch(&mut k, &Expr::c(1), Expr::c(1));
        k.wait_async(2);
    } else {
        k.wait_async(0);
    }
    k.barrier();
    if ring(cfg) == 3 {
        three_slot_loop(&mut k, &body, &softmax, att, &n_kv);
    } else {
        two_slot_loop(&mut k, &body, &softmax, att, &n_kv);
    }
    if let Some(inv) = inv_norm {
        softmax.inv_norm(&mut k, inv);
        k.mul_col(o_r, o_r, inv);
    } else {
        k.div_col(o_r, o_r, softmax.norm);
    }
    k.transpose(o_q, o_r);
    k.rounding = cfg.rounding; // the output's rounding to bf16
    let at = vec![b.clone(), h.clone(), q0.clone(), Expr::c(0)];
    k.store(io.out(&k, io.o, at, (2, 3), (qr, d)), o_q);
    k.rounding = Rounding::Rtne;
    if let (Some(g), Some(lv)) = (io.lse, lse_v) {
        // One value per query: the wave's queries are the columns of the transposed scores.
        softmax.lse(&mut k, lv);
        k.store(io.out(&k, g, vec![b, h, q0], (1, 2), (1, qr)), lv);
    }
    Ok(k.finish()?)
}

/// Two slots (gfx942): the whole block's K and V to registers, the next block prefetched and landed
/// within the iteration; scores and softmax, then P·V.
fn two_slot_loop(k: &mut KernelBuilder, body: &Body, softmax: &Softmax, att: RegId, n_kv: &Expr) {
    let (d, qr, kv) = (body.cfg.dim, body.cfg.q_rows, body.cfg.kv_block);
    let k_r = k.tile("k_r", Bf16, kv, d, Layout::Row, BaseShape::S16X32);
    let k_t = k.tile("k_t", Bf16, d, kv, Layout::Col, BaseShape::S32X16);
    let v_r = k.tile("v_r", Bf16, kv, d, Layout::Col, BaseShape::S32X16);
    let p = k.tile("p", Bf16, kv, qr, Layout::Col, BaseShape::S32X16);
    let o_r = body.o_r;
    k.staggered(|k| {
        k.for_range("j", 0, n_kv.clone(), |k, j| {
            let (tic, toc) = (&j % 2, (&j + 1) % 2);
            k.memory("kv to registers, prefetch next", |k| {
                k.load(k_r, k.smem(body.k_s, &tic));
                k.load(v_r, k.smem(body.v_s, &tic));
                body.prefetch(k, &toc, &j + 1);
            });
            k.compute("K·Qᵀ, softmax", |k| {
                k.wait_shared(0);
                body.scores(k, k_r, k_t, att, &(body.keys.at(&j) * kv as i64));
                softmax.step(k, att);
                k.copy(p, att);
            });
            k.memory("land next kv", |k| k.wait_async(0));
            k.compute("P·V", |k| {
                k.mul_col(o_r, o_r, softmax.scale);
                k.mma_atb(o_r, v_r, p, o_r);
            });
        });
    });
}

/// Three slots (gfx950, 64-key blocks): the block after next prefetched, the next one landing at the
/// end of the iteration; each block in two 32-key halves whose MFMAs and softmax interleave (module
/// docs). K and V reach registers one at a time, so a 64-key block of each is never live at once.
fn three_slot_loop(
    k: &mut KernelBuilder,
    body: &Body,
    softmax: &Softmax,
    att_a: RegId,
    n_kv: &Expr,
) {
    let (d, qr, kv) = (body.cfg.dim, body.cfg.q_rows, body.cfg.kv_block);
    let half = kv / 2;
    let k_a = k.tile("k_a", Bf16, half, d, Layout::Row, BaseShape::S16X32);
    let k_b = k.tile("k_b", Bf16, half, d, Layout::Row, BaseShape::S16X32);
    let kt_a = k.tile("kt_a", Bf16, d, half, Layout::Col, BaseShape::S32X16);
    let kt_b = k.tile("kt_b", Bf16, d, half, Layout::Col, BaseShape::S32X16);
    let v_a = k.tile("v_a", Bf16, half, d, Layout::Col, BaseShape::S32X16);
    let v_b = k.tile("v_b", Bf16, half, d, Layout::Col, BaseShape::S32X16);
    let att_b = k.tile("att_b", F32, half, qr, Layout::Col, BaseShape::S16X16);
    let p_a = k.tile("p_a", Bf16, half, qr, Layout::Col, BaseShape::S32X16);
    let p_b = k.tile("p_b", Bf16, half, qr, Layout::Col, BaseShape::S32X16);
    let o_r = body.o_r;
    // MFMAs of one half's K·Qᵀ (half × q_rows over d) and of its P·V (d × q_rows over half keys),
    // 16×16 tiles of K 32 (gfx950's MFMA).
    let qk_mfmas = (half / 16) * (qr / 16) * (d / 32);
    let pv_mfmas = (d / 16) * (qr / 16) * (half / 32);
    k.staggered(|k| {
        k.for_range("j", 0, n_kv.clone(), |k, j| {
            let (cur, ahead) = (&j % 3, (&j + 2) % 3);
            let kv0 = body.keys.at(&j) * kv as i64;
            k.memory("K to registers, prefetch j+2", |k| {
                k.load(k_a, k.smem(body.k_s, &cur).sub(half, d, 0, 0));
                k.load(k_b, k.smem(body.k_s, &cur).sub(half, d, 1, 0));
                body.prefetch(k, &ahead, &j + 2);
                k.wait_shared(0);
            });
            k.compute("K·Qᵀ of both halves || softmax of the first", |k| {
                body.scores(k, k_a, kt_a, att_a, &kv0);
                body.scores(k, k_b, kt_b, att_b, &(&kv0 + half as i64));
                softmax.step_p(k, att_a);
                k.copy(p_a, att_a);
                // The first half's MFMAs, then the second's one at a time, each followed by one
                // exponential of the first half's P (its max reduction goes first, unordered).
                k.sched_pairs(qk_mfmas, 0, 1);
                k.sched_mma_exp(1, 1, qk_mfmas);
            });
            k.memory("V to registers, land j+1", |k| {
                k.load(v_a, k.smem(body.v_s, &cur).sub(half, d, 0, 0));
                k.load(v_b, k.smem(body.v_s, &cur).sub(half, d, 1, 0));
                k.wait_async(2);
                k.wait_shared(0);
            });
            k.compute("P·V of each half || softmax of the second", |k| {
                k.mul_col(o_r, o_r, softmax.scale);
                k.mma_atb(o_r, v_a, p_a, o_r);
                softmax.step_sum(k, att_a);
                softmax.step_p(k, att_b);
                k.copy(p_b, att_b);
                k.mul_col(o_r, o_r, softmax.scale);
                k.mma_atb(o_r, v_b, p_b, o_r);
                softmax.step_sum(k, att_b);
                // One MFMA, then up to two vector ops: the second half's max reduction and
                // rescale beside the first half's P·V, the running sums beside the second's.
                // (Ordering the second half's exponentials between the first half's P·V MFMAs
                // too, as the first cluster does, spilled 7 to 9 VGPRs with clang 22.)
                k.sched_pairs(1, 2, 2 * pv_mfmas);
            });
        });
    });
}
