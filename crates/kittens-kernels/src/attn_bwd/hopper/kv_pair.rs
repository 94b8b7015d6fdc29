//! The Hopper key blocks at head dims up to 64 in 128-query steps ([`BwdConfig::hopper_step`]):
//! each ring slot holds 128 queries, taken as two 64-query halves with score tiles of their own (the
//! f32 `Sᵀ` and `dPᵀ` of a half are 32 registers each per consumer thread, so both halves fit beside
//! dK and dV of 64 columns), so that each step's fixed work — the ring barrier, the loop, the wait
//! for the previous step's gradient products — covers twice the products of [`super::kv`]'s 64-query
//! steps. In the atomic form the two consumer warpgroups exchange `dSᵀ` by halves and warpgroup g
//! adds dQ for the queries of half g over all 128 keys: one TMA reduction per dQ element
//! (FlashAttention-3's 128 × 128 tiles at head dim 64), where the 64-query steps add each
//! warpgroup's 64 keys' share, two reductions per element.

use super::*;

/// Queries per half of a step.
const HALF: u32 = STEP;

/// The key blocks (`dk, dv` bf16 written; with `atomic_dq` `dq_acc` f32 added to) at padded head
/// dim 64 in 128-query steps: the tensors and grid of [`super::kv::build_kv`].
pub(in crate::attn_bwd) fn build_kv_pair(
    cfg: &BwdConfig,
    atomic_dq: bool,
) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let d = cfg.dim;
    if padded_dim(d) != COLS || cfg.hopper_step != 2 * HALF {
        return Err(KernelError::Config(format!(
            "attn_bwd (key blocks in query pairs): head dim {d} with {} queries per step; head \
             dims up to 64 with 128",
            cfg.hopper_step
        )));
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
    let q_step = 2 * HALF;
    // The atomic form: dSᵀ of the block by query half (BLOCK × 64 bf16 each, two slots alternating
    // by step), and each consumer warpgroup's staging of its dQ share for the TMA reduction
    // (64 × COLS f32).
    let extra = if atomic_dq {
        2 * (2 * BLOCK * HALF * 2) + 2 * 64 * COLS * 4
    } else {
        0
    };
    // K and V of the block; Q and dO in a ring of 128-query steps, one 64-row tile per half (a
    // register-A `wgmma` takes its B operand as a whole tile).
    let stages = crate::attn::hopper_bwd::stages(COLS, q_step, extra);
    let swz = |rows| SharedTile::with_swizzle(Bf16, rows, COLS, Swizzle::NV_128B);
    let k_s = k.shared_tile("k_s0", swz(BLOCK), 1);
    let v_s = k.shared_tile("v_s0", swz(BLOCK), 1);
    let mut ring = |name: &str| -> [kittens_ir::SharedId; 2] {
        [0, 1].map(|j| k.shared_tile(&format!("{name}{j}"), swz(HALF), stages))
    };
    let (q_s, do_s) = (ring("q_s"), ring("do_s"));
    let halves: [StepRegs; 2] = [0, 1].map(|j| {
        let s = k.tile(
            &format!("s_t{j}"),
            F32,
            16,
            HALF,
            Layout::Row,
            BaseShape::S16X16,
        );
        let dp = k.tile(
            &format!("dp_t{j}"),
            F32,
            16,
            HALF,
            Layout::Row,
            BaseShape::S16X16,
        );
        let slope = (cfg.alibi && j == 0).then(|| k.row_vec("alibi_r", s, F32));
        let p = k.tile(
            &format!("p_t{j}"),
            Bf16,
            16,
            HALF,
            Layout::Row,
            BaseShape::S16X32,
        );
        StepRegs { s, dp, p, slope }
    });
    // The slope is the head's: one vector for both halves.
    let slope = halves[0].slope;
    let ds: [RegId; 2] = [0, 1].map(|j| {
        k.tile(
            &format!("ds_t{j}"),
            Bf16,
            16,
            HALF,
            Layout::Row,
            BaseShape::S16X32,
        )
    });
    // dSᵀ by halves and the dQ product's 16 × 64 share (the atomic form).
    let dq_parts = match dq_acc {
        Some(dq_g) => {
            let ds_s: [kittens_ir::SharedId; 2] = [0, 1].map(|j| {
                let tile = SharedTile::with_swizzle(Bf16, BLOCK, HALF, Swizzle::NV_128B);
                k.shared_tile(&format!("ds_s{j}"), tile, 2)
            });
            let dq_p = k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
            Some((ds_s, dq_p, dq_g))
        }
        None => None,
    };
    let dk_r = k.tile("dk0", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
    let dv_r = k.tile("dv0", F32, 16, COLS, Layout::Row, BaseShape::S16X16);

    let block0 = &kb * i64::from(BLOCK);
    let walk = QueryWalk::new(cfg, &io, (&block0, BLOCK), &hk, i64::from(q_step));
    let (offset, start, total) = (&walk.offset, &walk.start, &walk.total);
    let head_of = |t: &Expr| walk.head_of(t);
    let q0_of = |t: &Expr| walk.q0_of(t);
    let ring = i64::from(stages);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let k0 = &block0 + &cw * 16; // this wave's first key
    let scale = cfg.logits.scale(d);
    // The masks of a half: a step of 64 queries from the half's first.
    let key_step = KeyStep {
        cfg,
        io: &io,
        offset,
        start,
        block0: &block0,
        block: BLOCK,
        step: i64::from(HALF),
        atomic_dq,
    };
    let capped = cfg.logits.softcap.is_some();
    // Half j's statistics of step t (one per column), as `super::kv`'s.
    let stat = |k: &mut KernelBuilder, g: GlobalId, dst: RegId, t: &Expr, j: u32| {
        let origin = vec![
            b.clone(),
            head_of(t),
            Expr::c(0),
            q0_of(t) + i64::from(j * HALF),
        ];
        let src = k.gview(g, origin, 2, 3, 16, HALF);
        k.load_global(dst, src);
    };
    k.roles(
        |k| {
            for (own, g) in [(k_s, io.k), (v_s, io.v)] {
                let src = view(k, g, &b, &hk, block0.clone(), 0, BLOCK);
                k.load_async_by(Scope::WarpGroup, k.smem(own, 0), src);
            }
            k.wait_async(0);
            k.barrier(); // K and V to the consumers
                         // Each step's 128 queries of Q and dO, a tile per half, into ring slot `t % ring`.
            k.for_range("t", 0, total, |k, t| {
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                for j in 0..2u32 {
                    for (tiles, g) in [(&q_s, io.q), (&do_s, io.d_o)] {
                        let src = view(k, g, &b, &h, &q0 + i64::from(j * HALF), 0, HALF);
                        k.load_async_by(
                            Scope::WarpGroup,
                            k.smem(tiles[j as usize], slot.clone()),
                            src,
                        );
                    }
                }
                k.wait_async(0);
                k.barrier(); // query step t to the consumers
            });
        },
        |k| {
            k.barrier(); // K and V have landed
            k.zero(dk_r);
            k.zero(dv_r);
            if !capped {
                for (j, r) in halves.iter().enumerate() {
                    stat(k, io.lse, r.s, &Expr::c(0), j as u32);
                }
            }
            k.for_range("t", 0, total, |k, t| {
                k.barrier(); // query step t has landed
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                let ds_slot = &t % 2;
                // Half j's tile of a ring slot.
                let rows = |k: &KernelBuilder, tiles: [kittens_ir::SharedId; 2], j: u32| {
                    k.smem(tiles[j as usize], slot.clone())
                };
                for (j, r) in halves.iter().enumerate() {
                    let j = j as u32;
                    let qj = &q0 + i64::from(j * HALF);
                    let regs = StepRegs { slope, ..*r };
                    let product = |k: &mut KernelBuilder, dst: RegId, from_zero: bool| {
                        let (own, streamed) = if dst == r.s { (k_s, q_s) } else { (v_s, do_s) };
                        let on = cfg.turns != BwdTurns::None && dst == r.s;
                        turn(k, on, "Sᵀ", &|k| {
                            let a = MmaOperand::Shared(k.smem(own, 0).sub(16, COLS, &cw, 0));
                            let bt = MmaOperand::Shared(rows(k, streamed, j));
                            k.mma(MmaForm::Abt, dst, a, bt, (!from_zero).then_some(dst));
                        });
                    };
                    let bht = (&b, &h, &t);
                    key_step.probs(k, &regs, bht, &qj, (&k0, &qj), &product, &|k, g, dst, t| {
                        stat(k, g, dst, t, j)
                    });
                    k.copy(ds[j as usize], r.dp);
                    if let Some((ds_s, _, _)) = dq_parts {
                        // This wave's 16 keys of half j's dSᵀ for the exchange.
                        let dst = k
                            .smem(ds_s[j as usize], ds_slot.clone())
                            .sub(16, HALF, &cw, 0);
                        k.store_shared(dst, ds[j as usize]);
                    } else if !capped {
                        // The next step's log-sum-exp of this half into its free score tile,
                        // landing behind the products (in the atomic form after dQ, as
                        // `super::kv`'s).
                        stat(k, io.lse, r.s, &(&t + 1), j);
                    }
                }
                if dq_parts.is_some() {
                    k.wait_shared(0);
                }
                // dV += Pᵀ·dO over both halves (Pᵀ from registers).
                turn(k, cfg.turns == BwdTurns::Both, "dV", &|k| {
                    for (j, r) in halves.iter().enumerate() {
                        let bt = MmaOperand::Shared(rows(k, do_s, j as u32));
                        k.mma(MmaForm::Ab, dv_r, MmaOperand::Reg(r.p), bt, Some(dv_r));
                    }
                });
                let dk = |k: &mut KernelBuilder| {
                    turn(k, cfg.turns == BwdTurns::Both, "dK", &|k| {
                        for (j, &x) in ds.iter().enumerate() {
                            let bt = MmaOperand::Shared(rows(k, q_s, j as u32));
                            k.mma(MmaForm::Ab, dk_r, MmaOperand::Reg(x), bt, Some(dk_r));
                        }
                    });
                };
                let Some((ds_s, dq_p, dq_g)) = dq_parts else {
                    dk(k);
                    return;
                };
                // Both warpgroups' keys of dSᵀ stored: warpgroup g takes half g's queries over all
                // 128 keys, dQ between dV and dK (as `super::kv`'s head dim 128) so that its wait
                // leaves dK on the tensor cores while the f32 share is staged and reduced.
                k.barrier_by(Scope::Consumers);
                let (g, wq) = (&cw / 4, &cw % 4);
                let dq_mma = |k: &mut KernelBuilder, half: usize| {
                    let ds_v = k.smem(ds_s[half], ds_slot.clone()).sub(BLOCK, 16, 0, &wq);
                    let (a, bt) = (MmaOperand::Shared(ds_v), MmaOperand::Shared(k.smem(k_s, 0)));
                    k.mma(MmaForm::Atb, dq_p, a, bt, None);
                };
                k.if_else(g.eq(0), |k| dq_mma(k, 0), |k| dq_mma(k, 1));
                dk(k);
                let q_w = &q0 + &g * i64::from(HALF) + &wq * 16;
                k.atomic_add(view(k, dq_g, &b, &h, q_w, 0, 16), dq_p);
                if !capped {
                    for (j, r) in halves.iter().enumerate() {
                        stat(k, io.lse, r.s, &(&t + 1), j as u32);
                    }
                }
            });
            k.mul(dk_r, dk_r, scale);
            k.store(view(k, dk_g, &b, &hk, k0.clone(), 0, 16), dk_r);
            k.store(view(k, dv_g, &b, &hk, k0.clone(), 0, 16), dv_r);
        },
    );
    Ok(k.finish()?)
}
