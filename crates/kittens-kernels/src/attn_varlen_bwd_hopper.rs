//! The variable-length attention backward for Hopper (sm_90a): the key blocks of the dense Hopper
//! backward's atomic form (`crate::attn_bwd`'s `hopper`, FlashAttention-3's backward, §3.3) on the
//! packed tensors of [`crate::attn_varlen`], sharing its schedule, shared tiles and softmax step
//! ([`crate::attn::hopper_bwd`]).
//!
//! One block per (sequence, KV head, 128 keys of the sequence) keeps K and V in shared memory and
//! streams 64-query steps of Q and dO for each query head of the KV head's group, as the dense
//! program: `Sᵀ = K·Qᵀ`, `dPᵀ = V·dOᵀ`, `Pᵀ` from the forward's log-sum-exp, `dSᵀ = Pᵀ∘(dPᵀ − D)`,
//! `dV += Pᵀ·dO`, `dK += dSᵀ·Q` in registers and `dS·K` added into an f32 dQ accumulator
//! (`dq_acc`, zeroed by the caller, which scales it into dQ afterwards). `D = rowsum(dO∘O)`
//! (FlashAttention-2 §3.2's preprocessing) comes in as `delta`, `[heads, total_q]` like the lse: a
//! per-row product over the packed rows, which needs no sequence offsets (the Python caller forms
//! it on the device).
//!
//! What varlen changes against the dense program:
//!
//! - tile origins are `cu_seqlens[b] + offset` (`Expr::Elem`, read per block); the query steps run
//!   over the sequence's own (`⌈len_q / 64⌉`), from the first the causal diagonal or the window
//!   lets reach the block's keys to the last, bounds read on the device
//!   ([`crate::attn::varlen::KeyWalk`]);
//! - the loads are not clipped: rows past a sequence's end are the next sequence's (or past the
//!   tensor, zero), and every score they meet is masked (queries past `len_q`, keys past `len_k`,
//!   the bottom-right causal diagonal, applied on every step), so their P and dS are exactly 0: they
//!   add `0` to dQ and nothing to dK, dV. So TMA fills the rings as in the dense program, and the
//!   dQ accumulator is reduced through TMA as there (clipped at the tensor's edge only);
//! - dK and dV are clipped at the key sequence's end (bounds-checked direct stores): the block's
//!   rows past it belong to the next sequence.
//!
//! ALiBi
//! ([`VarlenConfig::alibi`]), a soft cap and a sliding window as the dense program
//! ([`crate::attn::hopper_bwd::step_probs`]): the bias after the cap, the window's sides masked
//! bottom-right in each sequence beside the causal diagonal.
//!
//! Head dims 192 and 256, and 128 with a soft cap (whose capped step at 128-key blocks leaves too
//! few of the 240 consumer registers beside the f32 dQ share, as in the dense atomic form), run the
//! 64-key blocks of [`wide`].

