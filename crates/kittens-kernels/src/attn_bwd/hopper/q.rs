//! The query blocks of the Hopper backward ([`super`]): D, then dQ.

use super::*;

/// Keys per streamed step of the query blocks at padded head dim `dp`: [`STEP_Q`] up to 128; past
/// it the most of 64 and 32 whose two ring slots of K and V fit beside the block's Q and dO in the
/// 225 KiB of shared memory (192: 96 KiB + 2 × 48 KiB; 256: 128 KiB + 2 × 32 KiB). The narrower
/// scores and dP (`16 × step` f32 each per wave) also leave dQ (`dp / 2` f32 per thread) within
/// the 240 registers of a consumer thread: 96 + 64 at 192, 128 + 32 at 256.
fn step_q(dp: u32) -> u32 {
    match dp {
        ..=128 => STEP_Q,
        129..=192 => 64,
        _ => 32,
    }
}

/// The head dims the query blocks take: the key blocks' ([`check`]) and 192, 256 (whose key blocks
/// are `super::wide`'s).
fn check_q(cfg: &BwdConfig) -> Result<(), KernelError> {
    if matches!(cfg.dim, 192 | 256) {
        Ok(())
    } else {
        check(cfg)
    }
}

/// The query blocks: `dq` (bf16, written) after the inputs. Grid `[batch, heads, query blocks]`.
pub(in crate::attn_bwd) fn build_q(cfg: &BwdConfig) -> Result<Kernel, KernelError> {
    check_q(cfg)?;
    let d = cfg.dim;
    let mut k = KernelBuilder::new(crate::attn_bwd::name_dq(cfg), schedule());
    let io = declare_inputs(&mut k, cfg, true);
    let dim = Expr::c(i64::from(d));
    let dims = [
        ("b", io.batch.clone()),
        ("h", io.heads.clone()),
        ("s", io.seq_q.clone()),
        ("d", dim.clone()),
    ];
    let st = tensor_strides(
        &mut k,
        cfg.strided,
        cfg.layout,
        "dq",
        (&io.heads, &io.seq_q, &dim),
    );
    let dq_g = k.global_strided("dq", Bf16, &dims, st, Access::Write);
    let n_qb = io.seq_q.ceil_div(i64::from(BLOCK));
    // The query blocks of one head adjacent (they share its K and V in L2), the last first (the
    // longest under a causal mask), and then paired long with short.
    k.grid(
        vec![io.batch.clone(), io.heads.clone(), n_qb.clone()],
        GridOrder::RowMajor,
    );
    let rank = if cfg.causal == Causal::No {
        k.block(2)
    } else {
        k.pair_long_short(&k.block(2), &n_qb)
    };
    let (b, h, qb) = (k.block(0), k.block(1), n_qb - 1 - rank);
    let hk = &h / (&io.heads / io.heads_kv.clone());
    let dp = padded_dim(d);
    let step_q = step_q(dp);
    let sm = declare_smem(&mut k, dp, step_q, 0, ["q_s", "do_s", "k_s", "v_s"]);
    let [q_s, do_s] = &sm.own;
    let [k_s, v_s] = &sm.ring;
    let halves = (dp / COLS) as usize;

    let s = k.tile("s", F32, 16, step_q, Layout::Row, BaseShape::S16X16);
    let dp = k.tile("dp", F32, 16, step_q, Layout::Row, BaseShape::S16X16);
    let slope = cfg.alibi.then(|| k.row_vec("alibi_r", s, F32));
    let ds = k.tile("ds", Bf16, 16, step_q, Layout::Row, BaseShape::S16X32);
    let o_f = k.tile("o_f", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
    let do_f = k.tile("do_f", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
    let d_r = k.row_vec("d_r", o_f, F32);
    let l_r = k.row_vec("l_r", o_f, F32);
    let dl_r = io.dlse.map(|_| k.row_vec("dl_r", o_f, F32));
    let o_g =
        io.o.ok_or_else(|| KernelError::Config("attn_bwd: the query blocks read O".into()))?;
    let dq_r: Vec<RegId> = (0..halves)
        .map(|i| {
            k.tile(
                &format!("dq{i}"),
                F32,
                16,
                COLS,
                Layout::Row,
                BaseShape::S16X16,
            )
        })
        .collect();

    let q_blk = &qb * i64::from(BLOCK);
    let step = i64::from(step_q);
    let offset = cfg.last_key_offset(&io.seq_q, &io.seq_kv);
    // Causal (or a window's right side): key steps up to the last one the block's last query keeps.
    let n_kv = match &offset {
        Some(off) => io.seq_kv.ceil_div(step).min(
            (&q_blk + i64::from(BLOCK) + off.clone())
                .max(0)
                .ceil_div(step),
        ),
        None => io.seq_kv.ceil_div(step),
    };
    // A window's left side: from the key step holding the block's first query's first key; the
    // loops count steps from there (`kv_steps`).
    let start = cfg.first_key_offset(&io.seq_q, &io.seq_kv);
    let j0 = match &start {
        Some(st) => ((&q_blk + st.clone()) / step).max(0),
        None => Expr::c(0),
    };
    let kv_steps = (&n_kv - j0.clone()).max(0);
    let ring = i64::from(sm.stages);
    let cw = k.wave() - 4;
    let q0 = &q_blk + &cw * 16; // this wave's first query
    let scale = cfg.logits.scale(d);
    let c = std::f32::consts::LOG2_E * cfg.logits.softmax_scale(d);
    k.roles(
        |k| {
            for (own, g) in [(q_s, io.q), (do_s, io.d_o)] {
                for (i, &t) in own.iter().enumerate() {
                    let src = view(k, g, &b, &h, q_blk.clone(), i as u32 * COLS, BLOCK);
                    k.load_async_by(Scope::WarpGroup, k.smem(t, 0), src);
                }
            }
            k.wait_async(0);
            k.barrier(); // Q and dO to the consumers
            k.for_range("j", 0, &kv_steps, |k, j| {
                let slot = &j % ring;
                let s0 = (&j0 + j) * step;
                for (tiles, g) in [(k_s, io.k), (v_s, io.v)] {
                    for (i, &ts) in tiles.iter().enumerate() {
                        let src = view(k, g, &b, &hk, s0.clone(), i as u32 * COLS, step_q);
                        k.load_async_by(Scope::WarpGroup, k.smem(ts, slot.clone()), src);
                    }
                }
                k.wait_async(0);
                k.barrier(); // key step j to the consumers
            });
        },
        |k| {
            k.barrier(); // Q and dO have landed
            for &r in &dq_r {
                k.zero(r);
            }
            // D = rowsum(dO∘O) of this wave's queries (the preprocessing, FlashAttention-2 §3.2),
            // from O and dO in global memory, 64 columns at a time, written for the key blocks'
            // launch (which follows on the stream).
            for i in 0..halves {
                let col = i as u32 * COLS;
                k.load_global(o_f, view(k, o_g, &b, &h, q0.clone(), col, 16));
                k.load_global(do_f, view(k, io.d_o, &b, &h, q0.clone(), col, 16));
                k.mul(o_f, o_f, do_f);
                k.reduce(Axis::Rows, ReduceOp::Sum, d_r, o_f, (i > 0).then_some(d_r));
            }
            // Less the lse's gradient (FlashAttention's fold for ring attention): D − dlse is what
            // dS takes when the log-sum-exp is an output with a gradient of its own.
            if let (Some(g), Some(dl_r)) = (io.dlse, dl_r) {
                let origin = vec![b.clone(), h.clone(), q0.clone(), Expr::c(0)];
                k.load_global(o_f, k.gview(g, origin, 2, 3, 16, COLS));
                k.reduce(Axis::Rows, ReduceOp::Max, dl_r, o_f, None);
                k.sub(d_r, d_r, dl_r);
            }
            let d_dst = k.gview(
                io.delta,
                vec![b.clone(), h.clone(), q0.clone()],
                2,
                1,
                16,
                1,
            );
            k.store(d_dst, d_r);
            // The log-sum-exp, one per row, in base 2 (`lse·log2 e`, so that P = exp2(S·c − it) is
            // one fused multiply-add per score): read once as a broadcast 16 × 64 tile and reduced
            // to the row vector. A row without keys (lse −∞; its scores are all masked to −∞) takes
            // −f32::MAX instead, so that its masked scores stay −∞ (P = 0) and not −∞ + ∞.
            // Starting each step's accumulators from copies of full statistic tiles instead cost
            // 128 moves per step and two 64-float tiles of registers.
            let origin = vec![b.clone(), h.clone(), q0.clone(), Expr::c(0)];
            k.load_global(o_f, k.gview(io.lse, origin, 2, 3, 16, COLS));
            k.reduce(Axis::Rows, ReduceOp::Max, l_r, o_f, None);
            k.mul(l_r, l_r, std::f32::consts::LOG2_E);
            k.max(l_r, l_r, -f32::MAX);
            io.load_slope(k, cfg, (&b, &h), s, slope);
            k.for_range("j", 0, &kv_steps, |k, j| {
                k.barrier(); // key step j has landed
                let slot = &j % ring;
                let kv0 = (&j0 + j) * step;
                // S = Q·Kᵀ or dP = dO·Vᵀ over the head dimension, 64 columns at a time.
                let product = |k: &mut KernelBuilder, dst: RegId| {
                    let (own, streamed) = if dst == s { (q_s, k_s) } else { (do_s, v_s) };
                    for (i, (&a, &bt)) in own.iter().zip(streamed).enumerate() {
                        let a = MmaOperand::Shared(k.smem(a, 0).sub(16, COLS, &cw, 0));
                        let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                        k.mma(MmaForm::Abt, dst, a, bt, (i > 0).then_some(dst));
                    }
                };
                // The scores `x` masked past the keys, by the causal mask and the window, each only
                // where the block reaches it.
                let mask = |k: &mut KernelBuilder, x: RegId| {
                    let (inf, kv_end) = (f32::NEG_INFINITY, &kv0 + step);
                    k.if_(io.seq_kv.lt(&kv_end), |k| {
                        k.mask(x, MaskRule::ColsBelow(io.seq_kv.clone()), &q0, &kv0, inf)
                    });
                    if let Some(off) = &offset {
                        k.if_((&q_blk + off.clone()).lt(&kv_end - 1), |k| {
                            let offset = off.clone();
                            k.mask(x, MaskRule::Causal { offset }, &q0, &kv0, inf)
                        });
                    }
                    if let Some(st) = &start {
                        // The block's last query keeps keys from `q_blk + BLOCK − 1 + st`.
                        let last = &q_blk + i64::from(BLOCK - 1) + st.clone();
                        k.if_(kv0.lt(&last), |k| {
                            let offset = st.clone();
                            k.mask(x, MaskRule::WindowStart { offset }, &q0, &kv0, inf)
                        });
                    }
                };
                product(k, s);
                if let Some(cap) = cfg.logits.tanh(k, s, d) {
                    // Capped (`s` holds tanh), as the key blocks: P in `dp` as scratch, `s`
                    // becomes `P·(1 − tanh²)`, and only then is dP computed (both products in
                    // flight beside the cap's arithmetic spilled at D128).
                    k.mul(dp, s, cap);
                    io.alibi(k, dp, slope, (&q0, &kv0), false);
                    mask(k, dp);
                    k.mul(dp, dp, std::f32::consts::LOG2_E);
                    k.sub_row(dp, dp, l_r);
                    k.exp2(dp, dp);
                    k.mul(s, s, s);
                    k.sub(s, 1.0f32, s);
                    k.mul(s, s, dp);
                    product(k, dp);
                    k.sub_row(dp, dp, d_r);
                    k.mul(dp, dp, s);
                } else {
                    product(k, dp);
                    io.alibi(k, s, slope, (&q0, &kv0), false);
                    mask(k, s);
                    // P = exp2(S·c − lse·log2 e) and dS = P∘(dP − D), the statistics per row.
                    k.mul(s, s, c);
                    k.sub_row(s, s, l_r);
                    k.exp2(s, s);
                    k.sub_row(dp, dp, d_r);
                    k.mul(dp, s, dp);
                }
                k.copy(ds, dp);
                // dQ += dS·K (dS from registers, K as a keys × dim operand).
                for (&r, &bt) in dq_r.iter().zip(k_s) {
                    let bt = MmaOperand::Shared(k.smem(bt, slot.clone()));
                    k.mma(MmaForm::Ab, r, MmaOperand::Reg(ds), bt, Some(r));
                }
            });
            for (i, &r) in dq_r.iter().enumerate() {
                k.mul(r, r, scale);
                k.store(view(k, dq_g, &b, &h, q0.clone(), i as u32 * COLS, 16), r);
            }
        },
    );
    Ok(k.finish()?)
}
