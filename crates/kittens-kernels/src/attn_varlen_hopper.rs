//! The variable-length attention forward for Hopper (sm_90a): the tensors, parameters and meaning of
//! [`crate::attn_varlen`] (packed sequences, `cu_seqlens_*` read from device memory, causal
//! bottom-right per sequence, GQA), in the warp-specialised form of the dense Hopper forward
//! (`attn_fwd::producer_consumer`, HipKittens §3.3.1, FlashAttention-3's structure): one producer
//! warpgroup fills Q once and streams K and V through rings of shared slots, two consumer warpgroups
//! (64 queries each) run `S = Q·Kᵀ`, the online softmax and `O += P·V` with `wgmma`.
//!
//! The schedule is the dense program's (`crate::attn_fwd`'s producer/consumer module docs, each
//! step measured there): the key loop rotated and the warpgroups taking turns on the tensor cores
//! ([`SharedStep::walk_rotated`]), Q double-buffered across a block's tiles, the persistent grid's
//! tiles visited last-first per head and, with a causal mask, paired long with short. What varlen
//! changes against it:
//!
//! - every tile's origin is `cu_seqlens[b] + offset` (`Expr::Elem`, read per block). The loads are
//!   not clipped (as in the varlen backward, `crate::attn_varlen_hopper`'s sibling
//!   `crate::attn_varlen_bwd_hopper`): rows past a sequence's end are the next sequence's (or past
//!   the tensor, zero), every score they meet is masked (keys past `len_k`, the diagonal) or
//!   belongs to a query row that is never stored, so their `P` is exactly 0 and TMA fills the rings
//!   as in the dense program. The outputs are clipped at the sequence's end (`Clip`) and go out by
//!   bounds-checked direct stores (`o` has three dimensions, `lse` is a row vector), each row checked
//!   against `min(total, end)`. With `seqused_k` (a KV cache, whose rows past the used ones are
//!   stale, NaN included, and `0·NaN` in P·V would reach O) the inputs are clipped too and the ring
//!   slots filled with `cp.async` (`SlotFill::CpAsync`), whose per-row source size stops at the clip
//!   (zero-fill past it);
//! - the key loop walks the key blocks this tile needs, read on the device as FlashAttention-3
//!   does: up to its sequence's last key, under a causal mask up to its last query's diagonal
//!   (bottom-right in each sequence), at most `⌈max_seqlen_k / kv⌉` (the parameter bounds the
//!   walk whatever the offsets hold); a tile past its sequence's last query walks one block and
//!   stores nothing. The schedule analysis reads such a trip count with sequences of every length
//!   (`kittens_ir::analysis`'s element size). The grid stays `[batch, heads, ⌈max_seqlen_q /
//!   128⌉]`: the tiles past a shorter sequence's end cost one key block each;
//! - the masks (keys past the sequence's end, the diagonal) apply only to the key blocks that
//!   reach them, as in the dense program;
//! - rows with no key (an empty key sequence, bottom-right causal with more queries than keys) keep a
//!   floored softmax: output 0, `lse = −∞`.

use crate::attn::hopper::{forward_schedule, ring_stages, HopperTiles};
use crate::attn::key_step::{KeyMasks, SharedStep};
use crate::attn::varlen::{alibi_slope, check, Batch, QueryBlock, Seq, Tensors, VarlenConfig};
use crate::attn::Softmax;
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Axis, Expr, Kernel, KernelBuilder, Scope, SlotFill};

/// Queries per block: two consumer warpgroups × 64.
pub const BLOCK_Q: u32 = 128;
/// Columns of one shared tile: 64 bf16 = 128 bytes, the 128-byte swizzle's row.
const COLS: u32 = 64;

/// Keys per block: 128 up to head dim 128, 64 past it (the dense program's choice,
/// `AttnConfig::fit_hopper`: the score tile beside 3-4 output accumulators).
fn kv_block(dim: u32) -> u32 {
    if dim > 128 {
        64
    } else {
        128
    }
}

