//! Variable-length attention backward (FlashAttention-2 §3.2, Algorithm 2's split, on packed
//! sequences, [`crate::attn_varlen`]'s layout), as two one-wave programs that each write every
//! gradient element once (so neither needs zeroed outputs):
//!
//! - [`Part::Keys`]: one block per (sequence, KV head, key block) walks the query heads of its group
//!   and the query blocks of its sequence, recomputes `P = exp(S·scale − lse)` from the forward's
//!   log-sum-exp, and accumulates `dV += Pᵀ·dO`, `dK += dSᵀ·Q·scale` in registers, with
//!   `dS = P ∘ (dP − δ)`, `dP = dO·Vᵀ`, `δ = rowsum(dO ∘ O)`;
//! - [`Part::Queries`]: one block per (sequence, query head, query block) walks the key blocks,
//!   recomputing the same `P` and `dS`, and accumulates `dQ += dS·K·scale`.
//!
//! A soft cap and a sliding window as the forward's (`crate::attn::score`): the cap's logits
//! `cap·tanh(S·scale/cap)` before the masks and its derivative `1 − tanh²` on dS (one more score
//! tile); the window's sides masked bottom-right in each sequence (every block still walks all of
//! its sequence's blocks: a score outside the window has P exactly 0).
//!
//! The gradients are f32. The per-block clip of each packed tensor at its sequence's end drops what
//! would spill into the next sequence; the loops are sized from `max_seqlen_q/k`. The CPU interpreter
//! and the CDNA targets (gfx942, gfx950) run these programs; sm_90a has
//! [`crate::attn_varlen_bwd_hopper`].

use crate::attn::score::Alibi;
use crate::attn::varlen::{alibi_add, offsets, Batch, Seq, VarlenConfig, BLOCK_K, BLOCK_Q};
use crate::attn::Staged;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, Rounding, Schedule,
};
use kittens_tile::{BaseShape, Layout};

/// Which gradients a program computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// dK and dV: key blocks, grid `[batch, heads_kv, ⌈max_seqlen_k / keys⌉]` ([`key_block`]).
    Keys,
    /// dQ: query blocks, grid `[batch, heads, ⌈max_seqlen_q / queries⌉]` ([`query_block`]).
    Queries,
}

/// Keys per block of `part` for `cfg`: [`BLOCK_K`], but 16 for the key blocks past head dim 64 or
/// with a soft cap or a window. Their K, V (bf16), dK and dV (f32) stay in one wave's registers
/// across the query loop: at 32 keys and dim 128 they take 192 of the 256 VGPRs per lane beside a
/// step's Q, dO, O and scores, and gfx942's compiler spills SGPRs around them; at dim 64 the cap's
/// derivative tile and the window's bounds made gfx950's spill 29 SGPRs (`tests/amd_index_reads.rs`
/// in kittens-runtime).
pub fn key_block(part: Part, cfg: &VarlenConfig) -> u32 {
    match part {
        Part::Keys if cfg.dim > 64 || options(cfg) => 16,
        _ => BLOCK_K,
    }
}

/// Queries per block of `part` for `cfg`: [`BLOCK_Q`], but 16 for the query blocks with a soft cap
/// or a window: at 32, gfx950's query blocks spilled 4 SGPRs with both (`tests/amd_index_reads.rs`
/// in kittens-runtime). The key blocks' column-major Q takes 32-row bases.
pub fn query_block(part: Part, cfg: &VarlenConfig) -> u32 {
    match part {
        Part::Queries if options(cfg) => 16,
        _ => BLOCK_Q,
    }
}

/// Whether `cfg` has a soft cap or a window (more registers and scalars per step).
fn options(cfg: &VarlenConfig) -> bool {
    cfg.logits.softcap.is_some() || cfg.window.is_some()
}

