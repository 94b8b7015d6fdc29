//! The varlen key blocks at head dims 192 and 256 (and 128 with a soft cap): the dense Hopper
//! backward's 64-key blocks (`crate::attn_bwd`'s `hopper::wide`, FlashAttention-3's backward at its
//! widest head dims) on the packed tensors, with the sequence handling of [`super`].
//!
//! A block owns 64 keys of one sequence and KV head; the two consumer warpgroups split each
//! 64-query step twice: the scores by queries (warpgroup `g` forms `Sᵀ`, `dPᵀ`, `Pᵀ` and `dSᵀ` for
//! all 64 keys and its 32 queries, and stores `Pᵀ`, `dSᵀ` as bf16 into its half of two shared
//! `64 × 64` exchange tiles), the gradients by 64-column tiles of the head dimension (warpgroup `g`
//! adds `dV += Pᵀ·dO`, `dK += dSᵀ·Q` and `dQ += dS·K` for tiles `g, g + 2, …`,
//! [`crate::attn::hopper_bwd::per_slot`]): at most 4 f32 accumulator tiles per thread, where the
//! 128-key blocks of [`super`] would hold the whole head dimension of dK and dV per wave.
//!
//! As in [`super`]: tile origins are `cu_seqlens[b] + offset`, the TMA fills are unclipped (rows
//! past a sequence are the next one's, every score they meet masked, their P and dS exactly 0), dQ
//! goes into the f32 accumulator by TMA reductions (rows and columns past the tensor clipped: at
//! 192 warpgroup 1's second tile lies past the head dimension and adds nothing), dK and dV are
//! stored bounds-checked at the key sequence's end.

use super::{bias_and_masks, Io};
use crate::attn::hopper::COLS;
use crate::attn::hopper_bwd::{
    schedule, step_probs, wide_stages, StepFns, WideTiles, REDUCE_BOX, WIDE_BLOCK,
};
use crate::attn::varlen::{KeyWalk, VarlenConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Axis, Expr, GlobalId, Kernel, KernelBuilder, RegId, Scope};
use kittens_tile::{BaseShape, Layout};

/// Keys per block.
const BLOCK: u32 = WIDE_BLOCK;
/// Queries per streamed step; each consumer warpgroup's scores take half.
const STEP: u32 = 64;
const HALF: u32 = STEP / 2;

/// Whether [`super::build`] builds `cfg` here: past head dim 128, and at 128 with a soft cap.
pub(super) fn takes(cfg: &VarlenConfig) -> bool {
    cfg.dim > 128 || (cfg.dim == 128 && cfg.logits.softcap.is_some())
}

