//! The Hopper key blocks at head dimensions 192 and 256 (FlashAttention-3's backward at its widest
//! head dims: 64 × 64 tiles, the score tiles exchanged through shared memory, each warpgroup holding
//! part of the head dimension of dK and dV).
//!
//! At 128 keys per block ([`super`]) each consumer wave holds 16 keys of dK and dV over the whole
//! head dimension: `dim` f32 registers per thread, 192 or 256 of the 240 before any score. Here a
//! block owns 64 keys, and the two consumer warpgroups split each 64-query step's work twice:
//!
//! - the scores by queries: warpgroup `g` computes `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` for all 64 keys and
//!   its 32 queries (`wgmma m64n32`, K and the slot's rows `32g..` from shared memory), and from them
//!   `Pᵀ` and `dSᵀ` as in [`super`], stored as bf16 into its 32 columns of two shared `64 × 64` tiles;
//! - the gradients by head-dimension columns: after a consumers barrier, warpgroup `g` adds
//!   `dV += Pᵀ·dO` and `dK += dSᵀ·Q` (A and B from shared memory) for its 64-column tiles `g, g + 2`
//!   of the head dimension (at 192 warpgroup 1 takes one tile, warpgroup 0 two): at most 4 f32
//!   tiles of 32 registers per thread.
//!
//! With `atomic_dq` (the FlashAttention-3 form, [`crate::attn::bwd_strips`] before and after)
//! each warpgroup also adds `dQ += dS·K` for its column tiles over the step's 64 queries: `dSᵀ` read
//! back transposed from the same shared tile, K from the block's own, one 16 × 64 f32 share at a
//! time through [`kittens_ir::Op::AtomicAdd`].
//!
//! One exchange tile each for `Pᵀ` and `dSᵀ` (two slots would not fit beside two ring slots of Q
//! and dO at 256): a consumers barrier before the store (the other warpgroup's products of the
//! last step have read it) and one after (both halves stored).

use super::{key_blocks, turn, view, KeyBlocks, KeyStep, QueryWalk, StepRegs, COLS, CONSUMER_REGS};
use crate::attn::hopper::padded_dim;
use crate::attn::hopper_bwd::{wide_stages, WideTiles, REDUCE_BOX, WIDE_BLOCK};
use crate::attn_bwd::{BwdConfig, BwdTurns};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Expr, GlobalId, Kernel, KernelBuilder, RegId, Scope};
use kittens_tile::{BaseShape, Layout};

/// Keys per block (one `m64` per warpgroup, both warpgroups on the same keys).
const BLOCK: u32 = WIDE_BLOCK;
/// Queries per streamed step; each warpgroup's scores take half.
const STEP: u32 = 64;
const HALF: u32 = STEP / 2;

/// Whether the Hopper backward builds `cfg` here: the head dims past 128.
pub(crate) fn takes(cfg: &BwdConfig) -> bool {
    cfg.dim > 128
}

fn check(cfg: &BwdConfig) -> Result<(), KernelError> {
    if matches!(cfg.dim, 192 | 256) {
        Ok(())
    } else {
        Err(KernelError::Config(format!(
            "attn_bwd (producer/consumer, 64-key blocks): dim {} must be 192 or 256 (64-column \
             tiles split between two consumer warpgroups of {CONSUMER_REGS} registers)",
            cfg.dim
        )))
    }
}

