//! The Hopper forward with two consecutive query tiles of one head per block, walked as one stream
//! of key blocks ([`AttnConfig::tile_pairs`]): for a sliding window, whose tiles walk a few key
//! blocks each (3 at `(256, 0)`), the tile's fixed cost — the first block's `Q·Kᵀ` and softmax with
//! no `P·V` beside them, the last block's `P·V` with no softmax beside it, the wait before the
//! epilogue — is a large part of its time (docs/performance.md, "FlashAttention's options").
//!
//! The program is [`super::producer_consumer`]'s rotated key loop (FlashAttention-3 §3.2) run over
//! tile A's key blocks and then tile B's as one sequence: the step that issues `Q_B·K(B,0)ᵀ` also
//! issues A's last `P·V`, and B's first softmax runs while that `P·V` is on the tensor cores; A's
//! output is normalised and stored after it, before B's second step. So a pair of tiles pays the
//! loop's fill and drain once. The consumers' per-row statistics restart at B: its first step's
//! correction is exp2(−∞) = 0 against the reset running max, which clears A's (finite) output in O
//! at B's next step.
//!
//! Q: A's and B's tiles have a shared tile each, both filled once per block (outside the producer's
//! loops), B's just before B's key blocks, so that the hand-off of B's first key block hands it over
//! too. The sm_90a lowering gives a slot of such a ring back once the block reads it no more
//! (`kittens_codegen`'s `retire_all`): A's Q slot goes back at the pair's middle, and the next
//! pair's Q and first key blocks load while this block computes tile B.
//!
//! Where the sequence has an odd number of query tiles, the last pair's tile B lies past the end: it
//! runs all the same (Q read as zeros, its rows' stores clipped at the sequence's end, as the rows
//! past the end of a partial tile are), because a branch around B — its loads, the hand-off step
//! and A's stores — made ptxas serialise every `wgmma` of the kernel (C7515, NVRTC 13.0).
//!
//! Ring slots count the pair's key blocks as one sequence (A's `j`, then B's `n_A + j`), continued
//! from the block's earlier pairs (`round · (n_A + n_B)`), as the one-tile program does for windows.

use super::{declare_io, AttnConfig};
use crate::attn::hopper::{
    forward_schedule, padded_dim, ring_stages, turn, view, HopperTiles, RowStats, BLOCK, COLS,
};
use crate::KernelError;
use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{
    Axis, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand, Rounding, Scope,
    SharedId,
};
use kittens_tile::{SharedTile, Swizzle};

use super::split::KeyRange;

/// One query tile of the pair: its first query, its key walk and its Q tiles (one per 64 columns).
struct Tile {
    q_blk: Expr,
    keys: KeyRange,
    q_s: Vec<SharedId>,
    /// The stream index of the tile's first key block (0 for A, `n_A` for B).
    base: Expr,
}

