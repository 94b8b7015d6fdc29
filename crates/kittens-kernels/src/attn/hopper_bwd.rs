//! What the Hopper (sm_90a) attention backwards share (`crate::attn_bwd`'s producer/consumer
//! program and `crate::attn_varlen_bwd_hopper`, FlashAttention-3's backward structure): the
//! schedule, the shared tiles of a launch (a block-resident pair and a streamed ring), the key
//! blocks' step from scores to P and dS ([`step_probs`], with a soft cap or without) and the
//! 64-key blocks' split of the head dimension between the consumer warpgroups ([`per_slot`]).

use super::hopper::{BLOCK, COLS};
use super::Logits;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Expr, KernelBuilder, MmaForm, MmaOperand, RegId, Schedule, Scope, SharedId};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Queries per streamed slot of a key block.
pub(crate) const STEP: u32 = 64;
/// Registers per thread of a consumer warpgroup (`setmaxnreg`).
pub(crate) const CONSUMER_REGS: u32 = 240;

/// One producer warpgroup, two consumer warpgroups.
pub(crate) fn schedule() -> Schedule {
    Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 24,
        consumer_regs: CONSUMER_REGS,
    }
}

/// Ring slots for the streamed pair of tensors beside the block's own two (`BLOCK` rows each) and
/// `extra` bytes of other shared memory: as many as fit the H100's 227 KiB, 2 to 4.
pub(crate) fn stages(dim: u32, step: u32, extra: u32) -> u32 {
    let own = 2 * BLOCK * dim * 2 + extra;
    let per_step = 2 * step * dim * 2;
    // 227 KiB less 2 KiB for the 1024-byte alignment of the base and the ring barriers.
    (225 * 1024u32)
        .saturating_sub(own)
        .div_euclid(per_step)
        .clamp(2, 4)
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

/// A consumer wave's registers in the key blocks' steps of `STEP` queries: the f32 scores `s` and
/// `dp` (`16 × STEP`, keys × queries), with ALiBi its slope vector `slope`, their bf16 copies `p`
/// and `ds` (the next `wgmma`s' register A operands) and the dK, dV accumulators (`16 × 64`, one
/// per 64-column half of the head dimension).
pub(crate) struct StepTiles {
    pub s: RegId,
    pub dp: RegId,
    pub slope: Option<RegId>,
    pub p: RegId,
    pub ds: RegId,
    pub dk_r: Vec<RegId>,
    pub dv_r: Vec<RegId>,
}

impl StepTiles {
    pub(crate) fn declare(k: &mut KernelBuilder, halves: usize, alibi: bool) -> StepTiles {
        let s = k.tile("s_t", F32, 16, STEP, Layout::Row, BaseShape::S16X16);
        let dp = k.tile("dp_t", F32, 16, STEP, Layout::Row, BaseShape::S16X16);
        let slope = alibi.then(|| k.row_vec("alibi_r", s, F32));
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
        let (dk_r, dv_r) = (acc(k, "dk"), acc(k, "dv"));
        StepTiles {
            s,
            dp,
            slope,
            p,
            ds,
            dk_r,
            dv_r,
        }
    }
}

/// What [`step_probs`] asks of its program for one step of a key block: the products, the step's
/// statistics (one query per column of the transposed score tiles), and the bias and masks.
pub(crate) struct StepFns<'a> {
    /// `Sᵀ = K·Qᵀ` into the score tile or `dPᵀ = V·dOᵀ` into `dp`, added to what the tile holds
    /// unless `from_zero` (`product(k, dst, from_zero)`).
    pub product: &'a dyn Fn(&mut KernelBuilder, RegId, bool),
    /// The step's log-sum-exp into a tile.
    pub lse: &'a dyn Fn(&mut KernelBuilder, RegId),
    /// The step's `D = rowsum(dO∘O)` into a tile.
    pub delta: &'a dyn Fn(&mut KernelBuilder, RegId),
    /// With ALiBi the step's head's slope loaded through the given f32 tile (dead at that point);
    /// nothing without.
    pub slope: &'a dyn Fn(&mut KernelBuilder, RegId),
    /// The bias (ALiBi, after any cap) and the masks (`−∞`) on a tile of logits.
    pub bias_and_masks: &'a dyn Fn(&mut KernelBuilder, RegId),
}