/// Parameter order as the forward's; tensors `q, k, v, o, do` (bf16, read), `lse` (f32 `[heads,
/// total_q]`, read), `cu_seqlens_q`, `cu_seqlens_k`, with ALiBi `alibi` (f32 `[batch, heads]`),
/// then [`Part::Keys`]: `dk`, `dv` (f32
/// `[total_k, heads_kv, d]`), or [`Part::Queries`]: `dq` (f32 `[total_q, heads, d]`) — the outputs
/// in the order the sm_90a launches finish them (`crate::attn_varlen_bwd_problem`).
pub fn build(cfg: &VarlenConfig, part: Part) -> Result<Kernel, KernelError> {
    crate::attn::varlen::check(cfg)?;
    if cfg.seqused_k {
        return Err(KernelError::Config(
            "seqused_k: the varlen backward does not take it (a KV cache is forward only)".into(),
        ));
    }
    let name = cfg.name(match part {
        Part::Keys => "attn_varlen_bwd_kv",
        Part::Queries => "attn_varlen_bwd_q",
    });
    let mut k = KernelBuilder::new(&name, Schedule::Plain { waves: 1 });
    let n = Batch::declare(&mut k);
    let d = Expr::c(i64::from(cfg.dim));
    let packed = |k: &mut KernelBuilder, name: &str, queries: bool, dtype, access| {
        let (total, h) = if queries {
            (&n.total_q, &n.heads)
        } else {
            (&n.total_k, &n.heads_kv)
        };
        let dims = [("s", total.clone()), ("h", h.clone()), ("d", d.clone())];
        k.global(name, dtype, &dims, access)
    };
    let q = packed(&mut k, "q", true, Bf16, Access::Read);
    let kk = packed(&mut k, "k", false, Bf16, Access::Read);
    let v = packed(&mut k, "v", false, Bf16, Access::Read);
    let o = packed(&mut k, "o", true, Bf16, Access::Read);
    let d_o = packed(&mut k, "do", true, Bf16, Access::Read);
    let lse_dims = [("h", n.heads.clone()), ("s", n.total_q.clone())];
    let lse = k.global("lse", F32, &lse_dims, Access::Read);
    let (cu_q, cu_k) = offsets(&mut k, &n.batch);
    let alibi = cfg
        .alibi
        .then(|| Alibi::declare(&mut k, &n.batch, &n.heads));
    let outs = match part {
        Part::Keys => vec![
            packed(&mut k, "dk", false, F32, Access::Write),
            packed(&mut k, "dv", false, F32, Access::Write),
        ],
        Part::Queries => vec![packed(&mut k, "dq", true, F32, Access::Write)],
    };

    let (bq, bk, dim) = (query_block(part, cfg), key_block(part, cfg), cfg.dim);
    let (heads, blocks) = match part {
        Part::Keys => (&n.heads_kv, n.max_k.ceil_div(i64::from(bk))),
        Part::Queries => (&n.heads, n.max_q.ceil_div(i64::from(bq))),
    };
    k.grid(
        vec![n.batch.clone(), heads.clone(), blocks],
        GridOrder::RowMajor,
    );
    let (b, head, blk) = (k.block(0), k.block(1), k.block(2));
    let group = &n.heads / n.heads_kv.clone();
    let sq = Seq::of(cu_q, cu_k, &b);
    let (len_q, len_k) = (
        &sq.end_q - sq.start_q.clone(),
        &sq.end_k - sq.start_k.clone(),
    );
    for g in [q, o, d_o] {
        k.clip(g, 0, sq.end_q.clone());
    }
    k.clip(lse, 1, sq.end_q.clone());
    for g in [kk, v] {
        k.clip(g, 0, sq.end_k.clone());
    }
    for &g in &outs {
        let end = if part == Part::Keys {
            &sq.end_k
        } else {
            &sq.end_q
        };
        k.clip(g, 0, end.clone());
    }

    let tile = |k: &mut KernelBuilder, name: &str, dt, rows, cols, layout, base| {
        k.tile(name, dt, rows, cols, layout, base)
    };
    const S16X16: BaseShape = BaseShape::S16X16;
    const S16X32: BaseShape = BaseShape::S16X32;
    const S32X16: BaseShape = BaseShape::S32X16;
    use Layout::{Col, Row};
    let k_row = tile(&mut k, "k", Bf16, bk, dim, Row, S16X32);
    let v_row = tile(&mut k, "v", Bf16, bk, dim, Row, S16X32);
    let q_row = tile(&mut k, "q", Bf16, bq, dim, Row, S16X32);
    let do_row = tile(&mut k, "do", Bf16, bq, dim, Row, S16X32);
    // O and dO∘O in dO's lanes (δ's elementwise product needs one layout; 16×32 is a bf16 base
    // tile on both CDNA targets, HipKittens §3.2.2).
    let o_row = tile(&mut k, "o", Bf16, bq, dim, Row, S16X32);
    let od = tile(&mut k, "od", F32, bq, dim, Row, S16X32);
    let s = tile(&mut k, "s", F32, bq, bk, Row, S16X16);
    let dp = tile(&mut k, "dp", F32, bq, bk, Row, S16X16);
    let lse_r = k.row_vec("lse", s, F32);
    let delta = k.row_vec("delta", s, F32);
    let slope = alibi.as_ref().map(|_| k.row_vec("alibi_slope", s, F32));
    // With a soft cap: the cap's derivative `1 − tanh²` of each score (the chain rule on dS).
    let grad = cfg
        .logits
        .softcap
        .map(|_| tile(&mut k, "cap_grad", F32, bq, bk, Row, S16X16));
    // With ALiBi: head `h`'s slope through `s` (dead between steps).
    let load_slope = |k: &mut KernelBuilder, h: &Expr| {
        if let (Some(a), Some(v)) = (&alibi, slope) {
            a.load(k, (&b, h), s, (v, Axis::Rows), &cfg.logits, dim);
        }
    };

    let scale = cfg.logits.scale(dim);
    // The exponent's factor: the scale on raw scores, 1 on capped logits.
    let c = std::f32::consts::LOG2_E * cfg.logits.softmax_scale(dim);
    let (last_key, first_key) = (
        cfg.last_key_offset(&len_q, &len_k),
        cfg.first_key_offset(&len_q, &len_k),
    );
    let kv_view = |k: &KernelBuilder, g, k0: &Expr, hk: &Expr| {
        let origin = vec![&sq.start_k + k0.clone(), hk.clone(), Expr::c(0)];
        k.gview(g, origin, 0, 2, bk, dim)
    };
    let q_view = |k: &KernelBuilder, g, q0: &Expr, h: &Expr| {
        let origin = vec![&sq.start_q + q0.clone(), h.clone(), Expr::c(0)];
        k.gview(g, origin, 0, 2, bq, dim)
    };
    // Query block `q0` of head `h`: its tiles, its lse (in log2 units) and δ = rowsum(dO ∘ O).
    let load_queries = |k: &mut KernelBuilder, q0: &Expr, h: &Expr| {
        for (t, g) in [(q_row, q), (do_row, d_o), (o_row, o)] {
            let view = q_view(k, g, q0, h);
            k.load_global(t, view);
        }
        let row = &sq.start_q + q0.clone();
        k.load_global(lse_r, k.gview(lse, vec![h.clone(), row], 1, 0, bq, 1));
        // A query that kept no key has lse −∞ and only masked (−∞) scores: a floor far below any
        // real lse (halved so that the `log2 e` factor stays finite) keeps its P at exp2(−∞) = 0
        // instead of −∞ − (−∞) = NaN.
        k.max(lse_r, lse_r, f32::MIN / 2.0);
        k.mul(lse_r, lse_r, std::f32::consts::LOG2_E);
        k.mul(od, do_row, o_row);
        k.row_sum(delta, od);
    };
    // `P` (in `s`) and `dS·scale` (in `dp`; with a cap times its derivative) of query block `q0`
    // against key block `k0`.
    let probs_and_ds = |k: &mut KernelBuilder, q0: &Expr, k0: &Expr| {
        // P = exp2(S·c − lse·log2 e), masked as the forward.
        k.zero(s);
        k.mma_abt(s, q_row, k_row, s);
        if let (Some(g), Some(cap)) = (grad, cfg.logits.softcap) {
            // The logits `cap·tanh(S·scale/cap)` (`crate::attn::score`) and `1 − tanh²`.
            k.copy(g, s);
            cfg.logits.tanh(k, g, dim);
            k.mul(s, g, cap);
            k.mul(g, g, g);
            k.sub(g, 1.0f32, g);
        }
        alibi_add(k, slope, s, (q0, k0), (&len_q, &len_k), false);
        // What the gradients sum over past the sequence: the queries past it in the key blocks,
        // the keys past it in the query blocks (their clipped rows read 0, but a negative ALiBi
        // slope would still lift them to exp2(+large)). The other side's rows past the end only
        // reach gradient rows that are never stored (no product sums over them), and masking them
        // too took the SGPR that gfx950's query blocks spilled with a cap and a window. Then the
        // causal mask and the window, bottom-right in the sequence, after the cap (module docs of
        // `crate::attn::score`).
        let inf = f32::NEG_INFINITY;
        let past = match part {
            Part::Keys => MaskRule::RowsBelow(len_q.clone()),
            Part::Queries => MaskRule::ColsBelow(len_k.clone()),
        };
        k.mask(s, past, q0, k0, inf);
        if let Some(offset) = last_key.clone() {
            k.mask(s, MaskRule::Causal { offset }, q0, k0, inf);
        }
        if let Some(offset) = first_key.clone() {
            k.mask(s, MaskRule::WindowStart { offset }, q0, k0, inf);
        }
        k.mul(s, s, c);
        k.sub_row(s, s, lse_r);
        k.exp2(s, s);
        // dS = P ∘ (dO·Vᵀ − δ)·scale (· (1 − tanh²) with a cap).
        k.zero(dp);
        k.mma_abt(dp, do_row, v_row, dp);
        k.sub_row(dp, dp, delta);
        k.mul(dp, dp, s);
        k.mul(dp, dp, scale);
        if let Some(g) = grad {
            k.mul(dp, dp, g);
        }
    };
    let load_keys = |k: &mut KernelBuilder, k0: &Expr, hk: &Expr| {
        for (t, g) in [(k_row, kk), (v_row, v)] {
            let view = kv_view(k, g, k0, hk);
            k.load_global(t, view);
        }
    };
    match part {
        Part::Keys => {
            let q_col = tile(&mut k, "q_col", Bf16, bq, dim, Col, S32X16);
            let do_col = tile(&mut k, "do_col", Bf16, bq, dim, Col, S32X16);
            // The column-major operands go through LDS (the AMD lowerings read them from there).
            let q_s = Staged::declare(&mut k, "q_s", q_col, Bf16, (bq, dim));
            let do_s = Staged::declare(&mut k, "do_s", do_col, Bf16, (bq, dim));
            let p_col = tile(&mut k, "p_col", Bf16, bq, bk, Col, S32X16);
            let ds_col = tile(&mut k, "ds_col", Bf16, bq, bk, Col, S32X16);
            let dk_acc = tile(&mut k, "dk", F32, bk, dim, Row, S16X16);
            let dv_acc = tile(&mut k, "dv", F32, bk, dim, Row, S16X16);
            let k0 = &blk * i64::from(bk);
            load_keys(&mut k, &k0, &head);
            k.zero(dk_acc);
            k.zero(dv_acc);
            // Every (query head of the group, query block) pair.
            let per_head = n.max_q.ceil_div(i64::from(bq));
            let steps = group.clone() * per_head.clone();
            k.for_range("t", Expr::c(0), steps, |k, t| {
                let h = &head * group.clone() + &t / per_head.clone();
                let q0 = &t % per_head.clone() * i64::from(bq);
                load_queries(k, &q0, &h);
                load_slope(k, &h);
                probs_and_ds(k, &q0, &k0);
                // Q and dO column-major only now, when their row-major tiles are dead: the two
                // copies are never live together (the CDNA register file holds the step with no
                // spills).
                for (tc, g) in [(&q_s, q), (&do_s, d_o)] {
                    let view = q_view(k, g, &q0, &h);
                    tc.load(k, view);
                }
                // dV += Pᵀ·dO; dK += dSᵀ·Q.
                k.convert(p_col, s, Rounding::Rtne);
                k.mma_atb(dv_acc, p_col, do_col, dv_acc);
                k.convert(ds_col, dp, Rounding::Rtne);
                k.mma_atb(dk_acc, ds_col, q_col, dk_acc);
            });
            for (&g, acc) in outs.iter().zip([dk_acc, dv_acc]) {
                let view = kv_view(&k, g, &k0, &head);
                k.store(view, acc);
            }
        }
        Part::Queries => {
            let k_col = tile(&mut k, "k_col", Bf16, bk, dim, Col, S32X16);
            let k_s = Staged::declare(&mut k, "k_s", k_col, Bf16, (bk, dim));
            let ds_row = tile(&mut k, "ds", Bf16, bq, bk, Row, S16X32);
            let dq_acc = tile(&mut k, "dq", F32, bq, dim, Row, S16X16);
            let q0 = &blk * i64::from(bq);
            let hk = &head / group.clone();
            load_queries(&mut k, &q0, &head);
            load_slope(&mut k, &head);
            k.zero(dq_acc);
            k.for_range("j", Expr::c(0), n.max_k.ceil_div(i64::from(bk)), |k, j| {
                let k0 = &j * i64::from(bk);
                load_keys(k, &k0, &hk);
                k_s.load(k, kv_view(k, kk, &k0, &hk));
                probs_and_ds(k, &q0, &k0);
                // dQ += dS·K.
                k.convert(ds_row, dp, Rounding::Rtne);
                k.mma_ab(dq_acc, ds_row, k_col, dq_acc);
            });
            let view = q_view(&k, outs[0], &q0, &head);
            k.store(view, dq_acc);
        }
    }
    Ok(k.finish()?)
}
