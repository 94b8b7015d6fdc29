//! The paged-KV-cache decode for Hopper (sm_90a): the tensors, parameters and meaning of
//! [`crate::attn_paged`] (pages read in place through `block_table`, lengths from `cache_seqlens`,
//! both read on the device; GQA; causal bottom-right; ALiBi; split-KV into the partials of
//! [`crate::attn_fwd::split`]), in the warp-specialised form of the varlen Hopper forward
//! ([`crate::attn_varlen_hopper`], HipKittens §3.3.1, FlashAttention-3's structure): one producer
//! warpgroup fills Q once and streams the sequence's pages through rings of shared slots, one
//! consumer warpgroup (64 queries: decoding's few new tokens fill one `wgmma m64`) runs `S = Q·Kᵀ`,
//! the online softmax and `O += P·V` with `wgmma`.
//!
//! What paging changes against the varlen program:
//!
//! - a key block's origin is `[block_table[b, step / pages], step % page, hk, 0]`: the page read on
//!   the device per step (`Expr::Elem`), held inside the cache and never past the sequence's last
//!   page ([`crate::attn_paged::Walk::page_origin`]). A step never crosses a page (the key block
//!   divides the page size: 128 keys for pages of 128 or 256, 16 for pages of 16 or 48,
//!   [`crate::attn_paged::kv_block_for`]);
//! - the slots are filled with `cp.async` (`SlotFill::CpAsync`): TMA would need a tensor map per
//!   page, and the `cp.async` fill stops at a per-step clip of the page's rows at the sequence's
//!   length, so cache rows past it (stale, NaN in an uninitialised cache) land as zeros and cannot
//!   reach `O` through `0 · NaN` in `P·V`;
//! - the key loop walks the table's capacity `max_blocks · page_size` (a parameter; a trip count read
//!   on the device, as `crate::attn_varlen_hopper`'s, is left to do) and masks keys at or past the length (or the part's end), as the
//!   interpreter's program does. Rows that keep no key get a floored softmax: output 0, `lse = −∞`.
//!
//! With [`PagedConfig::pack_gqa`] (one query per sequence) a block's 64 rows are a GQA group's query
//! heads, as FlashAttention-3's `pack_gqa`: the group's K and V are streamed once per block instead
//! of once per query head. Not tuned: fully masked steps past the length are walked, not skipped (a
//! data-dependent trip count).

use crate::attn::hopper::HopperTiles;
use crate::attn::key_step::SharedStep;
use crate::attn::Softmax;
use crate::attn_paged::{check, name, PagedConfig, PagedIo, Walk};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Axis, Expr, Kernel, KernelBuilder, Schedule, Scope, SlotFill};

/// Queries per block: one consumer warpgroup.
pub const BLOCK_Q: u32 = 64;
/// Columns of one shared tile: 64 bf16 = 128 bytes, the 128-byte swizzle's row.
const COLS: u32 = 64;

/// Ring slots (K and V filled together): as many as fit beside Q in 220 KiB, 2 to 8 (small key
/// blocks need more in flight to keep the memory busy).
fn stages(dim: u32, kv: u32) -> u32 {
    let q = BLOCK_Q * dim * 2;
    ((220 * 1024 - q) / (2 * kv * dim * 2)).clamp(2, 8)
}