/// The sm_90a varlen forward (see the module documentation): head dims 64, 128, 192, 256.
pub fn build(cfg: &VarlenConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let dim = cfg.dim;
    if !matches!(dim, 64 | 128 | 192 | 256) {
        return Err(KernelError::Config(format!(
            "head dim: the sm_90a varlen forward takes 64, 128, 192 or 256 (64-column shared \
             tiles), got {dim}"
        )));
    }
    let name = format!("{}_sm90", cfg.name("attn_varlen_fwd"));
    let mut k = KernelBuilder::new(&name, forward_schedule());
    let sizes = Batch::declare(&mut k);
    let t = Tensors::declare(&mut k, &sizes, cfg);
    // With `seqused_k` (a KV cache) the key rows past a sequence's used ones are stale (anything,
    // NaN included: `0·NaN` in P·V would reach O), so the inputs are clipped and filled by
    // `cp.async` (zero past the clip); otherwise they are read unclipped by TMA.
    let clip_inputs = cfg.seqused_k;
    if clip_inputs {
        for g in [t.q, t.k, t.v] {
            k.slot_fill(g, SlotFill::CpAsync);
        }
    }
    let QueryBlock {
        h,
        qb: tile,
        hk,
        seq: Seq {
            start_q, start_k, ..
        },
        len_q,
        len_k,
        ..
    } = QueryBlock::declare_clipped(&mut k, &sizes, &t, BLOCK_Q, clip_inputs);
    // Last-first per head (the longest causal tile first); with a causal mask, paired long with
    // short over the persistent grid (`KernelBuilder::pair_long_short`), as the dense program.
    let n_qb = sizes.max_q.ceil_div(i64::from(BLOCK_Q));
    let rank = if cfg.causal {
        k.pair_long_short(&tile, &n_qb)
    } else {
        tile
    };
    let qb = &n_qb - 1 - rank;

    let kv = kv_block(dim);
    // With `seqused_k` (a KV cache: few queries per sequence) the plain walk, one block after the
    // other: the rotated one with the extra length read spilled at head dim 128 (ptxas, NVRTC 13.0).
    let rotated = !cfg.seqused_k;
    // Q in two slots used by alternate tiles of a block (one at head dim 256: two are 128 KiB; one
    // with both a soft cap and a window, whose two slots spilled 4 bytes at head dim 128, NVRTC 13.0).
    let q_slots = if dim < 256 && rotated && !(cfg.logits.softcap.is_some() && cfg.window.is_some())
    {
        2
    } else {
        1
    };
    let q_slot = if q_slots == 2 {
        k.round() % 2
    } else {
        Expr::c(0)
    };
    let rings = ring_stages(dim, kv, rotated, q_slots);
    let HopperTiles {
        q_s,
        k_s,
        v_s,
        s,
        p,
        o_r,
    } = HopperTiles::declare(&mut k, dim, kv, q_slots, rings);
    let mut softmax = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    softmax.floor = true;
    let inv_norm = k.row_vec("inv_norm", s, F32);
    let lse_v = k.row_vec("lse_v", s, F32);

    // `rows × 64` of head `hh` of packed tensor `g` from row `row` (absolute), columns from `col0`.
    let view = |k: &KernelBuilder, g, row: Expr, hh: &Expr, col0: u32, rows| {
        let at = vec![row, hh.clone(), Expr::c(i64::from(col0))];
        k.gview(g, at, 0, 2, rows, COLS)
    };
    let q_blk = &qb * i64::from(BLOCK_Q); // in the sequence
    let q_last = &q_blk + (i64::from(BLOCK_Q) - 1);
    let walk = KeyWalk::new(cfg, (&len_q, &len_k), &q_blk, &sizes.max_k, kv);
    let n_kv = walk.count.clone();
    let cw = k.wave() - 4; // consumer wave, 0..8
    let q0 = &q_blk + &cw * 16; // this wave's first query, in the sequence
    let step = SharedStep {
        wave: cw,
        q_s: &q_s,
        k_s: &k_s,
        v_s: &v_s,
        s,
        p,
        o: &o_r,
    };
    let masks = KeyMasks {
        end: len_k.clone(),
        causal: cfg.last_key_offset(&len_q, &len_k),
        start: cfg.first_key_offset(&len_q, &len_k),
        cap: (cfg.logits, cfg.dim),
        alibi: None,
    };
    let (ring_k, ring_v) = rings;
    k.roles(
        |k| {
            for (i, &qs) in q_s.iter().enumerate() {
                let src = view(
                    k,
                    t.q,
                    &start_q + q_blk.clone(),
                    &h,
                    i as u32 * COLS,
                    BLOCK_Q,
                );
                k.load_async_by(Scope::WarpGroup, k.smem(qs, q_slot.clone()), src);
            }
            k.wait_async(0);
            k.barrier(); // Q to the consumers
            k.for_range("j", 0, &n_kv, |k, j| {
                let row = &start_k + walk.at(&j) * i64::from(kv);
                // K's halves, then V's: each tensor's halves share a slot index (one fill each).
                for (i, &ks) in k_s.iter().enumerate() {
                    let src = view(k, t.k, row.clone(), &hk, i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(ks, &j % i64::from(ring_k)), src);
                }
                for (i, &vs) in v_s.iter().enumerate() {
                    let src = view(k, t.v, row.clone(), &hk, i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(vs, &j % i64::from(ring_v)), src);
                }
                k.wait_async(0);
                k.barrier(); // key block j to the consumers
            });
        },
        |k| {
            let b = k.block(0);
            let slope = alibi_slope(k, t.alibi.as_ref(), cfg, (&b, &h), s);
            let masks = KeyMasks {
                alibi: slope.map(|v| (v, &len_k - len_q.clone())),
                ..masks
            };
            let mask = |k: &mut KernelBuilder, j: &Expr| {
                let k0 = walk.at(j) * i64::from(kv);
                let k_end = (walk.at(j) + 1) * i64::from(kv);
                masks.apply_needed(k, s, (&q0, &k0), (&q_blk, &q_last), &k_end);
            };
            if rotated {
                step.walk_rotated(k, &softmax, &mask, &n_kv, rings, &q_slot, true);
            } else {
                step.walk(k, &softmax, &masks, &n_kv, ring_k, &q0, |j| {
                    walk.at(j) * i64::from(kv)
                });
            }
            softmax.inv_norm(k, inv_norm);
            let row = &start_q + q0.clone();
            for (i, &or) in o_r.iter().enumerate() {
                k.mul_row(or, or, inv_norm);
                let at = vec![row.clone(), h.clone(), Expr::c(i64::from(i as u32 * COLS))];
                k.store(k.gview(t.o, at, 0, 2, 16, COLS), or);
            }
            softmax.lse(k, lse_v);
            k.store(k.gview(t.lse, vec![h.clone(), row], 1, 0, 16, 1), lse_v);
        },
    );
    Ok(k.finish()?)
}