use crate::attn::hopper::{BLOCK, COLS};
use crate::attn::hopper_bwd::{declare_smem, schedule, step_probs, StepFns, StepTiles, STEP};
use crate::attn::score::Alibi;
use crate::attn::varlen::{alibi_add, check, offsets, Batch, KeyWalk, Seq, VarlenConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand,
    RegId, Scope,
};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Parameters as the forward's; tensors `q, k, v, do` (bf16, read), `lse`, `delta` (f32 `[heads,
/// total_q]`, read), `cu_seqlens_q`, `cu_seqlens_k`, with ALiBi `alibi` (f32 `[batch, heads]`), then
/// `dk`, `dv` (bf16, `[total_k, heads_kv, d]`,
/// written) and `dq_acc` (f32, `[total_q, heads, d]`, zeroed before the launch, accumulated). The
/// packed tensors are declared head-major, `[heads, total, d]` with strides `[d, heads·d, 1]` (the
/// same memory). Grid `[batch, heads_kv, ⌈max_seqlen_k / 128⌉]` at head dims 64 and 128, `[batch,
/// heads_kv, ⌈max_seqlen_k / 64⌉]` where [`wide`] builds it.
pub fn build(cfg: &VarlenConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    if cfg.seqused_k {
        return Err(KernelError::Config(
            "seqused_k: the varlen backward does not take it (a KV cache is forward only)".into(),
        ));
    }
    let d = cfg.dim;
    if wide::takes(cfg) {
        return wide::build(cfg);
    }
    if !matches!(d, 64 | 128) {
        return Err(KernelError::Config(format!(
            "head dim: the sm_90a varlen backward takes 64, 128, 192 or 256 (64-column tiles of \
             the head dimension in the key blocks), got {d}"
        )));
    }
    let name = cfg.name("attn_varlen_bwd") + "_sm90";
    let mut k = KernelBuilder::new(&name, schedule());
    let io = Io::declare(&mut k, cfg, BLOCK);
    let [q, kk, v, d_o, lse, delta, dk_g, dv_g, dq_g] = io.g;
    let ((b, hk, kb), (len_q, len_k)) = (io.blk, io.lens);
    let (alibi, sq, group) = (io.alibi, io.sq, io.group);
    // dSᵀ (BLOCK × STEP bf16, two slots) and each consumer warpgroup's staging of its dQ share for
    // the TMA reduction (64 × COLS f32), as the dense atomic form.
    let extra = 2 * BLOCK * STEP * 2 + 2 * 64 * COLS * 4;
    let sm = declare_smem(&mut k, d, STEP, extra, ["k_s", "v_s", "q_s", "do_s"]);
    let [k_s, v_s] = &sm.own;
    let [q_s, do_s] = &sm.ring;
    let halves = (d / COLS) as usize;
    let StepTiles {
        s,
        dp,
        slope,
        p,
        ds,
        dk_r,
        dv_r,
    } = StepTiles::declare(&mut k, halves, alibi.is_some());
    let ds_tile = SharedTile::with_swizzle(Bf16, BLOCK, STEP, Swizzle::NV_128B);
    let ds_s = k.shared_tile("ds_s", ds_tile, 2);
    let dq_p = k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16);

    let block0 = &kb * i64::from(BLOCK); // in the key sequence
    let step = i64::from(STEP);
    // One pipeline over the (query head of the group, query step) pairs that reach the block.
    let lens = (&len_q, &len_k);
    let walk = KeyWalk::new(cfg, lens, (&block0, BLOCK), (&hk, &group), step);
    let total = &walk.total;
    let head_of = |t: &Expr| walk.head_of(t);
    let q0_of = |t: &Expr| walk.q0_of(t); // in the query sequence
    let ring = i64::from(sm.stages);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let k0 = &block0 + &cw * 16; // this wave's first key, in the sequence
    let scale = cfg.logits.scale(d);
    let capped = cfg.logits.softcap.is_some();
    let (last_key, first_key) = (
        cfg.last_key_offset(&len_q, &len_k),
        cfg.first_key_offset(&len_q, &len_k),
    );
    // `rows × 64` of head `h` of packed tensor `g` from packed row `row`, columns from `col0`.
    let view = |k: &KernelBuilder, g: GlobalId, row: Expr, h: &Expr, col0: u32, rows| {
        let at = vec![h.clone(), row, Expr::c(i64::from(col0))];
        k.gview(g, at, 1, 2, rows, COLS)
    };
    // Step `t`'s statistics (one query per column) start the score accumulators, as in the dense
    // program: `Sᵀ` from `−lse/scale`, `dPᵀ` from `−D`.
    let stat = |k: &mut KernelBuilder, g: GlobalId, dst: RegId, t: &Expr| {
        let origin = vec![head_of(t), Expr::c(0), &sq.start_q + q0_of(t)];
        let src = k.gview(g, origin, 1, 2, 16, STEP);
        k.load_global(dst, src);
    };
    let kv_row = &sq.start_k + block0.clone();
    k.roles(
        |k| {
            for (own, g) in [(k_s, kk), (v_s, v)] {
                for (i, &t) in own.iter().enumerate() {
                    let src = view(k, g, kv_row.clone(), &hk, i as u32 * COLS, BLOCK);
                    k.load_async_by(Scope::WarpGroup, k.smem(t, 0), src);
                }
            }
            k.wait_async(0);
            k.barrier(); // K and V to the consumers
            k.for_range("t", 0, total, |k, t| {
                let slot = &t % ring;
                let (h, row) = (head_of(&t), &sq.start_q + q0_of(&t));
                for (tiles, g) in [(q_s, q), (do_s, d_o)] {
                    for (i, &ts) in tiles.iter().enumerate() {
                        let src = view(k, g, row.clone(), &h, i as u32 * COLS, STEP);
                        k.load_async_by(Scope::WarpGroup, k.smem(ts, slot.clone()), src);
                    }
                }
                k.wait_async(0);
                k.barrier(); // query step t to the consumers
            });
        },
        |k| {
            k.barrier(); // K and V have landed
            for &r in dk_r.iter().chain(&dv_r) {
                k.zero(r);
            }
            if !capped {
                stat(k, lse, s, &Expr::c(0));
            }
            k.for_range("t", 0, total, |k, t| {
                k.barrier(); // query step t has landed
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                // `Sᵀ += K·Qᵀ` or `dPᵀ += V·dOᵀ` over the head dimension, 64 columns at a time.
                let product = |k: &mut KernelBuilder, dst: RegId, from_zero: bool| {
                    let (own, streamed) = if dst == s { (k_s, q_s) } else { (v_s, do_s) };
                    for (i, (&a, &bt)) in own.iter().zip(streamed).enumerate() {
                        let a = MmaOperand::Shared(k.smem(a, 0).sub(16, COLS, &cw, 0));
                        let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                        let acc = !(from_zero && i == 0);
                        k.mma(MmaForm::Abt, dst, a, bt, acc.then_some(dst));
                    }
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
                        bias_and_masks(k, x, slope, masks, (&q0, &k0), (&len_q, &len_k));
                    },
                };
                step_probs(k, (&cfg.logits, d), (s, dp, p), &fns);
                k.copy(ds, dp);
                // This warpgroup's 64 keys of dSᵀ to shared memory for dQ (slots alternating by
                // step), stored before dV and dK so that their products run behind the store.
                let ds_slot = &t % 2;
                k.store_shared(k.smem(ds_s, ds_slot.clone()).sub(16, STEP, &cw, 0), ds);
                k.wait_shared(0);
                // dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ from registers).
                let grad = |k: &mut KernelBuilder, accs: &[RegId], a: RegId, streamed: &[_]| {
                    for (&r, &bt) in accs.iter().zip(streamed) {
                        let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                        k.mma(MmaForm::Ab, r, MmaOperand::Reg(a), bt, Some(r));
                    }
                };
                grad(k, &dv_r, p, do_s);
                let (g, wq) = (&cw / 4, &cw % 4);
                let q_row = &sq.start_q + (&q0 + &wq * 16);
                if halves == 2 {
                    // Head dimension 128: both warpgroups' keys, then warpgroup g adds the whole
                    // product for its 64 columns (one reduction per dQ element), between dV and dK.
                    k.barrier_by(Scope::Consumers);
                    let dq_mma = |k: &mut KernelBuilder, kt| {
                        let ds_v = k.smem(ds_s, ds_slot.clone()).sub(BLOCK, 16, 0, &wq);
                        let (a, bt) = (MmaOperand::Shared(ds_v), MmaOperand::Shared(k.smem(kt, 0)));
                        k.mma(MmaForm::Atb, dq_p, a, bt, None);
                    };
                    k.if_else(g.eq(0), |k| dq_mma(k, k_s[0]), |k| dq_mma(k, k_s[1]));
                    grad(k, &dk_r, ds, q_s);
                    let at = vec![h.clone(), q_row, &g * i64::from(COLS)];
                    k.atomic_add(k.gview(dq_g, at, 1, 2, 16, COLS), dq_p);
                } else {
                    // Head dimension 64: each warpgroup adds its own 64 keys' share.
                    grad(k, &dk_r, ds, q_s);
                    k.barrier_by(Scope::WarpGroup);
                    let ds_v = k.smem(ds_s, ds_slot.clone()).sub(64, 16, &g, &wq);
                    let k_v = k.smem(k_s[0], 0).sub(64, COLS, &g, 0);
                    let (a, bt) = (MmaOperand::Shared(ds_v), MmaOperand::Shared(k_v));
                    k.mma(MmaForm::Atb, dq_p, a, bt, None);
                    k.atomic_add(view(k, dq_g, q_row, &h, 0, 16), dq_p);
                }
                if !capped {
                    stat(k, lse, s, &(&t + 1));
                }
            });
            let row = &sq.start_k + k0.clone();
            for (i, (&dkr, &dvr)) in dk_r.iter().zip(&dv_r).enumerate() {
                k.mul(dkr, dkr, scale);
                let col = i as u32 * COLS;
                k.store(view(k, dk_g, row.clone(), &hk, col, 16), dkr);
                k.store(view(k, dv_g, row.clone(), &hk, col, 16), dvr);
            }
        },
    );
    Ok(k.finish()?)
}