/// [`super::build`]'s program (its tensors and parameters) on 64-key blocks: grid `[batch,
/// heads_kv, ⌈max_seqlen_k / 64⌉]`.
pub(super) fn build(cfg: &VarlenConfig) -> Result<Kernel, KernelError> {
    let d = cfg.dim;
    if !matches!(d, 128 | 192 | 256) {
        return Err(KernelError::Config(format!(
            "head dim: the sm_90a varlen backward's 64-key blocks take 128, 192 or 256, got {d}"
        )));
    }
    let name = cfg.name("attn_varlen_bwd") + "_wide_sm90";
    let mut k = KernelBuilder::new(&name, schedule());
    let io = Io::declare(&mut k, cfg, BLOCK);
    let [q, kk, v, d_o, lse, delta, dk_g, dv_g, dq_g] = io.g;
    let ((b, hk, kb), (len_q, len_k)) = (io.blk, io.lens);
    let (alibi, sq, group) = (io.alibi, io.sq, io.group);

    // Shared memory: K and V (the block's), Q and dO (a ring of steps), Pᵀ and dSᵀ (exchanged),
    // each warpgroup's staging of its dQ share for the TMA reduction.
    let halves = (d / COLS) as usize;
    let st = wide_stages(d, 2 * BLOCK * STEP * 2 + 2 * REDUCE_BOX)?;
    let w = WideTiles::declare(&mut k, halves, st, cfg.alibi);
    let (s, dp, p, ds, slope) = (w.s, w.dp, w.p, w.ds, w.slope);
    let dq_p = k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16);

    // One pipeline over the (query head of the group, query step) pairs that reach the block.
    let block0 = &kb * i64::from(BLOCK); // in the key sequence
    let step = i64::from(STEP);
    let lens = (&len_q, &len_k);
    let walk = KeyWalk::new(cfg, lens, (&block0, BLOCK), (&hk, &group), step);
    let total = &walk.total;
    let head_of = |t: &Expr| walk.head_of(t);
    let q0_of = |t: &Expr| walk.q0_of(t); // in the query sequence
    let ring = i64::from(st);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let (g, wq) = (&cw / 4, &cw % 4); // warpgroup, wave in it
    let k0 = &block0 + &wq * 16; // this wave's first key, in the sequence
    let scale = cfg.logits.scale(d);
    let capped = cfg.logits.softcap.is_some();
    let (last_key, first_key) = (
        cfg.last_key_offset(&len_q, &len_k),
        cfg.first_key_offset(&len_q, &len_k),
    );
    // `rows × 64` of head `h` of packed tensor `src` from packed row `row`, columns from `col0`.
    let view = |k: &KernelBuilder, src: GlobalId, row: Expr, h: &Expr, col0: Expr, rows| {
        k.gview(src, vec![h.clone(), row, col0], 1, 2, rows, COLS)
    };
    let col = |i: usize| Expr::c(i as i64 * i64::from(COLS));
    // Step `t`'s statistics for this warpgroup's 32 queries (one per column).
    let stat = |k: &mut KernelBuilder, src: GlobalId, dst: RegId, t: &Expr| {
        let q = &sq.start_q + (q0_of(t) + &g * i64::from(HALF));
        let v = k.gview(src, vec![head_of(t), Expr::c(0), q], 1, 2, 16, HALF);
        k.load_global(dst, v);
    };
    let kv_row = &sq.start_k + block0.clone();
    k.roles(
        |k| {
            for (own, src) in [(&w.k_s, kk), (&w.v_s, v)] {
                for (i, &t) in own.iter().enumerate() {
                    let src = view(k, src, kv_row.clone(), &hk, col(i), BLOCK);
                    k.load_async_by(Scope::WarpGroup, k.smem(t, 0), src);
                }
            }
            k.wait_async(0);
            k.barrier(); // K and V to the consumers
            k.for_range("t", 0, total, |k, t| {
                let slot = &t % ring;
                let (h, row) = (head_of(&t), &sq.start_q + q0_of(&t));
                for (tiles, src) in [(&w.q_s, q), (&w.do_s, d_o)] {
                    for (i, &ts) in tiles.iter().enumerate() {
                        let src = view(k, src, row.clone(), &h, col(i), STEP);
                        k.load_async_by(Scope::WarpGroup, k.smem(ts, slot.clone()), src);
                    }
                }
                k.wait_async(0);
                k.barrier(); // query step t to the consumers
            });
        },
        |k| {
            k.barrier(); // K and V have landed
            for &r in w.dk_r.iter().chain(&w.dv_r) {
                k.zero(r);
            }
            if !capped {
                stat(k, lse, s, &Expr::c(0));
            }
            k.for_range("t", 0, total, |k, t| {
                k.barrier(); // query step t has landed
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                let qg = &q0 + &g * i64::from(HALF); // this warpgroup's first query
                let product = |k: &mut KernelBuilder, dst: RegId, from_zero: bool| {
                    w.product(k, dst, from_zero, &slot, (&g, &wq));
                };
                let fns = StepFns {
                    product: &product,
                    lse: &|k, dst| stat(k, lse, dst, &t),
                    delta: &|k, dst| stat(k, delta, dst, &t),
                    slope: &|k, scratch| {
                        if let (Some(a), Some(v)) = (&alibi, slope) {
                            a.load(k, (&b, &h), scratch, (v, Axis::Rows), &cfg.logits, d);
                        }
                    },
                    bias_and_masks: &|k, x| {
                        let masks = (&last_key, &first_key);
                        bias_and_masks(k, x, slope, masks, (&qg, &k0), (&len_q, &len_k));
                    },
                };
                step_probs(k, (&cfg.logits, d), (s, dp, p), &fns);
                k.copy(ds, dp);
                // Pᵀ and dSᵀ exchanged; dV += Pᵀ·dO and dK += dSᵀ·Q over the step's 64 queries,
                // this warpgroup's column tiles.
                w.exchange(k, (&g, &wq));
                w.accumulate(k, &slot, (&g, &wq));
                // dQ += dS·K, the add outside the warpgroup's branch (module docs).
                let q_row = &sq.start_q + (&q0 + &wq * 16);
                for a in 0..w.slots {
                    w.dq_share(k, dq_p, a, (&g, &wq));
                    let c = (&g + 2 * a as i64) * i64::from(COLS);
                    k.atomic_add(view(k, dq_g, q_row.clone(), &h, c, 16), dq_p);
                }
                // The next step's log-sum-exp into the free score tile (`step_probs`).
                if !capped {
                    stat(k, lse, s, &(&t + 1));
                }
            });
            // Slot `a` holds tile `2a + g` (at 192, warpgroup 1's second slot is tile 3: past the
            // head dimension, stored nowhere); no branch on the warpgroup around the stores (the
            // dense program's docs say why).
            let row = &sq.start_k + k0.clone();
            for (a, (&dkr, &dvr)) in w.dk_r.iter().zip(&w.dv_r).enumerate() {
                k.mul(dkr, dkr, scale);
                let c = (&g + 2 * a as i64) * i64::from(COLS);
                k.store(view(k, dk_g, row.clone(), &hk, c.clone(), 16), dkr);
                k.store(view(k, dv_g, row.clone(), &hk, c, 16), dvr);
            }
        },
    );
    Ok(k.finish()?)
}
