//! The backward warp-specialised for Hopper (the structure of FlashAttention-3's backward, with the
//! dQ pass of [`super`] instead of its atomic adds): one producer warpgroup and two consumer
//! warpgroups (8 waves of 16 rows: one `wgmma m64` per warpgroup), in two launches, in this order on
//! the stream:
//!
//! - [`build_q`], the query blocks: 128 queries per block, Q and dO loaded once, K and V streamed in
//!   128-key slots; first `D = rowsum(dO∘O)` of the block's queries (the preprocessing of
//!   FlashAttention-2 §3.2: O and dO read from global memory into f32 fragments, D stored for the
//!   second launch), then per step `S = Q·Kᵀ`, `dP = dO·Vᵀ`, `dS = P∘(dP − D)` and `dQ += dS·K`;
//! - [`build_kv`], the key blocks: 128 keys per block, K and V loaded once, Q and dO streamed through
//!   a ring of 64-query slots for every query head of the KV head's group. Per step, in registers:
//!   `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` (both operands from shared memory, `mma_abt`), `Pᵀ` from the saved
//!   log-sum-exp, `dSᵀ = Pᵀ∘(dPᵀ − D)`, and `dV += Pᵀ·dO`, `dK += dSᵀ·Q` with `Pᵀ` and `dSᵀ` packed to
//!   bf16 as register A operands (the accumulator fragment of a `wgmma` is the A fragment of the next
//!   one) and dO and Q read from the same slots as `K × N` operands.
//!
//! Keys run along the rows of the key blocks' scores, so the per-query statistics (the log-sum-exp and
//! D) are read per step as `16 × 64` tiles broadcast along the rows (a zero row stride), of which each
//! thread holds its 16 columns; the query blocks read theirs once, one per row. The AMD program
//! instead recomputes D in every key block per step from O in shared memory; on Hopper that would add
//! O to the ring and a reduction over shared memory, where the query blocks have D almost for free.
//! The 64-query steps of the key blocks are what fits 240 registers beside the dK and dV accumulators
//! (128 would need two more 64-float score tiles).
//!
//! A soft cap and a sliding window (`crate::attn::score`) as in the forward's Hopper program. The cap
//! needs the raw scores: a capped step computes `S` from zero, turns it into `tanh`, forms P in the
//! `dP` tile and `P·(1 − tanh²)` in the score tile, and only then computes `dP` (so three f32 score
//! tiles are never live at once; the log-sum-exp enters as `(tanh − lse/cap)·cap`). The window's
//! keys are masked, and the steps wholly outside it are not walked (the key blocks stop at the last
//! query step that reaches their keys, the query blocks start at the first key step their first
//! query keeps).
//!
//! The scale stays on the f32 scores as in the forward (`exp2(s·c − lse·log2 e)`, `c = log2(e)·scale`,
//! `scale` = `1/√d` unless configured, `crate::attn::score`);
//! dK and dQ get their scale on the f32 accumulators before the bf16 store.

pub(super) mod wide;

use super::{BwdConfig, BwdTurns};
use crate::attn::score::Alibi;
use crate::attn::strides::tensor_strides;
use crate::attn::Causal;
use crate::attn_fwd::padded_dim;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand,
    ReduceOp, RegId, Schedule, Scope,
};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Rows of a block: two consumer warpgroups × 64.
pub(crate) const BLOCK: u32 = 128;
/// Queries per streamed slot of a key block.
pub(crate) const STEP: u32 = 64;
/// Keys per streamed slot of a query block.
const STEP_Q: u32 = 128;
/// Columns of one shared tile: 64 bf16 = 128 bytes, the 128-byte swizzle's row.
pub(crate) const COLS: u32 = 64;
/// Registers per thread of a consumer warpgroup (`setmaxnreg`).
const CONSUMER_REGS: u32 = 240;

pub(crate) fn schedule() -> Schedule {
    Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 24,
        consumer_regs: CONSUMER_REGS,
    }
}

