//! The attention forward warp-specialised, the Hopper schedule (HipKittens §3.3.1; the structure of
//! FlashAttention-3): one producer warpgroup loads this block's 128 queries once and streams K and V
//! through a ring of `stages` shared slots; two consumer warpgroups (8 waves, 16 queries each — one
//! `wgmma m64` per warpgroup) compute
//!
//! - `S = Q·Kᵀ` with both operands read from shared memory (`mma_abt`, K-major Q and K),
//! - the online softmax on the f32 scores in registers, in the scores' own row layout (`row_max`,
//!   `sub_row`, `row_sum`), with `exp2` and the scale folded in on the f32 scores (the module docs of
//!   the ping-pong program say why Q is never scaled in bf16),
//! - `O += P·V` with P converted from the score accumulator to bf16 in registers (`copy` of a 16 × keys
//!   f32 tile into a bf16 tile of the same layout: on Hopper the accumulator fragment of a `wgmma` is
//!   the A-operand fragment of the next one, so the conversion is a pack, no round trip through shared
//!   memory) and V read from shared memory as a keys × dim (`K × N`) operand (`mma_ab`).
//!
//! Shared tiles are 64 columns wide (128 bytes of bf16 per row, the widest TMA/`wgmma` swizzle): a head
//! dimension of 128 is two rings per tensor, and the output two accumulators of 64 columns. Head
//! dimensions 32 and 96 run as 64 and 128 ([`padded_dim`]): the last tile's columns past the head
//! dimension are outside the tensors, so TMA fills them with zeros (they add nothing to `Q·Kᵀ` and
//! give output columns that the stores drop). V's last 32 columns would otherwise need an N-major
//! `wgmma` operand in the 64-byte swizzle, which the Hopper lowering does not take.
//!
//! As in the GEMM's producer/consumer program, the program states the data flow and not the overlap:
//! the barrier after each load is the hand-off of a slot, and the Hopper lowering turns it into
//! full/empty mbarriers so that the producer runs up to `stages` key blocks ahead. The block order is
//! written here: the query blocks of one head are adjacent (they share its K and V in L2) and visited
//! last-first; with a causal mask, paired long with short (`KernelBuilder::pair_long_short`), so
//! that every block of the persistent grid gets about the same number of key blocks.

use super::{declare_io, split, AttnConfig};
use crate::attn::hopper::{
    forward_schedule, padded_dim, ring_stages, turn, view, HopperTiles, RowStats, BLOCK, COLS,
};
use crate::KernelError;
use kittens_ir::{
    Axis, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand, Rounding, Scope,
};

impl AttnConfig {
    /// The Hopper configuration at this head dimension: past 128, 64-key blocks (a 128-key score
    /// tile beside 3 or 4 output accumulators of 64 columns leaves too few of the 232 consumer
    /// registers, and the K and V slots too little shared memory), and at 256 one Q slot (two are
    /// 128 KiB of the 227).
    pub fn fit_hopper(self) -> Self {
        match self.dim {
            d if d > 128 => AttnConfig {
                kv_block: 64,
                q_double: self.q_double && d < 256,
                ..self
            },
            _ => self,
        }
    }
}

