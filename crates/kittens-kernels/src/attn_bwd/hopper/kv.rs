//! The key blocks of the Hopper backward ([`super`]): dK and dV, and dQ by atomic adds when asked.

use super::*;

/// The key blocks: `dk, dv` (bf16, written) after the inputs. Grid `[batch, heads_kv, key blocks]`.
///
/// With `atomic_dq` (FlashAttention-3's backward, [`crate::attn::bwd_strips`]) they also write dQ: one
/// more tensor, `dq_acc` (f32, Q's shape and layout, zeroed before the launch), into which every
/// step adds its `dS·K` — `dSᵀ` through a 128-byte-swizzled shared tile (each consumer warpgroup
/// stores its own 64 keys; two slots alternating by step), read back transposed as the A operand of
/// `mma_atb` with K from the block's own tiles, and added with [`kittens_ir::Op::AtomicAdd`]
/// (on sm_90a one TMA reduction per warpgroup). At head dimension 128 the warpgroups exchange their
/// keys through a consumers barrier ([`Scope::Consumers`]) and warpgroup g adds columns 64g.. over
/// all 128 keys: one reduction per dQ element (0.899x → 0.984x the two launches on the H200,
/// docs/performance.md); at 64 each warpgroup adds its own keys' share of all columns.
pub(in crate::attn_bwd) fn build_kv(
    cfg: &BwdConfig,
    atomic_dq: bool,
) -> Result<Kernel, KernelError> {
    check(cfg)?;
    if atomic_dq && cfg.logits.softcap.is_some() && cfg.dim > 64 {
        // Beside the f32 dQ share, a capped step's P (held through dP's product) leaves ptxas too
        // few of the 240 consumer registers: it serialises the wgmmas (C7512).
        return Err(KernelError::Config(format!(
            "attn_bwd (atomic dQ): a softcap at head dim {} does not fit the 240 consumer \
             registers of the atomic form; the two-launch form (the default, or the `dq` \
             variant) takes it",
            cfg.dim
        )));
    }
    let d = cfg.dim;
    match cfg.hopper_step {
        STEP => {}
        // 128-query steps as two 64-query halves (`super::kv_pair`).
        128 if padded_dim(d) == COLS => return super::kv_pair::build_kv_pair(cfg, atomic_dq),
        q_step => {
            return Err(KernelError::Config(format!(
                "attn_bwd (producer/consumer key blocks): {q_step} queries per step at head dim \
                 {d}; 64, or 128 at head dims up to 64 (the f32 scores and dP of 128 queries take \
                 128 of the 240 registers per consumer thread beside dK and dV)"
            )))
        }
    }
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
    // The atomic form also holds dSᵀ (BLOCK × STEP bf16) and, on Hopper, each consumer
    // warpgroup's staging of its dQ share for the TMA reduction (64 × COLS f32).
    let extra = if atomic_dq {
        2 * BLOCK * STEP * 2 + 2 * 64 * COLS * 4
    } else {
        0
    };
    // Head dim 96 runs on 128 columns, the last 32 read as zeros and stored nowhere (as the forward's
    // `attn_fwd::producer_consumer` does).
    let dp = padded_dim(d);
    let sm = declare_smem(&mut k, dp, STEP, extra, ["k_s", "v_s", "q_s", "do_s"]);
    let [k_s, v_s] = &sm.own;
    let [q_s, do_s] = &sm.ring;
    let halves = (dp / COLS) as usize;

    let StepTiles {
        s,
        dp,
        slope,
        p,
        ds,
        dk_r,
        dv_r,
    } = StepTiles::declare(&mut k, halves, cfg.alibi);
    // dSᵀ of the block (keys × queries) for the dQ product, and that product's 16 × 64 share.
    let dq_parts = atomic_dq.then(|| {
        let tile = SharedTile::with_swizzle(Bf16, BLOCK, STEP, Swizzle::NV_128B);
        let ds_s = k.shared_tile("ds_s", tile, 2);
        let dq_p = k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
        (ds_s, dq_p)
    });

    let block0 = &kb * i64::from(BLOCK);
    let step = i64::from(STEP);
    let walk = QueryWalk::new(cfg, &io, (&block0, BLOCK), &hk, step);
    let (offset, start, total) = (&walk.offset, &walk.start, &walk.total);
    let head_of = |t: &Expr| walk.head_of(t);
    let q0_of = |t: &Expr| walk.q0_of(t);
    let ring = i64::from(sm.stages);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let k0 = &block0 + &cw * 16; // this wave's first key
    let scale = cfg.logits.scale(d);
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
    // A soft cap needs the raw scores (`crate::attn::score`): `Sᵀ` then starts from zero.
    let capped = cfg.logits.softcap.is_some();
    // The statistics of step `t`'s queries (one per column) start its accumulators: `Sᵀ` from
    // `−lse/scale` (so that `Sᵀ·c` is the exponent `s·c − lse·log2 e`) and `dPᵀ` from `−D` (so that it
    // ends as `dPᵀ − D`). Held in separate tiles beside the scores they kept 32 more registers live
    // through the softmax (88 spilled loads); loaded at the top of the step, their latency from L2
    // sat between one step's products and the next. `stats` loads (past the last step: clipped or
    // another head's, unused), `scale_stats` scales once they are needed.
    let stat = |k: &mut KernelBuilder, g: GlobalId, dst: RegId, t: &Expr| {
        let origin = vec![b.clone(), head_of(t), Expr::c(0), q0_of(t)];
        let src = k.gview(g, origin, 2, 3, 16, STEP);
        k.load_global(dst, src);
    };
    k.roles(
        |k| {
            for (own, g) in [(k_s, io.k), (v_s, io.v)] {
                for (i, &t) in own.iter().enumerate() {
                    let src = view(k, g, &b, &hk, block0.clone(), i as u32 * COLS, BLOCK);
                    k.load_async_by(Scope::WarpGroup, k.smem(t, 0), src);
                }
            }
            k.wait_async(0);
            k.barrier(); // K and V to the consumers
            walk.stream(k, &io, &b, [q_s, do_s], ring);
        },
        |k| {
            k.barrier(); // K and V have landed
            for &r in dk_r.iter().chain(&dv_r) {
                k.zero(r);
            }
            if !capped {
                stat(k, io.lse, s, &Expr::c(0));
            }
            k.for_range("t", 0, total, |k, t| {
                k.barrier(); // query step t has landed
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                // `Sᵀ = K·Qᵀ` (`from_zero`) or `dPᵀ += V·dOᵀ` over the head dimension, 64 columns
                // at a time.
                let product = |k: &mut KernelBuilder, dst: RegId, from_zero: bool| {
                    let (own, streamed) = if dst == s { (k_s, q_s) } else { (v_s, do_s) };
                    let on = cfg.turns != BwdTurns::None && dst == s;
                    turn(k, on, "Sᵀ", &|k| {
                        for (i, (&a, &bt)) in own.iter().zip(streamed).enumerate() {
                            let a = MmaOperand::Shared(k.smem(a, 0).sub(16, COLS, &cw, 0));
                            let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                            let acc = !(from_zero && i == 0);
                            k.mma(MmaForm::Abt, dst, a, bt, acc.then_some(dst));
                        }
                    });
                };
                let (ctx, bht) = (&key_step, (&b, &h, &t));
                ctx.probs(k, &regs, bht, &q0, (&k0, &q0), &product, &|k, g, dst, t| {
                    stat(k, g, dst, t)
                });
                k.copy(ds, dp);
                // The next step's log-sum-exp into the free score tile, landing behind dV and dK
                // (in the atomic form after dQ: live through it, it spilled).
                if !atomic_dq && !capped {
                    stat(k, io.lse, s, &(&t + 1));
                }
                // dQ += dS·K needs this warpgroup's 64 keys of dSᵀ in shared memory (slots
                // alternating by step, so that a step's writes never meet the last step's reads),
                // stored before dV and dK so that their products run behind the store and the
                // barrier below.
                let ds_slot = &t % 2;
                if let Some((ds_s, _)) = dq_parts {
                    k.store_shared(k.smem(ds_s, ds_slot.clone()).sub(16, STEP, &cw, 0), ds);
                    k.wait_shared(0);
                }
                // dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ from registers).
                let grad = |k: &mut KernelBuilder, accs: &[RegId], a: RegId, streamed: &[_]| {
                    for (&r, &bt) in accs.iter().zip(streamed) {
                        let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                        k.mma(MmaForm::Ab, r, MmaOperand::Reg(a), bt, Some(r));
                    }
                };
                let dq_between = atomic_dq && halves == 2;
                turn(k, cfg.turns == BwdTurns::Both, "dV, dK", &|k| {
                    grad(k, &dv_r, p, do_s);
                    if !dq_between {
                        grad(k, &dk_r, ds, q_s);
                    }
                });
                if let (Some((ds_s, dq_p)), Some(dq_g)) = (dq_parts, dq_acc) {
                    // dQ += dS·K with dSᵀ read back as `K × M` (keys × queries) beside K.
                    let (g, wq) = (&cw / 4, &cw % 4);
                    let q_w = &q0 + &wq * 16;
                    if dq_between {
                        // Head dimension 128: both warpgroups' keys, then warpgroup g adds the
                        // whole product for its 64 columns — one reduction per dQ element. dQ goes
                        // between dV and dK (FlashAttention-3's order): its wait leaves dK on the
                        // tensor cores while the f32 share is staged and reduced.
                        k.barrier_by(Scope::Consumers);
                        let dq_mma = |k: &mut KernelBuilder, kt| {
                            let ds_v = k.smem(ds_s, ds_slot.clone()).sub(BLOCK, 16, 0, &wq);
                            let (a, bt) =
                                (MmaOperand::Shared(ds_v), MmaOperand::Shared(k.smem(kt, 0)));
                            k.mma(MmaForm::Atb, dq_p, a, bt, None);
                        };
                        k.if_else(g.eq(0), |k| dq_mma(k, k_s[0]), |k| dq_mma(k, k_s[1]));
                        grad(k, &dk_r, ds, q_s);
                        let origin = vec![b.clone(), h.clone(), q_w.clone(), &g * i64::from(COLS)];
                        k.atomic_add(k.gview(dq_g, origin, 2, 3, 16, COLS), dq_p);
                    } else {
                        // Head dimension 64: each warpgroup adds its own 64 keys' share.
                        k.barrier_by(Scope::WarpGroup);
                        for (i, &kt) in k_s.iter().enumerate() {
                            let ds_v = k.smem(ds_s, ds_slot.clone()).sub(64, 16, &g, &wq);
                            let k_v = k.smem(kt, 0).sub(64, COLS, &g, 0);
                            let (a, bt) = (MmaOperand::Shared(ds_v), MmaOperand::Shared(k_v));
                            k.mma(MmaForm::Atb, dq_p, a, bt, None);
                            let col = i as u32 * COLS;
                            k.atomic_add(view(k, dq_g, &b, &h, q_w.clone(), col, 16), dq_p);
                        }
                    }
                }
                if atomic_dq && !capped {
                    stat(k, io.lse, s, &(&t + 1));
                }
            });
            for (i, (&dkr, &dvr)) in dk_r.iter().zip(&dv_r).enumerate() {
                k.mul(dkr, dkr, scale);
                let col = i as u32 * COLS;
                k.store(view(k, dk_g, &b, &hk, k0.clone(), col, 16), dkr);
                k.store(view(k, dv_g, &b, &hk, k0.clone(), col, 16), dvr);
            }
        },
    );
    Ok(k.finish()?)
}