fn check(cfg: &BwdConfig) -> Result<(), KernelError> {
    if matches!(cfg.dim, 64 | 96 | 128) {
        Ok(())
    } else {
        // Each consumer wave holds dK and dV (2 × dim/64 f32 tiles of 32 registers) beside the
        // scores and dP (64): at 192 that is 256 of the 240 registers a consumer gets.
        let regs = 2 * (cfg.dim / COLS) * 32 + 64;
        Err(KernelError::Config(format!(
            "attn_bwd (producer/consumer): dim {} must be 64, 96 or 128 (the key blocks' dK, dV, scores \
             and dP take {regs} of the {} registers per consumer thread at this dim; 64-column \
             shared tiles)",
            cfg.dim, CONSUMER_REGS
        )))
    }
}

/// Ring slots for the streamed pair of tensors beside the block's own two (`BLOCK` rows each) and
/// `extra` bytes of other shared memory: as many as fit the H100's 227 KiB, 2 to 4.
fn stages(dim: u32, step: u32, extra: u32) -> u32 {
    let own = 2 * BLOCK * dim * 2 + extra;
    let per_step = 2 * step * dim * 2;
    // 227 KiB less 2 KiB for the 1024-byte alignment of the base and the ring barriers.
    (225 * 1024u32)
        .saturating_sub(own)
        .div_euclid(per_step)
        .clamp(2, 4)
}

/// Parameters and tensors of both launches, in declaration order: `batch, heads, heads_kv, seq_q,
/// seq_kv`; bf16 `q, k, v, do`, f32 `lse` and `delta` (`[b, h, s_q]`, contiguous), then the outputs.
struct Io {
    batch: Expr,
    heads: Expr,
    heads_kv: Expr,
    seq_q: Expr,
    seq_kv: Expr,
    q: GlobalId,
    k: GlobalId,
    v: GlobalId,
    d_o: GlobalId,
    /// O (the query blocks, which compute D from it).
    o: Option<GlobalId>,
    lse: GlobalId,
    /// The log-sum-exp's gradient (the query blocks with [`BwdConfig::dlse`]).
    dlse: Option<GlobalId>,
    delta: GlobalId,
    /// The ALiBi slopes ([`BwdConfig::alibi`]): the last input of either launch.
    alibi: Option<Alibi>,
}

impl Io {
    /// With ALiBi: head `h` of batch `b`'s slope into `slope`, through the f32 tile `scratch`
    /// (dead here).
    fn load_slope(
        &self,
        k: &mut KernelBuilder,
        cfg: &BwdConfig,
        bh: (&Expr, &Expr),
        scratch: RegId,
        slope: Option<RegId>,
    ) {
        if let (Some(a), Some(v)) = (&self.alibi, slope) {
            a.load(k, bh, scratch, (v, Axis::Rows), &cfg.logits, cfg.dim);
        }
    }

    /// With ALiBi: the bias on `x`, its element `(i, j)` at query `q + i`, key `kv + j`
    /// (`transposed`: key `kv + i`, query `q + j`), after any cap.
    fn alibi(
        &self,
        k: &mut KernelBuilder,
        x: RegId,
        slope: Option<RegId>,
        (q, kv): (&Expr, &Expr),
        transposed: bool,
    ) {
        let Some(v) = slope else { return };
        let q = q + (&self.seq_kv - self.seq_q.clone());
        if transposed {
            Alibi::add(k, x, v, kv, &q);
        } else {
            Alibi::add(k, x, v, &q, kv);
        }
    }
}