pub(super) fn build(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    let kv = cfg.kv_block;
    if !matches!(cfg.dim, 32 | 64 | 96 | 128 | 192 | 256) || !kv.is_multiple_of(64) || kv > 256 {
        return Err(KernelError::Config(format!(
            "attn_fwd (producer/consumer): dim {} must be 32, 64, 96, 128, 192 or 256 (64-column \
             shared tiles), kv_block {kv} a multiple of 64 up to 256",
            cfg.dim
        )));
    }
    let d = padded_dim(cfg.dim);
    if cfg.remap != GridOrder::RowMajor {
        return Err(KernelError::Config(format!(
            "attn_fwd (producer/consumer): grid order {:?} (the program orders its blocks itself)",
            cfg.remap
        )));
    }
    let mut k = KernelBuilder::new(&super::name(cfg), forward_schedule());
    let mut io = declare_io(&mut k, cfg);
    // Launch order: the query blocks of one head next to each other (row-major, last extent fastest),
    // so that the blocks running at once share their head's K and V in L2; inside a head the last
    // block first (the longest under a causal mask). With the query block outermost instead, the 132
    // blocks in flight each streamed a different head's K and V from DRAM: ncu on the H100 measured
    // 84% of DRAM bandwidth for B16 H16 N4096 D128 (17.7 GB moved for 1.07 GB of Q, K, V and O).
    // With a key split (`super::split`) the parts of one query block are neighbours too.
    let [b, h, t, hk] = super::query_grid(&mut k, &mut io, cfg, GridOrder::RowMajor);
    // Under a causal mask (and without a key split, whose parts are neighbours) the query blocks
    // are paired long with short: each block of the persistent grid gets about the same work.
    let n_qb = io.seq.ceil_div(BLOCK as i64);
    let rank = if cfg.causal && cfg.kv_splits == 1 {
        k.pair_long_short(&t, &n_qb)
    } else {
        t
    };
    let qb = n_qb - 1 - rank;

    // Q's slots: one, or two used by alternate tiles of the block (`AttnConfig::q_double`).
    let q_slots = if cfg.q_double { 2 } else { 1 };
    let q_slot = if cfg.q_double {
        k.round() % 2
    } else {
        Expr::c(0)
    };
    let (ring_k, ring_v) = ring_stages(d, kv, cfg.overlap, q_slots);
    let HopperTiles {
        q_s,
        k_s,
        v_s,
        s,
        p,
        o_r,
    } = HopperTiles::declare(&mut k, d, kv, q_slots, (ring_k, ring_v));
    let RowStats {
        softmax,
        inv_norm,
        lse_v,
    } = RowStats::declare(&mut k, s, cfg, cfg.empty_rows(), io.lse.is_some());
    let (max_v, scale, norm) = (softmax.max, softmax.scale, softmax.norm);

    let q_blk = &qb * BLOCK as i64;
    let offset = cfg.last_key_offset(&io.seq, &io.seq_kv);
    let start = cfg.first_key_offset(&io.seq, &io.seq_kv);
    // This block's key blocks: all its queries need, or its part of them (`super::split`).
    let keys = split::KeyRange::new(&io, cfg, &q_blk, &(&q_blk + (BLOCK as i64 - 1)));
    let n_kv = keys.count.clone();
    // Block `j`'s ring slot. A window's tiles walk a few key blocks each (3 for 256 keys to the
    // left), so the tile boundary comes often: counted from 0 in every tile, an odd count puts
    // the next tile's first K block in the slot of this tile's last, which is released only after
    // this tile's last P·V, and the consumers wait for that load at every boundary. Counted on
    // from the tiles before (`round · count`: exact while the tiles of a block walk equally many
    // blocks, as a window's do away from the sequence's start), the next tile's first loads go
    // to the slots released first. Any slot order is correct: every slot keeps its own phase.
    // Without a window the count restarts as before.
    let ring_base = cfg.window.map(|_| k.round() * n_kv.clone());
    let ring_slot = |j: &Expr, ring: u32| match &ring_base {
        Some(base) => (j + base.clone()) % i64::from(ring),
        None => j % i64::from(ring),
    };
    let cw = k.wave() - 4; // consumer wave, 0..8
    let q0 = &q_blk + &cw * 16; // this wave's first query
    k.roles(
        |k| {
            for (i, &qs) in q_s.iter().enumerate() {
                let src = view(k, io.q, &b, &h, q_blk.clone(), i as u32 * COLS, BLOCK);
                k.load_async_by(Scope::WarpGroup, k.smem(qs, q_slot.clone()), src);
            }
            k.wait_async(0);
            k.barrier(); // Q to the consumers
            k.for_range("j", 0, &n_kv, |k, j| {
                let (slot_k, slot_v) = (ring_slot(&j, ring_k), ring_slot(&j, ring_v));
                let s0 = keys.at(&j) * kv as i64;
                // K's halves, then V's: each tensor's halves share a slot index (one fill each).
                for (i, &ks) in k_s.iter().enumerate() {
                    let src = view(k, io.k, &b, &hk, s0.clone(), i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(ks, slot_k.clone()), src);
                }
                for (i, &vs) in v_s.iter().enumerate() {
                    let src = view(k, io.v, &b, &hk, s0.clone(), i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(vs, slot_v.clone()), src);
                }
                k.wait_async(0);
                k.barrier(); // key block j to the consumers
            });
        },
        |k| {
            k.barrier(); // Q has landed
            for &or in &o_r {
                k.zero(or);
            }
            k.zero(norm);
            k.neg_infty(max_v);
            let slope = io.alibi_slope(k, cfg, (&b, &h), (s, Axis::Rows));
            // S = Q·Kᵀ of key block `j` over the head dimension, 64 columns at a time.
            let qk = |k: &mut KernelBuilder, j: &Expr| {
                let slot = ring_slot(j, ring_k);
                for (i, (&qs, &ks)) in q_s.iter().zip(&k_s).enumerate() {
                    let a = MmaOperand::Shared(k.smem(qs, q_slot.clone()).sub(16, COLS, &cw, 0));
                    let b = MmaOperand::Shared(k.smem(ks, slot.clone()));
                    k.mma(MmaForm::Abt, s, a, b, (i > 0).then_some(s));
                }
            };
            // O += P·V of key block `j` (P in registers).
            let pv = |k: &mut KernelBuilder, j: &Expr| {
                let slot = ring_slot(j, ring_v);
                for (&or, &vs) in o_r.iter().zip(&v_s) {
                    let b = MmaOperand::Shared(k.smem(vs, slot.clone()));
                    k.mma(MmaForm::Ab, or, MmaOperand::Reg(p), b, Some(or));
                }
            };
            // Masks only where key block `j` reaches past the sequence or the diagonal (whole-block
            // conditions, the same for every wave), then the online softmax (P stays f32 in `s`).
            let softmax_block = |k: &mut KernelBuilder, j: &Expr| {
                let (kv0, inf) = (keys.at(j) * kv as i64, f32::NEG_INFINITY);
                let kv_end = (keys.at(j) + 1) * kv as i64;
                cfg.logits.cap(k, s, cfg.dim);
                io.alibi(k, slope, s, (&q0, &kv0), false);
                k.if_(keys.limit.lt(&kv_end), |k| {
                    k.mask(s, MaskRule::ColsBelow(keys.limit.clone()), &q0, &kv0, inf)
                });
                if let Some(off) = &offset {
                    // The block's first query keeps keys up to `q_blk + off`.
                    k.if_((&q_blk + off.clone()).lt(&kv_end - 1), |k| {
                        let offset = off.clone();
                        k.mask(s, MaskRule::Causal { offset }, &q0, &kv0, inf)
                    });
                }
                if let Some(st) = &start {
                    // The block's last query keeps keys from `q_blk + BLOCK − 1 + st`.
                    let last = &q_blk + (BLOCK as i64 - 1) + st.clone();
                    k.if_(kv0.lt(&last), |k| {
                        let offset = st.clone();
                        k.mask(s, MaskRule::WindowStart { offset }, &q0, &kv0, inf)
                    });
                }
                softmax.step(k, s);
            };
            // P to bf16: the accumulator fragment is the A operand's, so a pack in registers.
            let to_p = |k: &mut KernelBuilder| k.copy(p, s);
            let rescale = |k: &mut KernelBuilder| {
                for &or in &o_r {
                    k.mul_row(or, or, scale);
                }
            };
            if cfg.overlap {
                // The loop rotated by half a step (FlashAttention-3 §3.2, intra-warpgroup
                // overlap): iteration j issues Q·K(j)ᵀ and P(j−1)·V(j−1) together, then runs the
                // softmax of block j while P·V is still on the tensor cores. Block 0's Q·Kᵀ comes
                // before the loop, the last block's P·V after it. P is packed at the top of the
                // next iteration, not at the end of the softmax: the wait for P·V(j−1) (P's
                // registers are its A operand) then sits past the loop's back edge, where ptxas
                // cannot hoist it above the softmax (at the end of the softmax it did, SASS of
                // NVRTC 13.0, and the overlap was gone).
                k.barrier(); // key block 0 has landed
                turn(
                    k,
                    cfg.pingpong,
                    "S = Q·K(0)ᵀ",
                    &|k: &mut KernelBuilder| qk(k, &Expr::c(0)),
                );
                softmax_block(k, &Expr::c(0));
                k.for_range("j", 1, &n_kv, |k, j| {
                    k.barrier(); // key block j has landed
                    rescale(k); // by block j−1's correction, before its P·V accumulates
                    to_p(k);
                    turn(
                        k,
                        cfg.pingpong,
                        "S = Q·K(j)ᵀ, O += P·V(j−1)",
                        &|k: &mut KernelBuilder| {
                            qk(k, &j);
                            pv(k, &(&j - 1));
                        },
                    );
                    softmax_block(k, &j);
                });
                rescale(k);
                to_p(k);
                pv(k, &(&n_kv - 1));
            } else {
                k.for_range("j", 0, &n_kv, |k, j| {
                    k.barrier(); // key block j has landed
                    turn(k, cfg.pingpong, "S = Q·Kᵀ", &|k: &mut KernelBuilder| {
                        qk(k, &j)
                    });
                    softmax_block(k, &j);
                    to_p(k);
                    rescale(k);
                    // Outside the turn: only Q·Kᵀ is ordered between the warpgroups (measured on
                    // the H100: a second turn around P·V serialised them, docs/performance.md).
                    pv(k, &j);
                });
            }
            // One division per row, then multiplies: a division per element was 64 IEEE divisions
            // (each with its slow-path call) per thread in the epilogue of every block.
            softmax.inv_norm(k, inv_norm);
            k.rounding = cfg.rounding; // the output's rounding to bf16
            for (i, &or) in o_r.iter().enumerate() {
                k.mul_row(or, or, inv_norm);
                let at = vec![
                    b.clone(),
                    h.clone(),
                    q0.clone(),
                    Expr::c((i as u32 * COLS) as i64),
                ];
                k.store(io.out(k, io.o, at, (2, 3), (16, COLS)), or);
            }
            k.rounding = Rounding::Rtne;
            if let (Some(g), Some(lv)) = (io.lse, lse_v) {
                // One value per query row: the wave's 16 rows down the sequence dimension.
                softmax.lse(k, lv);
                let at = vec![b.clone(), h.clone(), q0.clone()];
                k.store(io.out(k, g, at, (2, 1), (16, 1)), lv);
            }
        },
    );
    Ok(k.finish()?)
}