pub(super) fn build(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    let kv = cfg.kv_block;
    if !matches!(cfg.dim, 32 | 64 | 96 | 128) || kv != 128 || cfg.kv_splits > 1 || cfg.strided {
        return Err(KernelError::Config(format!(
            "attn_fwd (tile pairs): dim {} must be 32, 64, 96 or 128, kv_block {kv} 128, no key split \
             ({}) and dense tensors",
            cfg.dim, cfg.kv_splits
        )));
    }
    let d = padded_dim(cfg.dim);
    let mut k = KernelBuilder::new(&format!("{}_pairs", super::name(cfg)), forward_schedule());
    let mut io = declare_io(&mut k, cfg);
    // Pairs of a head next to each other (row-major, last extent fastest): the blocks in flight
    // share their heads' K and V in L2; tiles A = 2p and B = 2p + 1 of pair p.
    let n_qb = io.seq.ceil_div(BLOCK as i64);
    k.grid(
        vec![io.batch.clone(), io.heads.clone(), n_qb.ceil_div(2)],
        GridOrder::RowMajor,
    );
    io.split = None;
    let (b, h, pair) = (k.block(0), k.block(1), k.block(2));
    let hk = &h / (&io.heads / io.heads_kv.clone());

    let (ring_k, ring_v) = ring_stages(d, kv, cfg.overlap, 2);
    let HopperTiles {
        q_s,
        k_s,
        v_s,
        s,
        p,
        o_r,
    } = HopperTiles::declare(&mut k, d, kv, 1, (ring_k, ring_v));
    let q_b: Vec<SharedId> = (0..q_s.len())
        .map(|i| {
            let t = SharedTile::with_swizzle(Bf16, BLOCK, COLS, Swizzle::NV_128B);
            k.shared_tile(&format!("q_b{i}"), t, 1)
        })
        .collect();
    let tile = |q_blk: Expr, q_s: Vec<SharedId>, base: Expr| {
        let last = &q_blk + (BLOCK as i64 - 1);
        let keys = KeyRange::new(&io, cfg, &q_blk, &last);
        Tile {
            q_blk,
            keys,
            q_s,
            base,
        }
    };
    let a = tile(&pair * (2 * BLOCK as i64), q_s, Expr::c(0));
    let n_a = a.keys.count.clone();
    let b_t = tile(&a.q_blk + BLOCK as i64, q_b, n_a.clone());
    let n_b = b_t.keys.count.clone();
    let ring_base = k.round() * (&n_a + n_b.clone());
    let ring_slot = |m: &Expr, ring: u32| (m + ring_base.clone()) % i64::from(ring);

    let RowStats {
        softmax,
        inv_norm,
        lse_v,
    } = RowStats::declare(&mut k, s, cfg, cfg.empty_rows(), io.lse.is_some());
    let (max_v, scale, norm) = (softmax.max, softmax.scale, softmax.norm);

    let offset = cfg.last_key_offset(&io.seq, &io.seq_kv);
    let start = cfg.first_key_offset(&io.seq, &io.seq_kv);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let load_q = |k: &mut KernelBuilder, t: &Tile| {
        for (i, &qs) in t.q_s.iter().enumerate() {
            let src = view(k, io.q, &b, &h, t.q_blk.clone(), i as u32 * COLS, BLOCK);
            k.load_async_by(Scope::WarpGroup, k.smem(qs, Expr::c(0)), src);
        }
    };
    let load_keys = |k: &mut KernelBuilder, t: &Tile| {
        k.for_range("j", 0, &t.keys.count, |k, j| {
            let m = &t.base + j.clone();
            let (slot_k, slot_v) = (ring_slot(&m, ring_k), ring_slot(&m, ring_v));
            let s0 = t.keys.at(&j) * kv as i64;
            for (i, &ks) in k_s.iter().enumerate() {
                let src = view(k, io.k, &b, &hk, s0.clone(), i as u32 * COLS, kv);
                k.load_async_by(Scope::WarpGroup, k.smem(ks, slot_k.clone()), src);
            }
            for (i, &vs) in v_s.iter().enumerate() {
                let src = view(k, io.v, &b, &hk, s0.clone(), i as u32 * COLS, kv);
                k.load_async_by(Scope::WarpGroup, k.smem(vs, slot_v.clone()), src);
            }
            k.wait_async(0);
            k.barrier(); // key block j to the consumers (with B's first: B's Q)
        });
    };
    k.roles(
        |k| {
            load_q(k, &a);
            k.wait_async(0);
            k.barrier(); // A's Q to the consumers
            load_keys(k, &a);
            load_q(k, &b_t);
            load_keys(k, &b_t);
        },
        |k| {
            k.barrier(); // A's Q has landed
            for &or in &o_r {
                k.zero(or);
            }
            k.zero(norm);
            k.neg_infty(max_v);
            let slope = io.alibi_slope(k, cfg, (&b, &h), (s, Axis::Rows));
            // S = Q·Kᵀ of step `j` of tile `t`, 64 columns at a time.
            let qk = |k: &mut KernelBuilder, t: &Tile, j: &Expr| {
                let slot = ring_slot(&(&t.base + j.clone()), ring_k);
                for (i, (&qs, &ks)) in t.q_s.iter().zip(&k_s).enumerate() {
                    let a = MmaOperand::Shared(k.smem(qs, Expr::c(0)).sub(16, COLS, &cw, 0));
                    let b = MmaOperand::Shared(k.smem(ks, slot.clone()));
                    k.mma(MmaForm::Abt, s, a, b, (i > 0).then_some(s));
                }
            };
            // O += P·V of stream step `m` (P in registers).
            let pv = |k: &mut KernelBuilder, m: &Expr| {
                let slot = ring_slot(m, ring_v);
                for (&or, &vs) in o_r.iter().zip(&v_s) {
                    let b = MmaOperand::Shared(k.smem(vs, slot.clone()));
                    k.mma(MmaForm::Ab, or, MmaOperand::Reg(p), b, Some(or));
                }
            };
            let softmax_block = |k: &mut KernelBuilder, t: &Tile, j: &Expr| {
                let (keys, q_blk) = (&t.keys, &t.q_blk);
                let q0 = q_blk + &cw * 16;
                let (kv0, inf) = (keys.at(j) * kv as i64, f32::NEG_INFINITY);
                let kv_end = (keys.at(j) + 1) * kv as i64;
                cfg.logits.cap(k, s, cfg.dim);
                io.alibi(k, slope, s, (&q0, &kv0), false);
                k.if_(keys.limit.lt(&kv_end), |k| {
                    k.mask(s, MaskRule::ColsBelow(keys.limit.clone()), &q0, &kv0, inf)
                });
                if let Some(off) = &offset {
                    k.if_((q_blk + off.clone()).lt(&kv_end - 1), |k| {
                        let offset = off.clone();
                        k.mask(s, MaskRule::Causal { offset }, &q0, &kv0, inf)
                    });
                }
                if let Some(st) = &start {
                    let last = q_blk + (BLOCK as i64 - 1) + st.clone();
                    k.if_(kv0.lt(&last), |k| {
                        let offset = st.clone();
                        k.mask(s, MaskRule::WindowStart { offset }, &q0, &kv0, inf)
                    });
                }
                softmax.step(k, s);
            };
            let to_p = |k: &mut KernelBuilder| k.copy(p, s);
            let rescale = |k: &mut KernelBuilder| {
                for &or in &o_r {
                    k.mul_row(or, or, scale);
                }
            };
            // Steps 1.. of tile `t`: Q·K(j)ᵀ beside P·V of the stream's previous step.
            let walk = |k: &mut KernelBuilder, t: &Tile| {
                k.for_range("j", 1, &t.keys.count, |k, j| {
                    k.barrier(); // key block j has landed
                    rescale(k);
                    to_p(k);
                    turn(
                        k,
                        cfg.pingpong,
                        "S = Q·K(j)ᵀ, O += P·V(j−1)",
                        &|k: &mut KernelBuilder| {
                            qk(k, t, &j);
                            pv(k, &(&t.base + (&j - 1)));
                        },
                    );
                    softmax_block(k, t, &j);
                });
            };
            // The statistics' part of a tile's epilogue, read before B's softmax restarts them.
            let finish_rows = |k: &mut KernelBuilder| {
                softmax.inv_norm(k, inv_norm);
                if let Some(lv) = lse_v {
                    softmax.lse(k, lv);
                }
            };
            // The rest, once the tile's last P·V has retired: O and the log-sum-exp stored.
            let store_out = |k: &mut KernelBuilder, q_blk: &Expr| {
                let q0 = q_blk + &cw * 16;
                k.rounding = cfg.rounding;
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
                    let at = vec![b.clone(), h.clone(), q0];
                    k.store(io.out(k, g, at, (2, 1), (16, 1)), lv);
                }
            };
            k.barrier(); // A's key block 0 has landed
            turn(
                k,
                cfg.pingpong,
                "S = Q·K(0)ᵀ",
                &|k: &mut KernelBuilder| qk(k, &a, &Expr::c(0)),
            );
            softmax_block(k, &a, &Expr::c(0));
            walk(k, &a);
            k.barrier(); // B's Q and key block 0 have landed
            rescale(k);
            to_p(k);
            turn(
                k,
                cfg.pingpong,
                "S = Q_B·K(0)ᵀ, O += P·V(A's last)",
                &|k: &mut KernelBuilder| {
                    qk(k, &b_t, &Expr::c(0));
                    pv(k, &(&n_a - 1));
                },
            );
            finish_rows(k);
            k.neg_infty(max_v);
            k.zero(norm);
            softmax_block(k, &b_t, &Expr::c(0));
            // A's output stays in O: B's first correction, exp2(−∞) = 0 against the reset max,
            // clears it at B's next step (a zeroing here also made ptxas serialise the `wgmma`s).
            store_out(k, &a.q_blk);
            walk(k, &b_t);
            rescale(k);
            to_p(k);
            pv(k, &(&n_a + n_b.clone() - 1));
            finish_rows(k);
            store_out(k, &b_t.q_blk);
        },
    );
    Ok(k.finish()?)
}