/// What both key-block forms ([`build`]'s and [`wide`]'s) declare, in the order the runner passes
/// it: the sizes ([`Batch`]), the packed tensors, the offsets and the outputs, the grid `[batch,
/// heads_kv, ⌈max_seqlen_k / block⌉]`, and block `(b, hk, kb)`'s sequence bounds.
struct Io {
    /// `q, k, v, do, lse, delta, dk, dv, dq_acc`.
    g: [GlobalId; 9],
    alibi: Option<Alibi>,
    /// The block's `(b, hk, kb)`: sequence, KV head, key block.
    blk: (Expr, Expr, Expr),
    sq: Seq,
    /// The sequence's query and key lengths.
    lens: (Expr, Expr),
    /// Query heads per KV head.
    group: Expr,
}

impl Io {
    fn declare(k: &mut KernelBuilder, cfg: &VarlenConfig, block: u32) -> Io {
        let n = Batch::declare(k);
        let dim = Expr::c(i64::from(cfg.dim));
        let packed = |k: &mut KernelBuilder, name: &str, queries: bool, dtype, access| {
            let (total, h) = if queries {
                (&n.total_q, &n.heads)
            } else {
                (&n.total_k, &n.heads_kv)
            };
            // `[h, s, d]` over the packed `[s, h, d]` memory: the dense programs' BSHD declaration
            // at batch 1, so that the strip passes of the dense atomic form
            // (`crate::attn::bwd_strips`) read `do` and the dQ accumulator as this program does (a
            // prepared call checks a shared tensor's dimensions in order).
            let dims = [("h", h.clone()), ("s", total.clone()), ("d", dim.clone())];
            let strides = vec![dim.clone(), h * dim.clone(), Expr::c(1)];
            k.global_strided(name, dtype, &dims, strides, access)
        };
        let q = packed(k, "q", true, Bf16, Access::Read);
        let kk = packed(k, "k", false, Bf16, Access::Read);
        let v = packed(k, "v", false, Bf16, Access::Read);
        let d_o = packed(k, "do", true, Bf16, Access::Read);
        // The per-query statistics as `[h, r, s]` with a zero stride along `r`: a `16 × n` tile of
        // them holds one query per column, broadcast over the keys' rows (the dense key blocks'
        // reading).
        let stats = |k: &mut KernelBuilder, name: &str| {
            let dims = [
                ("h", n.heads.clone()),
                ("r", Expr::c(16)),
                ("s", n.total_q.clone()),
            ];
            let strides = vec![n.total_q.clone(), Expr::c(0), Expr::c(1)];
            k.global_strided(name, F32, &dims, strides, Access::Read)
        };
        let lse = stats(k, "lse");
        let delta = stats(k, "delta");
        let (cu_q, cu_k) = offsets(k, &n.batch);
        let alibi = cfg.alibi.then(|| Alibi::declare(k, &n.batch, &n.heads));
        let dk_g = packed(k, "dk", false, Bf16, Access::Write);
        let dv_g = packed(k, "dv", false, Bf16, Access::Write);
        let dq_g = packed(k, "dq_acc", true, F32, Access::ReadWrite);
        let blocks = n.max_k.ceil_div(i64::from(block));
        k.grid(
            vec![n.batch.clone(), n.heads_kv.clone(), blocks],
            GridOrder::RowMajor,
        );
        let (b, hk, kb) = (k.block(0), k.block(1), k.block(2));
        let sq = Seq::of(cu_q, cu_k, &b);
        let (len_q, len_k) = (
            &sq.end_q - sq.start_q.clone(),
            &sq.end_k - sq.start_k.clone(),
        );
        // The block's rows past its key sequence belong to the next one.
        for g in [dk_g, dv_g] {
            k.clip(g, 1, sq.end_k.clone());
        }
        let group = &n.heads / n.heads_kv.clone();
        Io {
            g: [q, kk, v, d_o, lse, delta, dk_g, dv_g, dq_g],
            alibi,
            blk: (b, hk, kb),
            sq,
            lens: (len_q, len_k),
            group,
        }
    }
}