/// The key blocks of `kv` keys the tile of queries `q_blk ..` walks, read on the device: `count`
/// blocks from block `first`.
struct KeyWalk {
    first: Expr,
    count: Expr,
}

impl KeyWalk {
    /// Up to its sequence's last key block `⌈len_k / kv⌉`, under a causal mask or a window's right
    /// side only up to the block holding its last query's last kept key (bottom-right), never past
    /// `⌈max_k / kv⌉`; with a window's left side from the block holding its first query's first
    /// kept key. One block (walked fully masked, stored nowhere) for a tile past its sequence's last
    /// query or one that keeps no key, so that the pipeline runs as usual.
    fn new(
        cfg: &VarlenConfig,
        (len_q, len_k): (&Expr, &Expr),
        q_blk: &Expr,
        max_k: &Expr,
        kv: u32,
    ) -> KeyWalk {
        let kv = i64::from(kv);
        let all = max_k.ceil_div(kv);
        let mut end = len_k.ceil_div(kv).min(all.clone());
        if let Some(off) = cfg.last_key_offset(len_q, len_k) {
            // Floor division in the IR, truncation in C: both give at most 0 + 1 below key 0.
            let last = q_blk + (i64::from(BLOCK_Q) - 1) + off;
            end = end.min(last / kv + 1);
        }
        // 1 while the tile holds a query of its sequence, else 0.
        let live = (len_q - q_blk.clone()).max(Expr::c(0)).min(Expr::c(1));
        let end = end.min(live * all).max(Expr::c(1));
        let first = match cfg.first_key_offset(len_q, len_k) {
            // Truncation of a negative start rounds towards 0 where floor goes below: both are
            // raised to 0.
            Some(st) => ((q_blk + st) / kv).max(Expr::c(0)).min(&end - 1),
            None => Expr::c(0),
        };
        KeyWalk {
            count: &end - first.clone(),
            first,
        }
    }

    /// The key block of step `j`.
    fn at(&self, j: &Expr) -> Expr {
        &self.first + j.clone()
    }
}