/// A key block's step from its scores to `Pᵀ` (in `p`, bf16) and `dSᵀ` (in `dp`, f32; with a cap
/// times `1 − tanh²`), `s` and `dp` f32 `keys × queries` tiles. Without a cap `s` holds the step's
/// log-sum-exp on entry (loaded a step ahead by the caller): `Sᵀ` accumulates onto `−lse/scale`
/// and `dPᵀ` onto `−D`. With one, `Sᵀ` is computed from zero and turned into tanh, P formed in
/// `dp` as scratch, then `s` becomes `Pᵀ·(1 − tanh²)` and only then is `dPᵀ` computed, so that no
/// third f32 score tile is live; the logits enter as `(tanh − lse/cap)·cap`: a query without keys
/// (lse `−∞`, every key masked) stays at `−∞`.
pub(crate) fn step_probs(
    k: &mut KernelBuilder,
    (logits, dim): (&Logits, u32),
    (s, dp, p): (RegId, RegId, RegId),
    f: &StepFns,
) {
    if let Some(cap) = logits.softcap {
        (f.slope)(k, s);
        (f.product)(k, s, true);
        logits.tanh(k, s, dim);
        (f.lse)(k, dp);
        k.mul(dp, dp, -1.0 / cap);
        k.add(dp, dp, s);
        k.mul(dp, dp, cap);
        (f.bias_and_masks)(k, dp);
        k.mul(dp, dp, std::f32::consts::LOG2_E);
        k.exp2(dp, dp);
        k.copy(p, dp);
        k.mul(s, s, s);
        k.sub(s, 1.0f32, s);
        k.mul(s, s, dp);
        (f.delta)(k, dp);
        k.mul(dp, dp, -1.0f32);
        (f.product)(k, dp, false);
        k.mul(dp, dp, s);
    } else {
        k.mul(s, s, -1.0 / logits.scale(dim));
        // The slope through `dp`, before D lands there.
        (f.slope)(k, dp);
        (f.delta)(k, dp);
        k.mul(dp, dp, -1.0f32);
        (f.product)(k, s, false);
        (f.product)(k, dp, false);
        (f.bias_and_masks)(k, s);
        let c = std::f32::consts::LOG2_E * logits.softmax_scale(dim);
        probs_and_ds(k, c, s, dp);
        k.copy(p, s);
    }
}

/// The 64-key blocks' column tiles of the head dimension that consumer warpgroup `g` accumulates:
/// `g, g + 2, …` of `halves`.
pub(crate) fn tiles_of(g: usize, halves: usize) -> Vec<usize> {
    (g..halves).step_by(2).collect()
}

/// `f(k, tile)` for the tile warpgroup `g` (an expression, 0 or 1) holds in accumulator slot `a`
/// ([`tiles_of`]): warpgroup-uniform branches, so that each `wgmma` names its shared tiles
/// statically.
pub(crate) fn per_slot(
    k: &mut KernelBuilder,
    g: &Expr,
    halves: usize,
    a: usize,
    f: &dyn Fn(&mut KernelBuilder, usize),
) {
    let (tile0, tile1) = (2 * a, 2 * a + 1);
    if tile1 < halves {
        k.if_else(g.eq(0), |k| f(k, tile0), |k| f(k, tile1));
    } else {
        k.if_(g.eq(0), |k| f(k, tile0));
    }
}

/// Keys per block of the 64-key programs (one `m64` per consumer warpgroup, both on the same keys).
pub(crate) const WIDE_BLOCK: u32 = 64;
/// The smallest f32 staging of a warpgroup's TMA reduction (64 rows × 16 columns).
pub(crate) const REDUCE_BOX: u32 = 64 * 16 * 4;