/// The sm_90a paged decode (see the module documentation): head dims 64, 128, 192, 256.
pub fn build(cfg: &PagedConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let (dim, kv) = (cfg.dim, cfg.kv_block);
    if !matches!(dim, 64 | 128 | 192 | 256) {
        return Err(KernelError::Config(format!(
            "head dim: the sm_90a paged decode takes 64, 128, 192 or 256 (64-column shared \
             tiles), got {dim}"
        )));
    }
    if dim > 128 && kv > 64 {
        return Err(KernelError::Config(format!(
            "kv_block: at most 64 keys per step past head dim 128 on sm_90a, got {kv}"
        )));
    }
    let sched = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 1,
        producer_regs: 256,
        consumer_regs: 256,
    };
    let mut k = KernelBuilder::new(&name(cfg, "_sm90"), sched);
    let io = PagedIo::declare(&mut k, cfg);
    for g in [io.q, io.k_cache, io.v_cache] {
        k.slot_fill(g, SlotFill::CpAsync);
    }
    let w = Walk::declare(&mut k, &io, cfg, BLOCK_Q);
    let ring = stages(dim, kv);
    let HopperTiles {
        q_s,
        k_s,
        v_s,
        s,
        p,
        o_r,
    } = HopperTiles::declare_rows(&mut k, dim, kv, BLOCK_Q, 1, (ring, ring));
    let mut softmax = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    softmax.floor = true;
    let inv_norm = k.row_vec("inv_norm", s, F32);
    let lse_v = k.row_vec("lse_v", s, F32);

    let (b, h) = (w.b.clone(), w.h.clone());
    let q_blk = &w.qb * i64::from(BLOCK_Q);
    let cw = k.wave() - 4; // consumer wave, 0..4
    let q0 = &q_blk + &cw * 16; // this wave's first query
    let step = SharedStep {
        wave: cw,
        q_s: &q_s,
        k_s: &k_s,
        v_s: &v_s,
        s,
        p,
        o: &o_r,
    };
    k.roles(
        |k| {
            for (i, &qs) in q_s.iter().enumerate() {
                let src = io.qo_view(k, io.q, (&b, &h, &q_blk, col(i)), BLOCK_Q, COLS);
                k.load_async_by(Scope::WarpGroup, k.smem(qs, 0), src);
            }
            k.wait_async(0);
            k.barrier(); // Q to the consumers
            k.for_range("j", 0, &w.count, |k, j| {
                let slot = &j % i64::from(ring);
                let k0 = w.key(&j);
                // The page's rows at or past the length read as zeros (module documentation).
                let rows = &w.len - k0.clone() + (&k0 % io.page.clone());
                for g in [io.k_cache, io.v_cache] {
                    k.clip(g, 1, rows.clone());
                }
                for (i, &ks) in k_s.iter().enumerate() {
                    let src = k.gview(io.k_cache, w.page_origin(&io, &k0, col(i)), 1, 3, kv, COLS);
                    k.load_async_by(Scope::WarpGroup, k.smem(ks, slot.clone()), src);
                }
                for (i, &vs) in v_s.iter().enumerate() {
                    let src = k.gview(io.v_cache, w.page_origin(&io, &k0, col(i)), 1, 3, kv, COLS);
                    k.load_async_by(Scope::WarpGroup, k.smem(vs, slot.clone()), src);
                }
                k.wait_async(0);
                k.barrier(); // key block j to the consumers
            });
        },
        |k| {
            let masks = w.masks(k, &io, cfg, s);
            step.walk(k, &softmax, &masks, &w.count, ring, &q0, |j| w.key(j));
            softmax.inv_norm(k, inv_norm);
            for &or in &o_r {
                k.mul_row(or, or, inv_norm);
            }
            softmax.lse(k, lse_v);
            if cfg.splits > 1 {
                for (i, &or) in o_r.iter().enumerate() {
                    let at = vec![w.part.clone(), b.clone(), h.clone(), q0.clone(), col(i)];
                    k.store(k.gview(io.o, at, 3, 4, 16, COLS), or);
                }
                let at = vec![w.part.clone(), b.clone(), h.clone(), q0.clone()];
                k.store(k.gview(io.lse, at, 3, 0, 16, 1), lse_v);
            } else {
                for (i, &or) in o_r.iter().enumerate() {
                    k.store(io.qo_view(k, io.o, (&b, &h, &q0, col(i)), 16, COLS), or);
                }
                let at = vec![b.clone(), h.clone(), q0.clone()];
                k.store(k.gview(io.lse, at, 2, 0, 16, 1), lse_v);
            }
        },
    );
    Ok(k.finish()?)
}

/// The first column of 64-column tile `i`.
fn col(i: usize) -> Expr {
    Expr::c(i as i64 * i64::from(COLS))
}