/// A varlen key block's bias and masks on the transposed logits `x` (keys × queries, origin key
/// `k0` and query `q0` of the sequence), on every step: ALiBi's bias, then keys (rows) past the key
/// sequence, queries (columns) past the query sequence (the unclipped loads' rows of the next
/// sequence), the causal diagonal or the window's right side (`last_key`) and the window's left
/// side (`first_key`), bottom-right in the sequence.
fn bias_and_masks(
    k: &mut KernelBuilder,
    x: RegId,
    slope: Option<RegId>,
    (last_key, first_key): (&Option<Expr>, &Option<Expr>),
    (q0, k0): (&Expr, &Expr),
    (len_q, len_k): (&Expr, &Expr),
) {
    alibi_add(k, slope, x, (q0, k0), (len_q, len_k), true);
    let inf = f32::NEG_INFINITY;
    k.mask(x, MaskRule::ColsBelow(len_q.clone()), k0, q0, inf);
    k.mask(x, MaskRule::RowsBelow(len_k.clone()), k0, q0, inf);
    if let Some(offset) = last_key.clone() {
        k.mask(x, MaskRule::CausalT { offset }, k0, q0, inf);
    }
    if let Some(offset) = first_key.clone() {
        k.mask(x, MaskRule::WindowStartT { offset }, k0, q0, inf);
    }
}

mod wide;