/// The key blocks at head dims 192 and 256: `dk, dv` (bf16, written) after the inputs, and with
/// `atomic_dq` `dq_acc` (f32, added to). Grid `[batch, heads_kv, key blocks]`.
pub(crate) fn build_kv(cfg: &BwdConfig, atomic_dq: bool) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let d = cfg.dim;
    let KeyBlocks {
        mut k,
        io,
        dk_g,
        dv_g,
        dq_acc,
        b,
        hk,
        kb,
    } = key_blocks(cfg, atomic_dq, BLOCK);

    // Shared memory: K and V (the block's), Q and dO (a ring of steps), Pᵀ and dSᵀ (exchanged).
    let halves = (padded_dim(d) / COLS) as usize;
    let exchange = 2 * BLOCK * STEP * 2 + if atomic_dq { 2 * REDUCE_BOX } else { 0 };
    let st = wide_stages(d, exchange)?;
    let w = WideTiles::declare(&mut k, halves, st, cfg.alibi);
    let (s, dp, p, ds, slope) = (w.s, w.dp, w.p, w.ds, w.slope);
    // The atomic form's dQ share of one column tile.
    let dq_p = atomic_dq.then(|| k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16));

    // The walk over (query head of the group, query step), as in `super::build_kv`.
    let block0 = &kb * i64::from(BLOCK);
    let step = i64::from(STEP);
    let walk = QueryWalk::new(cfg, &io, (&block0, BLOCK), &hk, step);
    let (offset, start, total) = (&walk.offset, &walk.start, &walk.total);
    let head_of = |t: &Expr| walk.head_of(t);
    let q0_of = |t: &Expr| walk.q0_of(t);
    let ring = i64::from(st);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let (g, wq) = (&cw / 4, &cw % 4); // warpgroup, wave in it
    let k0 = &block0 + &wq * 16; // this wave's first key
    let scale = cfg.logits.scale(d);
    let capped = cfg.logits.softcap.is_some();
    let key_step = KeyStep {
        cfg,
        io: &io,
        offset,
        start,
        block0: &block0,
        block: BLOCK,
        step,
        atomic_dq,
    };
    let regs = StepRegs { s, dp, p, slope };
    // Step `t`'s statistics for this warpgroup's 32 queries (one per column), as `super` reads them.
    let stat = |k: &mut KernelBuilder, src: GlobalId, dst: RegId, t: &Expr| {
        let origin = vec![
            b.clone(),
            head_of(t),
            Expr::c(0),
            q0_of(t) + &g * i64::from(HALF),
        ];
        let v = k.gview(src, origin, 2, 3, 16, HALF);
        k.load_global(dst, v);
    };
    k.roles(
        |k| {
            for (own, src) in [(&w.k_s, io.k), (&w.v_s, io.v)] {
                for (i, &t) in own.iter().enumerate() {
                    let v = view(k, src, &b, &hk, block0.clone(), i as u32 * COLS, BLOCK);
                    k.load_async_by(Scope::WarpGroup, k.smem(t, 0), v);
                }
            }
            k.wait_async(0);
            k.barrier(); // K and V to the consumers
            walk.stream(k, &io, &b, [&w.q_s, &w.do_s], ring);
        },
        |k| {
            k.barrier(); // K and V have landed
            for &r in w.dk_r.iter().chain(&w.dv_r) {
                k.zero(r);
            }
            if !capped {
                stat(k, io.lse, s, &Expr::c(0));
            }
            k.for_range("t", 0, total, |k, t| {
                k.barrier(); // query step t has landed
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                let qg = &q0 + &g * i64::from(HALF); // this warpgroup's first query

                // `Sᵀ = K·Qᵀ` or `dPᵀ (+)= V·dOᵀ` for this warpgroup's 32 queries, 64 columns of
                // the head dimension at a time.
                let product = |k: &mut KernelBuilder, dst: RegId, from_zero: bool| {
                    let on = cfg.turns != BwdTurns::None && dst == s;
                    turn(k, on, "Sᵀ", &|k| {
                        w.product(k, dst, from_zero, &slot, (&g, &wq));
                    });
                };
                let bht = (&b, &h, &t);
                key_step.probs(k, &regs, bht, &q0, (&k0, &qg), &product, &|k, g, dst, t| {
                    stat(k, g, dst, t)
                });
                k.copy(ds, dp);
                // Pᵀ and dSᵀ exchanged; dV += Pᵀ·dO and dK += dSᵀ·Q over the step's 64 queries,
                // this warpgroup's column tiles; then dQ += dS·K in the atomic form.
                w.exchange(k, (&g, &wq));
                w.accumulate(k, &slot, (&g, &wq));
                if let (Some(dq_g), Some(dq_p)) = (dq_acc, dq_p) {
                    // The add outside the branch (at 192 warpgroup 1's second add falls past the
                    // head dimension and adds nothing).
                    let q_w = &q0 + &wq * 16;
                    for a in 0..w.slots {
                        w.dq_share(k, dq_p, a, (&g, &wq));
                        let col = (&g + 2 * a as i64) * i64::from(COLS);
                        let origin = vec![b.clone(), h.clone(), q_w.clone(), col];
                        k.atomic_add(k.gview(dq_g, origin, 2, 3, 16, COLS), dq_p);
                    }
                }
                // The next step's log-sum-exp into the free score tile (`KeyStep::probs`).
                if !capped {
                    stat(k, io.lse, s, &(&t + 1));
                }
            });
            // Slot `a` holds tile `2a + g` (at 192, warpgroup 1's second slot is tile 3: past the
            // head dimension, stored nowhere). No branch on the warpgroup reads the accumulators
            // here: ptxas serialised every `wgmma` of the kernel (C7520, "WG.AR in divergent path")
            // when these stores and dQ's adds sat in such branches.
            for (a, (&dkr, &dvr)) in w.dk_r.iter().zip(&w.dv_r).enumerate() {
                k.mul(dkr, dkr, scale);
                let col = (&g + 2 * a as i64) * i64::from(COLS);
                for (dst, r) in [(dk_g, dkr), (dv_g, dvr)] {
                    let origin = vec![b.clone(), hk.clone(), k0.clone(), col.clone()];
                    k.store(k.gview(dst, origin, 2, 3, 16, COLS), r);
                }
            }
        },
    );
    Ok(k.finish()?)
}
