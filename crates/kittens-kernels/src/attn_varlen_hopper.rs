//! The variable-length attention forward for Hopper (sm_90a): the tensors, parameters and meaning of
//! [`crate::attn_varlen`] (packed sequences, `cu_seqlens_*` read from device memory, causal
//! bottom-right per sequence, GQA), in the warp-specialised form of the dense Hopper forward
//! (`attn_fwd::producer_consumer`, HipKittens §3.3.1, FlashAttention-3's structure): one producer
//! warpgroup fills Q once and streams K and V through rings of shared slots, two consumer warpgroups
//! (64 queries each) run `S = Q·Kᵀ`, the online softmax and `O += P·V` with `wgmma`.
//!
//! What varlen changes against the dense program:
//!
//! - every tile's origin is `cu_seqlens[b] + offset` (`Expr::Elem`, read per block), and the packed
//!   tensors are clipped at the sequence's end (`Clip`), so a tile crossing the end must not read the
//!   next sequence nor write into it. A TMA box only clips at the tensor's edge, so the ring slots are
//!   filled with `cp.async` (`SlotFill::CpAsync`), whose per-row source size stops at the clip
//!   (zero-fill past it), and the outputs go out by bounds-checked direct stores (`o` has three
//!   dimensions, `lse` is a row vector), each row checked against `min(total, end)`;
//! - the key loop runs over `ceil(max_seqlen_k / kv)` blocks (a parameter, as FlashAttention's
//!   `max_seqlen_k`: the analyses need trip counts that do not read device memory), and the masks
//!   (keys past the sequence's end, the bottom-right causal diagonal) are applied to every block;
//! - rows with no key (an empty key sequence, bottom-right causal with more queries than keys) keep a
//!   floored softmax: output 0, `lse = −∞`.
//!
//! Not tuned: no skipping of fully masked key blocks (a data-dependent trip count), no intra-warpgroup
//! overlap or ping-pong; the dense kernel's schedule knobs stay there.

use crate::attn::hopper::HopperTiles;
use crate::attn::key_step::{KeyMasks, SharedStep};
use crate::attn::varlen::{alibi_slope, check, Batch, QueryBlock, Seq, Tensors, VarlenConfig};
use crate::attn::Softmax;
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Axis, Expr, Kernel, KernelBuilder, Schedule, Scope, SlotFill};

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

/// Ring slots for K and for V: as many as fit beside Q in 220 KiB, 2 to 4.
fn stages(dim: u32, kv: u32) -> u32 {
    let q = BLOCK_Q * dim * 2;
    ((220 * 1024 - q) / (2 * kv * dim * 2)).clamp(2, 4)
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
    let name = if cfg.causal {
        "attn_varlen_fwd_causal_sm90"
    } else {
        "attn_varlen_fwd_sm90"
    };
    let sched = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 40,
        consumer_regs: 232,
    };
    let mut k = KernelBuilder::new(name, sched);
    let sizes = Batch::declare(&mut k);
    let t = Tensors::declare(&mut k, &sizes, cfg);
    for g in [t.q, t.k, t.v] {
        k.slot_fill(g, SlotFill::CpAsync);
    }
    let QueryBlock {
        h,
        qb,
        hk,
        seq: Seq {
            start_q, start_k, ..
        },
        len_q,
        len_k,
        ..
    } = QueryBlock::declare(&mut k, &sizes, &t, BLOCK_Q);
    let max_k = sizes.max_k.clone();

    let kv = kv_block(dim);
    let ring = stages(dim, kv);
    let HopperTiles {
        q_s,
        k_s,
        v_s,
        s,
        p,
        o_r,
    } = HopperTiles::declare(&mut k, dim, kv, 1, (ring, ring));
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
    let n_kv = max_k.ceil_div(i64::from(kv));
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
        causal: cfg.causal.then(|| &len_k - len_q.clone()),
        start: None,
        cap: (cfg.logits, cfg.dim),
        alibi: None,
    };
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
                k.load_async_by(Scope::WarpGroup, k.smem(qs, 0), src);
            }
            k.wait_async(0);
            k.barrier(); // Q to the consumers
            k.for_range("j", 0, &n_kv, |k, j| {
                let slot = &j % i64::from(ring);
                let row = &start_k + &j * i64::from(kv);
                for (i, &ks) in k_s.iter().enumerate() {
                    let src = view(k, t.k, row.clone(), &hk, i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(ks, slot.clone()), src);
                }
                for (i, &vs) in v_s.iter().enumerate() {
                    let src = view(k, t.v, row.clone(), &hk, i as u32 * COLS, kv);
                    k.load_async_by(Scope::WarpGroup, k.smem(vs, slot.clone()), src);
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
            step.walk(k, &softmax, &masks, &n_kv, ring, &q0, |j| j * i64::from(kv));
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
