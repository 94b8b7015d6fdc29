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

use super::{BwdConfig, BwdTurns};
use crate::attn::hopper::{padded_dim, turn, view, BLOCK, COLS};
use crate::attn::hopper_bwd::{
    declare_smem, schedule, step_probs, StepFns, StepTiles, CONSUMER_REGS, STEP,
};
use crate::attn::score::Alibi;
use crate::attn::strides::tensor_strides;
use crate::attn::Causal;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand,
    ReduceOp, RegId, Scope,
};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Keys per streamed slot of a query block.
const STEP_Q: u32 = 128;

fn check(cfg: &BwdConfig) -> Result<(), KernelError> {
    // 32 and 96 run on 64 and 128 columns (the padding read as zeros, stored nowhere).
    if matches!(cfg.dim, 32 | 64 | 96 | 128) {
        Ok(())
    } else {
        // Each consumer wave holds dK and dV (2 × dim/64 f32 tiles of 32 registers) beside the
        // scores and dP (64): at 192 that is 256 of the 240 registers a consumer gets.
        let regs = 2 * (padded_dim(cfg.dim) / COLS) * 32 + 64;
        Err(KernelError::Config(format!(
            "attn_bwd (producer/consumer): dim {} must be 32, 64, 96 or 128 (the key blocks' dK, dV, \
             scores and dP take {regs} of the {} registers per consumer thread at this dim; 64-column \
             shared tiles; 192 and 256: the 64-key blocks, atomic form)",
            cfg.dim, CONSUMER_REGS
        )))
    }
}

/// Parameters and tensors of both Hopper launches, in declaration order: `batch, heads, heads_kv,
/// seq_q, seq_kv`; bf16 `q, k, v, do`, f32 `lse` and `delta` (`[b, h, s_q]`, contiguous), then the
/// outputs. Not the plain program's (`super::ctx::PlainIo`): O only for the query blocks, `delta`
/// read, the outputs declared per launch.
struct HopperIo {
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

impl HopperIo {
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
fn declare_inputs(k: &mut KernelBuilder, cfg: &BwdConfig, query_blocks: bool) -> HopperIo {
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
    HopperIo {
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

/// The start the key blocks' programs share (`kv` up to head dim 128, `wide` past it): the kernel
/// named for `atomic_dq`, the inputs, `dk, dv` (bf16, written) and with `atomic_dq` `dq_acc` (f32,
/// added to), the grid `[batch, heads_kv, key blocks]` of `block` keys each and this block's
/// coordinates.
struct KeyBlocks {
    k: KernelBuilder,
    io: HopperIo,
    dk_g: GlobalId,
    dv_g: GlobalId,
    dq_acc: Option<GlobalId>,
    b: Expr,
    hk: Expr,
    kb: Expr,
}

fn key_blocks(cfg: &BwdConfig, atomic_dq: bool, block: u32) -> KeyBlocks {
    let name = if atomic_dq {
        super::name_atomic(cfg)
    } else {
        super::name(cfg).to_string()
    };
    let mut k = KernelBuilder::new(&name, schedule());
    let io = declare_inputs(&mut k, cfg, false);
    let dim = Expr::c(i64::from(cfg.dim));
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
        let (h, s) = (&io.heads, &io.seq_q);
        global(&mut k, "dq_acc", h, s, F32, Access::ReadWrite)
    });
    let n_kb = io.seq_kv.ceil_div(i64::from(block));
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
    KeyBlocks {
        k,
        io,
        dk_g,
        dv_g,
        dq_acc,
        b,
        hk,
        kb,
    }
}

/// A key block's walk over every (query head of the group, query step) pair, as in the AMD program,
/// skipping the steps the causal mask or the window leaves without any of the block's keys.
struct QueryWalk {
    /// The last and first key's offsets (`BwdConfig::last_key_offset`, `first_key_offset`).
    offset: Option<Expr>,
    start: Option<Expr>,
    /// The first query step walked, the steps per head (at least 1), the pairs in all.
    first: Expr,
    per_head: Expr,
    total: Expr,
    /// The block's KV head times the group (the first query head).
    head0: Expr,
    step: i64,
}

impl QueryWalk {
    /// The walk of the block of `block` keys from `block0` of KV head `hk` in `step`-query steps.
    fn new(
        cfg: &BwdConfig,
        io: &HopperIo,
        (block0, block): (&Expr, u32),
        hk: &Expr,
        step: i64,
    ) -> Self {
        let group = &io.heads / io.heads_kv.clone();
        let n_q = io.seq_q.ceil_div(step);
        // Causal (or a window's right side): the first query step that keeps any key of the block
        // (key j ≥ block0 needs i ≥ j − offset).
        let offset = cfg.last_key_offset(&io.seq_q, &io.seq_kv);
        let first = match &offset {
            Some(off) => (block0 - off.clone()).max(0) / step,
            None => Expr::c(0),
        };
        // A window's left side: the query step after the last that keeps any key of the block
        // (key j needs i ≤ j − start).
        let start = cfg.first_key_offset(&io.seq_q, &io.seq_kv);
        let end = match &start {
            Some(st) => {
                let last = block0 + i64::from(block - 1) - st.clone();
                n_q.clone().min(last / step + 1).max(0)
            }
            None => n_q,
        };
        let steps = &end - first.clone();
        QueryWalk {
            offset,
            start,
            first,
            per_head: steps.max(1),
            total: &group * steps.max(0),
            head0: hk * group,
            step,
        }
    }

    /// Pair `t`'s query head.
    fn head_of(&self, t: &Expr) -> Expr {
        &self.head0 + t / self.per_head.clone()
    }

    /// Pair `t`'s first query.
    fn q0_of(&self, t: &Expr) -> Expr {
        (self.first.clone() + t % self.per_head.clone()) * self.step
    }