/// Declares the tensors before the gradients. The key blocks (`query_blocks` false) read the
/// statistics as `[b, h, r, s_q]` with a zero stride along `r` (one query per column). The query
/// blocks also read O, read the log-sum-exp as `[b, h, s_q, c]` with a zero stride along `c` (one
/// query per row) and write D, `[b, h, s_q]`.
fn declare_inputs(k: &mut KernelBuilder, cfg: &BwdConfig, query_blocks: bool) -> Io {
    let stats_by_row = query_blocks;
    let [batch, heads, heads_kv, seq_q, seq_kv] =
        ["batch", "heads", "heads_kv", "seq_q", "seq_kv"].map(|n| k.param(n));
    let dim = Expr::c(i64::from(cfg.dim));
    let tensor = |k: &mut KernelBuilder, name: &str, h: &Expr, s: &Expr| -> GlobalId {
        let dims = [
            ("b", batch.clone()),
            ("h", h.clone()),
            ("s", s.clone()),
            ("d", dim.clone()),
        ];
        let st = tensor_strides(k, cfg.strided, cfg.layout, name, (h, s, &dim));
        k.global_strided(name, Bf16, &dims, st, Access::Read)
    };
    let q = tensor(k, "q", &heads, &seq_q);
    let kg = tensor(k, "k", &heads_kv, &seq_kv);
    let v = tensor(k, "v", &heads_kv, &seq_kv);
    // O before dO, as the problem draws them (`super::problem`): the first launch's inputs are bound
    // in declaration order.
    let o = query_blocks.then(|| tensor(k, "o", &heads, &seq_q));
    let d_o = tensor(k, "do", &heads, &seq_q);
    let stats = |k: &mut KernelBuilder, name: &str| -> GlobalId {
        let (b_s, h_s) = (&heads * seq_q.clone(), seq_q.clone());
        let width = Expr::c(i64::from(STEP_Q));
        let (dims, st) = if stats_by_row {
            (
                [
                    ("b", batch.clone()),
                    ("h", heads.clone()),
                    ("s", seq_q.clone()),
                    ("c", width),
                ],
                vec![b_s, h_s, Expr::c(1), Expr::c(0)],
            )
        } else {
            (
                [
                    ("b", batch.clone()),
                    ("h", heads.clone()),
                    ("r", Expr::c(16)),
                    ("s", seq_q.clone()),
                ],
                vec![b_s, h_s, Expr::c(0), Expr::c(1)],
            )
        };
        k.global_strided(name, F32, &dims, st, Access::Read)
    };
    let lse = stats(k, "lse");
    // The lse's gradient, read by the query blocks' preprocessing only ([`BwdConfig::dlse`]).
    let dlse = (query_blocks && cfg.dlse).then(|| stats(k, "dlse"));
    // The slopes after the other inputs: before the query blocks' `delta` (written), after the
    // key blocks' (read).
    let mut alibi = (query_blocks && cfg.alibi).then(|| Alibi::declare(k, &batch, &heads));
    let delta = if query_blocks {
        let dims = [
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("s", seq_q.clone()),
        ];
        let st = vec![&heads * seq_q.clone(), seq_q.clone(), Expr::c(1)];
        k.global_strided("delta", F32, &dims, st, Access::Write)
    } else {
        stats(k, "delta")
    };
    if !query_blocks && cfg.alibi {
        alibi = Some(Alibi::declare(k, &batch, &heads));
    }
    Io {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_kv,
        q,
        k: kg,
        v,
        d_o,
        o,
        lse,
        dlse,
        delta,
        alibi,
    }
}

/// The tile names of one launch: per 64-column half of the head dimension, a block-resident pair of
/// shared tiles (one slot) and a streamed pair (a ring).
pub(crate) struct Smem {
    pub own: [Vec<kittens_ir::SharedId>; 2],
    pub ring: [Vec<kittens_ir::SharedId>; 2],
    pub stages: u32,
}

pub(crate) fn declare_smem(
    k: &mut KernelBuilder,
    dim: u32,
    step: u32,
    extra: u32,
    names: [&str; 4],
) -> Smem {
    let halves = dim / COLS;
    let st = stages(dim, step, extra);
    let swz = |rows| SharedTile::with_swizzle(Bf16, rows, COLS, Swizzle::NV_128B);
    let mut tiles = |name: &str, rows, slots| -> Vec<kittens_ir::SharedId> {
        (0..halves)
            .map(|i| k.shared_tile(&format!("{name}{i}"), swz(rows), slots))
            .collect()
    };
    Smem {
        own: [tiles(names[0], BLOCK, 1), tiles(names[1], BLOCK, 1)],
        ring: [tiles(names[2], step, st), tiles(names[3], step, st)],
        stages: st,
    }
}

/// The key blocks' score-side work of one step without a cap: `s` holds `S − lse/scale` (scaled by
/// `c` it is the exponent of P in base 2) and `dp` `dP − D`, both f32; on return `s` holds P and
/// `dp` dS.
pub(crate) fn probs_and_ds(k: &mut KernelBuilder, c: f32, s: RegId, dp: RegId) {
    k.mul(s, s, c);
    k.exp2(s, s);
    k.mul(dp, s, dp);
}

