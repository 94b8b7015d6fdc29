//! Variable-length attention forward (FlashAttention's `flash_attn_varlen_func`): the batch's sequences
//! packed one after another, `q [total_q, heads, d]`, `k, v [total_k, heads_kv, d]`, sequence `b`'s
//! queries at rows `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]` and its keys at `cu_seqlens_k[b] ..
//! cu_seqlens_k[b + 1]` (`i32` tensors of `batch + 1` offsets). Each block reads its sequence's
//! offsets from device memory ([`kittens_ir::Expr::Elem`]) and clips the packed tensors at its
//! sequence's end ([`kittens_ir::Clip`]), so the next sequence's rows are neither read into its
//! softmax nor written; the grid and the key loop are sized from `max_seqlen_q` / `max_seqlen_k`
//! (parameters, as FlashAttention's `max_seqlen_*`: no host read of the device lengths), blocks past
//! their sequence's end store nothing and key blocks past it are masked whole.
//!
//! The program is the online softmax of FlashAttention-2 §3.1 on one wave (S = Q·Kᵀ in f32, the scale
//! inside the `exp2`, P rounded to bf16 for P·V), causal aligned bottom-right per sequence
//! (FlashAttention's convention), a soft cap and a sliding window (bottom-right per sequence, as
//! the dense forward's, [`crate::attn::score`]), grouped-query heads (query head `h` reads KV head
//! `h / (heads / heads_kv)`). It runs on the CPU interpreter (one wave, over the register budget of
//! a GPU); sm_90a runs the warp-specialised program of the same tensors and meaning,
//! [`crate::attn_varlen_hopper`]; gfx942 and gfx950 lower this program (V staged through LDS,
//! [`crate::attn::Staged`]; crates/kittens-runtime/tests/amd_index_reads.rs).

use crate::attn::key_step::{KeyMasks, WaveStep};
use crate::attn::varlen::{alibi_slope, check, Batch, QueryBlock, Tensors};
pub use crate::attn::varlen::{VarlenConfig, BLOCK_K, BLOCK_Q};
use crate::attn::{Softmax, Staged};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Axis, Expr, Kernel, KernelBuilder, Rounding, Schedule};
use kittens_tile::{BaseShape, Layout};

/// Parameter order: `batch, heads, heads_kv, total_q, total_k, max_seqlen_q, max_seqlen_k`; tensors
/// `q, k, v` (bf16, read), `cu_seqlens_q`, `cu_seqlens_k` (i32 `[batch + 1]`), `o` (bf16,
/// `[total_q, heads, d]`), `lse` (f32 `[heads, total_q]`, natural log, FlashAttention's
/// `softmax_lse` layout for varlen; `−∞` for a query that keeps no key).
pub fn build(cfg: &VarlenConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let name = cfg.name("attn_varlen_fwd");
    let mut k = KernelBuilder::new(&name, Schedule::Plain { waves: 1 });
    let sizes = Batch::declare(&mut k);
    let t = Tensors::declare(&mut k, &sizes, cfg);
    let blk = QueryBlock::declare(&mut k, &sizes, &t, BLOCK_Q);
    let (h, hk, start_q, start_k) = (&blk.h, &blk.hk, &blk.seq.start_q, &blk.seq.start_k);
    let Tensors {
        q,
        k: kk,
        v,
        o,
        lse,
        ..
    } = &t;
    let (q, kk, v, o, lse) = (*q, *kk, *v, *o, *lse);
    let max_k = sizes.max_k;

    let (bq, bk, dim) = (BLOCK_Q, BLOCK_K, cfg.dim);
    let q_r = k.tile("q", Bf16, bq, dim, Layout::Row, BaseShape::S16X32);
    let k_r = k.tile("k", Bf16, bk, dim, Layout::Row, BaseShape::S16X32);
    let v_r = k.tile("v", Bf16, bk, dim, Layout::Col, BaseShape::S32X16);
    let v_s = Staged::declare(&mut k, "v_s", v_r, Bf16, (bk, dim));
    let s = k.tile("s", F32, bq, bk, Layout::Row, BaseShape::S16X16);
    let p = k.tile("p", Bf16, bq, bk, Layout::Row, BaseShape::S16X32);
    let acc = k.tile("acc", F32, bq, dim, Layout::Row, BaseShape::S16X16);
    let out = k.tile("out", Bf16, bq, dim, Layout::Row, BaseShape::S16X16);
    let mut sm = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    // Bottom-right causal with more queries than keys, an empty key sequence, or query rows past the
    // sequence's end keep no key: their running max stays −∞.
    sm.floor = true;
    let lse_r = k.row_vec("lse", s, F32);

    let q0 = &blk.qb * i64::from(bq);
    let view = |k: &KernelBuilder, g, row: Expr, head: &Expr, rows| {
        k.gview(g, vec![row, head.clone(), Expr::c(0)], 0, 2, rows, dim)
    };
    k.load_global(q_r, view(&k, q, start_q + q0.clone(), h, bq));
    let b = k.block(0);
    let slope = alibi_slope(&mut k, t.alibi.as_ref(), cfg, (&b, h), s);
    k.neg_infty(sm.max);
    k.zero(sm.norm);
    k.zero(acc);
    let step = WaveStep {
        q: q_r,
        k: k_r,
        v: v_r,
        s,
        p,
        acc,
    };
    let masks = KeyMasks {
        end: blk.len_k.clone(),
        causal: cfg.last_key_offset(&blk.len_q, &blk.len_k),
        start: cfg.first_key_offset(&blk.len_q, &blk.len_k),
        cap: (cfg.logits, cfg.dim),
        alibi: slope.map(|v| (v, &blk.len_k - blk.len_q.clone())),
    };
    let tiles_k = max_k.ceil_div(i64::from(bk));
    k.for_range("kv", Expr::c(0), tiles_k, |k, j| {
        let k0 = &j * i64::from(bk);
        k.load_global(k_r, view(k, kk, start_k + k0.clone(), hk, bk));
        v_s.load(k, view(k, v, start_k + k0.clone(), hk, bk));
        step.step(k, &sm, &masks, &q0, &k0);
    });
    sm.inv_norm(&mut k, sm.scale);
    k.mul_row(acc, acc, sm.scale);
    k.convert(out, acc, Rounding::Rtne);
    k.store(view(&k, o, start_q + q0.clone(), h, bq), out);
    sm.lse(&mut k, lse_r);
    k.store(
        k.gview(lse, vec![h.clone(), start_q + q0], 1, 0, bq, 1),
        lse_r,
    );
    Ok(k.finish()?)
}