    /// The producer's side of the walk (batch `b`): each pair's `step` queries of Q and dO, 64
    /// columns a tile, into ring slot `t % ring`, handed to the consumers behind a block barrier.
    fn stream(
        &self,
        k: &mut KernelBuilder,
        io: &HopperIo,
        b: &Expr,
        [q_s, do_s]: [&[kittens_ir::SharedId]; 2],
        ring: i64,
    ) {
        let rows = u32::try_from(self.step).expect("a query step of at most 128 rows");
        k.for_range("t", 0, &self.total, |k, t| {
            let slot = &t % ring;
            let (h, q0) = (self.head_of(&t), self.q0_of(&t));
            for (tiles, g) in [(q_s, io.q), (do_s, io.d_o)] {
                for (i, &ts) in tiles.iter().enumerate() {
                    let src = view(k, g, b, &h, q0.clone(), i as u32 * COLS, rows);
                    k.load_async_by(Scope::WarpGroup, k.smem(ts, slot.clone()), src);
                }
            }
            k.wait_async(0);
            k.barrier(); // query step t to the consumers
        });
    }
}

/// What a key-block step's score-side work needs of its program ([`kv`] and [`wide`]): the masks'
/// offsets and the block's keys.
struct KeyStep<'a> {
    cfg: &'a BwdConfig,
    io: &'a HopperIo,
    /// The last and first key's offsets (`BwdConfig::last_key_offset`, `first_key_offset`).
    offset: &'a Option<Expr>,
    start: &'a Option<Expr>,
    /// The block's first key, its keys, the queries of a step.
    block0: &'a Expr,
    block: u32,
    step: i64,
    /// Also mask the keys past the end (the atomic form adds `dS·K` to dQ).
    atomic_dq: bool,
}

/// The registers of a step: `Sᵀ` and `dPᵀ` (f32), `Pᵀ` (bf16), ALiBi's slope.
struct StepRegs {
    s: RegId,
    dp: RegId,
    p: RegId,
    slope: Option<RegId>,
}

impl KeyStep<'_> {
    /// The transposed scores `x` (keys × queries, origin key `k0`, query `qc`) masked: past the
    /// queries (and in the atomic form past the keys), by the causal mask and the window, each only
    /// where the step (from query `q0`) reaches it — conditions the same for every wave.
    fn mask(&self, k: &mut KernelBuilder, x: RegId, q0: &Expr, (k0, qc): (&Expr, &Expr)) {
        let (io, block0, step) = (self.io, self.block0, self.step);
        let (inf, q_end) = (f32::NEG_INFINITY, q0 + step);
        k.if_(io.seq_q.lt(&q_end), |k| {
            k.mask(x, MaskRule::ColsBelow(io.seq_q.clone()), k0, qc, inf)
        });
        if self.atomic_dq {
            // Keys past the end would add `dS·0` to dQ: zero only while dS is finite.
            k.if_(io.seq_kv.lt(&(block0 + i64::from(self.block))), |k| {
                k.mask(x, MaskRule::RowsBelow(io.seq_kv.clone()), k0, qc, inf)
            });
        }
        if let Some(off) = self.offset {
            // Only where the step reaches below the diagonal of the block's last key.
            let last_key = block0 + i64::from(self.block - 1);
            k.if_((q0 + off.clone()).lt(&last_key), |k| {
                let offset = off.clone();
                k.mask(x, MaskRule::CausalT { offset }, k0, qc, inf)
            });
        }
        if let Some(st) = self.start {
            // Only where the step's last query keeps no key below the block's first.
            let q_last = q0 + (step - 1) + st.clone();
            k.if_(block0.lt(&q_last), |k| {
                let offset = st.clone();
                k.mask(x, MaskRule::WindowStartT { offset }, k0, qc, inf)
            });
        }
    }

    /// `Pᵀ` (in `r.p`, bf16) and `dSᵀ` (in `r.dp`, f32) of step `t` (head `h` of batch `b`, query
    /// step from `q0`, the tile's origin `(k0, qc)`), from `product(k, dst, from_zero)` (`Sᵀ` into
    /// `r.s`, `dPᵀ` into `r.dp`) and `stat(k, tensor, dst, t)` (step `t`'s statistics, one per
    /// column): [`step_probs`] with this program's bias and masks. Without a cap `r.s` holds the
    /// step's log-sum-exp on entry (loaded by the caller a step ahead).
    #[allow(clippy::too_many_arguments)]
    fn probs(
        &self,
        k: &mut KernelBuilder,
        r: &StepRegs,
        (b, h, t): (&Expr, &Expr, &Expr),
        q0: &Expr,
        (k0, qc): (&Expr, &Expr),
        product: &dyn Fn(&mut KernelBuilder, RegId, bool),
        stat: &dyn Fn(&mut KernelBuilder, GlobalId, RegId, &Expr),
    ) {
        let (cfg, io) = (self.cfg, self.io);
        let slope = r.slope;
        let fns = StepFns {
            product,
            lse: &|k, dst| stat(k, io.lse, dst, t),
            delta: &|k, dst| stat(k, io.delta, dst, t),
            slope: &|k, scratch| io.load_slope(k, cfg, (b, h), scratch, slope),
            bias_and_masks: &|k, x| {
                io.alibi(k, x, slope, (qc, k0), true);
                self.mask(k, x, q0, (k0, qc));
            },
        };
        step_probs(k, (&cfg.logits, cfg.dim), (r.s, r.dp, r.p), &fns);
    }
}

mod kv;
mod kv_pair;
mod q;
pub(super) mod wide;

pub(super) use kv::build_kv;
pub(super) use q::build_q;