/// `f`'s products as a warpgroup's turn on the tensor cores ([`BwdConfig::turns`]) when `on`, else
/// as they come.
fn turn(k: &mut KernelBuilder, on: bool, label: &str, f: &dyn Fn(&mut KernelBuilder)) {
    if on {
        k.compute(label, |k| f(k));
    } else {
        f(k);
    }
}

/// `rows × 64` of head `h` of tensor `g` from sequence position `s0`, columns from `col0`.
fn view(
    k: &KernelBuilder,
    g: GlobalId,
    b: &Expr,
    h: &Expr,
    s0: Expr,
    col0: u32,
    rows: u32,
) -> kittens_ir::GlobalView {
    k.gview(
        g,
        vec![b.clone(), h.clone(), s0, Expr::c(i64::from(col0))],
        2,
        3,
        rows,
        COLS,
    )
}

/// The key blocks: `dk, dv` (bf16, written) after the inputs. Grid `[batch, heads_kv, key blocks]`.
///
/// With `atomic_dq` (FlashAttention-3's backward, [`super::hopper_atomic`]) they also write dQ: one
/// more tensor, `dq_acc` (f32, Q's shape and layout, zeroed before the launch), into which every
/// step adds its `dS·K` — `dSᵀ` through a 128-byte-swizzled shared tile (each consumer warpgroup
/// stores its own 64 keys; two slots alternating by step), read back transposed as the A operand of
/// `mma_atb` with K from the block's own tiles, and added with [`kittens_ir::Op::AtomicAdd`]
/// (on sm_90a one TMA reduction per warpgroup). At head dimension 128 the warpgroups exchange their
/// keys through a consumers barrier ([`Scope::Consumers`]) and warpgroup g adds columns 64g.. over
/// all 128 keys: one reduction per dQ element (0.899x → 0.984x the two launches on the H200,
/// docs/performance.md); at 64 each warpgroup adds its own keys' share of all columns.
pub(super) fn build_kv(cfg: &BwdConfig, atomic_dq: bool) -> Result<Kernel, KernelError> {
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
    let name = if atomic_dq {
        super::name_atomic(cfg)
    } else {
        super::name(cfg).to_string()
    };
    let mut k = KernelBuilder::new(&name, schedule());
    let io = declare_inputs(&mut k, cfg, false);
    let dim = Expr::c(i64::from(d));
    // A `[b, h, s, d]` tensor of `heads` heads and `seq` rows in the configured layout.
    let global = |k: &mut KernelBuilder, name: &str, heads: &Expr, seq: &Expr, dtype, access| {
        let dims = [
            ("b", io.batch.clone()),
            ("h", heads.clone()),
            ("s", seq.clone()),
            ("d", dim.clone()),
        ];
        // dQ's f32 accumulator is the call's scratch: dense whatever the caller's strides.
        let own = cfg.strided && name != "dq_acc";
        let st = tensor_strides(k, own, cfg.layout, name, (heads, seq, &dim));
        k.global_strided(name, dtype, &dims, st, access)
    };
    let (kv_heads, kv_seq) = (&io.heads_kv, &io.seq_kv);
    let dk_g = global(&mut k, "dk", kv_heads, kv_seq, Bf16, Access::Write);
    let dv_g = global(&mut k, "dv", kv_heads, kv_seq, Bf16, Access::Write);
    let dq_acc = atomic_dq.then(|| {
        global(
            &mut k,
            "dq_acc",
            &io.heads,
            &io.seq_q,
            F32,
            Access::ReadWrite,
        )
    });
    let n_kb = io.seq_kv.ceil_div(i64::from(BLOCK));
    k.grid(
        vec![io.batch.clone(), io.heads_kv.clone(), n_kb.clone()],
        GridOrder::RowMajor,
    );
    // Under a causal mask the first key blocks see the most queries: blocks paired long with short.
    let kb = if cfg.causal == Causal::No {
        k.block(2)
    } else {
        k.pair_long_short(&k.block(2), &n_kb)
    };
    let (b, hk) = (k.block(0), k.block(1));
    let group = &io.heads / io.heads_kv.clone();
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

    let s = k.tile("s_t", F32, 16, STEP, Layout::Row, BaseShape::S16X16);
    let dp = k.tile("dp_t", F32, 16, STEP, Layout::Row, BaseShape::S16X16);
    let slope = cfg.alibi.then(|| k.row_vec("alibi_r", s, F32));
    let p = k.tile("p_t", Bf16, 16, STEP, Layout::Row, BaseShape::S16X32);
    let ds = k.tile("ds_t", Bf16, 16, STEP, Layout::Row, BaseShape::S16X32);
    let acc = |k: &mut KernelBuilder, name: &str| -> Vec<RegId> {
        (0..halves)
            .map(|i| {
                let n = format!("{name}{i}");
                k.tile(&n, F32, 16, COLS, Layout::Row, BaseShape::S16X16)
            })
            .collect()
    };
    let (dk_r, dv_r) = (acc(&mut k, "dk"), acc(&mut k, "dv"));
    // dSᵀ of the block (keys × queries) for the dQ product, and that product's 16 × 64 share.
    let dq_parts = atomic_dq.then(|| {
        let tile = SharedTile::with_swizzle(Bf16, BLOCK, STEP, Swizzle::NV_128B);
        let ds_s = k.shared_tile("ds_s", tile, 2);
        let dq_p = k.tile("dq_p", F32, 16, COLS, Layout::Row, BaseShape::S16X16);
        (ds_s, dq_p)
    });

    let block0 = &kb * i64::from(BLOCK);
    let step = i64::from(STEP);
    let n_q = io.seq_q.ceil_div(step);
    // Causal (or a window's right side): the first query step that keeps any key of the block
    // (key j ≥ block0 needs i ≥ j − offset).
    let offset = cfg.last_key_offset(&io.seq_q, &io.seq_kv);
    let first = match &offset {
        Some(off) => (&block0 - off.clone()).max(0) / step,
        None => Expr::c(0),
    };
    // A window's left side: the query step after the last that keeps any key of the block (key j
    // needs i ≤ j − start).
    let start = cfg.first_key_offset(&io.seq_q, &io.seq_kv);
    let end = match &start {
        Some(st) => {
            let last = &block0 + i64::from(BLOCK - 1) - st.clone();
            n_q.clone().min(last / step + 1).max(0)
        }
        None => n_q.clone(),
    };
    // One pipeline over every (query head of the group, query step) pair, as in the AMD program.
    let steps = &end - first.clone();
    let per_head = steps.max(1);
    let total = group.clone() * steps.max(0);
    let head_of = |t: &Expr| &hk * group.clone() + t / per_head.clone();
    let q0_of = |t: &Expr| (first.clone() + t % per_head.clone()) * step;
    let ring = i64::from(sm.stages);
    let cw = k.wave() - 4; // consumer wave, 0..8
    let k0 = &block0 + &cw * 16; // this wave's first key
    let scale = cfg.logits.scale(d);
    let c = std::f32::consts::LOG2_E * cfg.logits.softmax_scale(d);
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
            k.for_range("t", 0, &total, |k, t| {
                let slot = &t % ring;
                let (h, q0) = (head_of(&t), q0_of(&t));
                for (tiles, g) in [(q_s, io.q), (do_s, io.d_o)] {
                    for (i, &ts) in tiles.iter().enumerate() {
                        let src = view(k, g, &b, &h, q0.clone(), i as u32 * COLS, STEP);
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
                stat(k, io.lse, s, &Expr::c(0));
            }
            k.for_range("t", 0, &total, |k, t| {
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
                // The scores `x` masked: past the queries (and in the atomic form past the keys),
                // by the causal mask and the window, each only where the step reaches it.
                let mask = |k: &mut KernelBuilder, x: RegId| {
                    let (inf, q_end) = (f32::NEG_INFINITY, &q0 + step);
                    k.if_(io.seq_q.lt(&q_end), |k| {
                        k.mask(x, MaskRule::ColsBelow(io.seq_q.clone()), &k0, &q0, inf)
                    });
                    if atomic_dq {
                        // Keys past the end would add `dS·0` to dQ: zero only while dS is finite.
                        k.if_(io.seq_kv.lt(&(&block0 + i64::from(BLOCK))), |k| {
                            k.mask(x, MaskRule::RowsBelow(io.seq_kv.clone()), &k0, &q0, inf)
                        });
                    }
                    if let Some(off) = &offset {
                        // Only where the step reaches below the diagonal of the block's last key.
                        let last_key = &block0 + i64::from(BLOCK - 1);
                        k.if_((&q0 + off.clone()).lt(&last_key), |k| {
                            let offset = off.clone();
                            k.mask(x, MaskRule::CausalT { offset }, &k0, &q0, inf)
                        });
                    }
                    if let Some(st) = &start {
                        // Only where the step's last query keeps no key below the block's first.
                        let q_last = &q0 + (step - 1) + st.clone();
                        k.if_(block0.lt(&q_last), |k| {
                            let offset = st.clone();
                            k.mask(x, MaskRule::WindowStartT { offset }, &k0, &q0, inf)
                        });
                    }
                };
                if let Some(cap) = cfg.logits.softcap {
                    // The step's head's ALiBi slope through `s`, before its product.
                    io.load_slope(k, cfg, (&b, &h), s, slope);
                    product(k, s, true);
                    cfg.logits.tanh(k, s, d);
                    // Capped (`s` holds tanh): P from `dp` used as scratch, then `s` becomes
                    // `Pᵀ·(1 − tanh²)` and only then is `dPᵀ` computed, so that no third score
                    // tile is live (a tile of the log-sum-exp beside both spilled at D128).
                    // `(t − lse/cap)·cap`: a query without keys (lse ±∞, every key masked) stays
                    // at −∞.
                    stat(k, io.lse, dp, &t);
                    k.mul(dp, dp, -1.0 / cap);
                    k.add(dp, dp, s);
                    k.mul(dp, dp, cap);
                    io.alibi(k, dp, slope, (&q0, &k0), true);
                    mask(k, dp);
                    k.mul(dp, dp, std::f32::consts::LOG2_E);
                    k.exp2(dp, dp);
                    k.copy(p, dp);
                    k.mul(s, s, s);
                    k.sub(s, 1.0f32, s);
                    k.mul(s, s, dp);
                    stat(k, io.delta, dp, &t);
                    k.mul(dp, dp, -1.0f32);
                    product(k, dp, false);
                    k.mul(dp, dp, s);
                } else {
                    k.mul(s, s, -1.0 / scale);
                    // The step's head's ALiBi slope through `dp`, before D lands there.
                    io.load_slope(k, cfg, (&b, &h), dp, slope);
                    stat(k, io.delta, dp, &t);
                    k.mul(dp, dp, -1.0f32);
                    product(k, s, false);
                    product(k, dp, false);
                    io.alibi(k, s, slope, (&q0, &k0), true);
                    mask(k, s);
                    probs_and_ds(k, c, s, dp);
                    k.copy(p, s);
                }
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

/// The query blocks: `dq` (bf16, written) after the inputs. Grid `[batch, heads, query blocks]`.
pub(super) fn build_q(cfg: &BwdConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let d = cfg.dim;
    let mut k = KernelBuilder::new(super::name_dq(cfg), schedule());
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
    let sm = declare_smem(&mut k, dp, STEP_Q, 0, ["q_s", "do_s", "k_s", "v_s"]);
    let [q_s, do_s] = &sm.own;
    let [k_s, v_s] = &sm.ring;
    let halves = (dp / COLS) as usize;

    let s = k.tile("s", F32, 16, STEP_Q, Layout::Row, BaseShape::S16X16);
    let dp = k.tile("dp", F32, 16, STEP_Q, Layout::Row, BaseShape::S16X16);
    let slope = cfg.alibi.then(|| k.row_vec("alibi_r", s, F32));
    let ds = k.tile("ds", Bf16, 16, STEP_Q, Layout::Row, BaseShape::S16X32);
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
    let step = i64::from(STEP_Q);
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
                        let src = view(k, g, &b, &hk, s0.clone(), i as u32 * COLS, STEP_Q);
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