/// Ring slots of the 64-key programs' streamed pair (64-query steps) beside the block's own pair
/// and `extra` bytes, in the 225 KiB left beside the barriers and the base's alignment: 2 to 4,
/// refused by name below 2.
pub(crate) fn wide_stages(dim: u32, extra: u32) -> Result<u32, KernelError> {
    let own = 2 * WIDE_BLOCK * dim * 2 + extra;
    let per_step = 2 * STEP * dim * 2;
    let n = (225 * 1024u32).saturating_sub(own) / per_step;
    if n < 2 {
        return Err(KernelError::Config(format!(
            "attn backward (64-key blocks): dim {dim} leaves room for {n} ring slots of Q and dO \
             ({per_step} bytes each) beside {own} bytes of K, V and exchange tiles; 2 needed"
        )));
    }
    Ok(n.min(4))
}

/// The 64-key programs' tiles: in shared memory K and V (the block's, one tile per 64 columns of the
/// head dimension), Q and dO (a ring of `stages` steps), and the exchanged `Pᵀ` and `dSᵀ`
/// (`64 × 64`); a consumer wave's half-step score tiles (`16 × 32`: each consumer warpgroup forms
/// the scores of its 32 of the step's queries), with ALiBi the slope vector, and the dK, dV
/// accumulators of its column-tile slots ([`tiles_of`]); and the steps both 64-key programs take on
/// them (the dense and the varlen backward differ only in how they address the tensors).
pub(crate) struct WideTiles {
    pub k_s: Vec<SharedId>,
    pub v_s: Vec<SharedId>,
    pub q_s: Vec<SharedId>,
    pub do_s: Vec<SharedId>,
    pub p_s: SharedId,
    pub ds_s: SharedId,
    pub s: RegId,
    pub dp: RegId,
    pub slope: Option<RegId>,
    pub p: RegId,
    pub ds: RegId,
    /// Column tiles of the head dimension (64 columns each).
    pub halves: usize,
    /// Column-tile slots per consumer warpgroup.
    pub slots: usize,
    pub dk_r: Vec<RegId>,
    pub dv_r: Vec<RegId>,
}

impl WideTiles {
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        halves: usize,
        stages: u32,
        alibi: bool,
    ) -> WideTiles {
        const HALF: u32 = STEP / 2;
        let swz = |rows| SharedTile::with_swizzle(Bf16, rows, COLS, Swizzle::NV_128B);
        let mut tiles = |name: &str, rows, slots| -> Vec<SharedId> {
            (0..halves)
                .map(|i| k.shared_tile(&format!("{name}{i}"), swz(rows), slots))
                .collect()
        };
        let (k_s, v_s) = (tiles("k_s", WIDE_BLOCK, 1), tiles("v_s", WIDE_BLOCK, 1));
        let (q_s, do_s) = (tiles("q_s", STEP, stages), tiles("do_s", STEP, stages));
        let p_s = k.shared_tile("p_s", swz(WIDE_BLOCK), 1);
        let ds_s = k.shared_tile("ds_s", swz(WIDE_BLOCK), 1);
        let s = k.tile("s_t", F32, 16, HALF, Layout::Row, BaseShape::S16X16);
        let dp = k.tile("dp_t", F32, 16, HALF, Layout::Row, BaseShape::S16X16);
        let slope = alibi.then(|| k.row_vec("alibi_r", s, F32));
        let p = k.tile("p_t", Bf16, 16, HALF, Layout::Row, BaseShape::S16X32);
        let ds = k.tile("ds_t", Bf16, 16, HALF, Layout::Row, BaseShape::S16X32);
        let slots = tiles_of(0, halves).len();
        let acc = |k: &mut KernelBuilder, name: &str| -> Vec<RegId> {
            (0..slots)
                .map(|a| {
                    let n = format!("{name}{a}");
                    k.tile(&n, F32, 16, COLS, Layout::Row, BaseShape::S16X16)
                })
                .collect()
        };
        let (dk_r, dv_r) = (acc(k, "dk"), acc(k, "dv"));
        WideTiles {
            k_s,
            v_s,
            q_s,
            do_s,
            p_s,
            ds_s,
            s,
            dp,
            slope,
            p,
            ds,
            halves,
            slots,
            dk_r,
            dv_r,
        }
    }

    /// `Sᵀ = K·Qᵀ` (`dst` the score tile [`WideTiles::s`]) or `dPᵀ (+)= V·dOᵀ` (`dst`
    /// [`WideTiles::dp`]) for wave `wq` of consumer warpgroup `g`: its 16 keys by the warpgroup's 32
    /// queries of ring slot `slot`, 64 columns of the head dimension at a time, K or V and the
    /// slot's rows `32g..` from shared memory (`from_zero`: the first product overwrites `dst`).
    pub(crate) fn product(
        &self,
        k: &mut KernelBuilder,
        dst: RegId,
        from_zero: bool,
        slot: &Expr,
        (g, wq): (&Expr, &Expr),
    ) {
        let (own, streamed) = if dst == self.s {
            (&self.k_s, &self.q_s)
        } else {
            (&self.v_s, &self.do_s)
        };
        for (i, (&a, &bt)) in own.iter().zip(streamed.iter()).enumerate() {
            let a = MmaOperand::Shared(k.smem(a, 0).sub(16, COLS, wq, 0));
            let bt = k.smem(bt, slot.clone()).sub(STEP / 2, COLS, g, 0);
            let acc = !(from_zero && i == 0);
            let bt = MmaOperand::Shared(bt);
            k.mma(MmaForm::Abt, dst, a, bt, acc.then_some(dst));
        }
    }

    /// Warpgroup `g`'s 32 queries of `Pᵀ` and `dSᵀ` into the exchange tiles, once the last step's
    /// products of both warpgroups have read them (a consumers barrier before the stores and one
    /// after: both halves stored).
    pub(crate) fn exchange(&self, k: &mut KernelBuilder, (g, wq): (&Expr, &Expr)) {
        const HALF: u32 = STEP / 2;
        k.barrier_by(Scope::Consumers);
        k.store_shared(k.smem(self.p_s, 0).sub(16, HALF, wq, g), self.p);
        k.store_shared(k.smem(self.ds_s, 0).sub(16, HALF, wq, g), self.ds);
        k.wait_shared(0);
        k.barrier_by(Scope::Consumers);
    }

    /// `dV += Pᵀ·dO` and `dK += dSᵀ·Q` over the step's 64 queries (ring slot `slot`) for warpgroup
    /// `g`'s column tiles, A and B from shared memory.
    pub(crate) fn accumulate(&self, k: &mut KernelBuilder, slot: &Expr, (g, wq): (&Expr, &Expr)) {
        for a in 0..self.slots {
            per_slot(k, g, self.halves, a, &|k, tile| {
                for (r, x, streamed) in [
                    (self.dv_r[a], self.p_s, &self.do_s),
                    (self.dk_r[a], self.ds_s, &self.q_s),
                ] {
                    let x = MmaOperand::Shared(k.smem(x, 0).sub(16, STEP, wq, 0));
                    let bt = MmaOperand::Shared(k.smem(streamed[tile], slot.clone()));
                    k.mma(MmaForm::Ab, r, x, bt, Some(r));
                }
            });
        }
    }

    /// `dq = dS·K` for wave `wq`'s 16 queries and the column tile of accumulator slot `a`:
    /// `dSᵀ` read back as `K × M` (keys × the wave's queries) from its exchange tile, K as `K × N`.
    pub(crate) fn dq_share(
        &self,
        k: &mut KernelBuilder,
        dq: RegId,
        a: usize,
        (g, wq): (&Expr, &Expr),
    ) {
        per_slot(k, g, self.halves, a, &|k, tile| {
            let x = MmaOperand::Shared(k.smem(self.ds_s, 0).sub(WIDE_BLOCK, 16, 0, wq));
            let bt = MmaOperand::Shared(k.smem(self.k_s[tile], 0));
            k.mma(MmaForm::Atb, dq, x, bt, None);
        });
    }
}
