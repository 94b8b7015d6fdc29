//! Attention backward: the gradients dQ, dK, dV of `O = softmax(Q·Kᵀ/√d)·V` from Q, K, V, the
//! forward's O and log-sum-exp, and the output gradient dO (FlashAttention-2 §3.2, Algorithm 2; the
//! f64 definition is `crate::reference_bwd`). MHA and grouped-query heads (dK and dV summed over the
//! query heads of a group), causal or not (top-left or bottom-right alignment), BSHD or BHSD tensors
//! or each in its own strides ([`BwdConfig::strided`]), query and key lengths that differ, and the
//! log-sum-exp's own gradient folded into D ([`BwdConfig::dlse`]).
//!
//! The program ([`schedule`]) is one launch with two kinds of blocks:
//!
//! - a **key block** owns a block of keys; for every query head of the group and every block of
//!   queries it recomputes `Pᵀ = exp(Sᵀ − lse)` from the saved log-sum-exp, `dPᵀ = V·dOᵀ`,
//!   `dSᵀ = Pᵀ∘(dPᵀ − D)`, and accumulates `dV += Pᵀ·dO` and `dK += dSᵀ·Q` in registers;
//! - a **query block** owns a block of queries of one head and walks the key blocks, recomputing the
//!   same `Pᵀ` and `dSᵀ` and accumulating `dQ += dS·K`.
//!
//! Why dQ is a separate pass rather than fp32 atomic adds from the key blocks (FlashAttention-2's
//! choice, and FlashAttention-3's with a conversion kernel after it): the pass needs no f32 workspace
//! of the size of Q, no zeroing before and no bf16 conversion launch after, and the result is
//! deterministic (atomic adds in f32 reorder the sum from run to run); every block writes its outputs
//! exactly once, which the CPU interpreter and the schedule analysis check like any store. The price
//! is compute: the query blocks recompute `Sᵀ` and `dPᵀ`, seven matrix products per (query, key)
//! block pair instead of five (1.4x the FLOPs of the atomic version).
//!
//! On CDNA the key blocks' loop is one of three schedules of the same steps (`key_block.rs`): the plain
//! loop ([`schedule`]), HipKittens' 4-wave interleave with mixed MFMA shapes and AGPR-pinned K, V, dK,
//! dV ([`interleave4`]) and its 8-wave ping-pong ([`ping_pong`]); docs/attn_bwd_amd.md compares them.
//!
//! On Hopper the same algorithm is two warp-specialised launches ([`hopper`]: the query blocks, which
//! also compute D, then the key blocks), or — FlashAttention-3's choice, to be measured against it —
//! three ([`crate::attn::bwd_strips`]): a strip pass for D, the key blocks adding dQ in f32 with atomic adds
//! (five products per block pair instead of seven, results not bit-reproducible), a strip pass
//! converting dQ to bf16.
//!
//! The preprocessing `D = rowsum(dO∘O)` is fused: each step computes D for its queries from the O and
//! dO tiles (f32 products of the bf16 values, f32 sum), so no launch or buffer precedes the kernel.
//!
//! Scores stay f32 and the scale enters on them (`exp2(s·c − lse·log2 e)` with `c = log2(e)/√d`), as
//! in the forward (`crate::attn_fwd`); P and dS are rounded to bf16 once, as the operands of the
//! products that read them; dQ and dK get their `1/√d` on the f32 accumulators.

mod ctx;
pub(crate) mod hopper;
mod interleave4;
mod key_block;
mod ping_pong;
pub mod problem;
mod schedule;

use crate::attn::score::{min_offset, Logits, Window};
use crate::attn::AttnLayout;
use crate::attn::{BwdShape, Causal};
use crate::KernelError;
use kittens_ir::{Expr, Kernel};
use kittens_tile::BaseShape;

/// Which program the backward is built as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BwdSchedule {
    /// Key and query blocks in one launch, `waves` waves each (the AMD program, [`schedule`]).
    Plain,
    /// The same launch with the key blocks' loop as HipKittens' 4-wave interleave (§3.3.2,
    /// [`interleave4`]): one wave per SIMD, LDS reads, global→LDS prefetches and MFMAs alternating
    /// in one instruction stream.
    Interleave4,
    /// The same launch with 8 waves and the key blocks' loop as HipKittens' 8-wave ping-pong (§3.3.2,
    /// [`ping_pong`]): two groups of four waves alternating memory and compute clusters.
    PingPong8,
    /// Hopper, the key blocks (dK, dV) warp-specialised ([`hopper`]); the tiles fields other than
    /// `dim`, `causal` and `layout` are unused.
    HopperKv,
    /// Hopper, the query blocks (dQ), the second launch of [`BwdSchedule::HopperKv`].
    HopperQ,
    /// Hopper as FlashAttention-3 (§3.3's backward: dQ accumulated in f32 by the key blocks),
    /// three launches ([`crate::attn::bwd_strips`]): first this strip program, `D = rowsum(dO∘O)` and the f32
    /// dQ accumulator zeroed;
    HopperAtomicPre,
    /// then the key blocks of [`BwdSchedule::HopperKv`] adding `dS·K` into the accumulator;
    HopperAtomicKv,
    /// then this strip program, dQ = the accumulator times `1/√d`, rounded to bf16.
    HopperAtomicDq,
}

impl BwdSchedule {
    /// The launches of the Hopper backward that `self` belongs to, in stream order (`None` for the
    /// single-launch AMD programs): `--schedule hopper` (two launches, the default) or
    /// `hopper-atomic` (three).
    pub fn hopper_launches(self) -> Option<&'static [BwdSchedule]> {
        use BwdSchedule::*;
        match self {
            HopperKv | HopperQ => Some(&[HopperQ, HopperKv]),
            HopperAtomicPre | HopperAtomicKv | HopperAtomicDq => {
                Some(&[HopperAtomicPre, HopperAtomicKv, HopperAtomicDq])
            }
            Plain | Interleave4 | PingPong8 => None,
        }
    }
}

/// Which blocks one launch of the CDNA program runs ([`BwdConfig::blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BwdBlocks {
    /// Key and query blocks in one grid (the kernel's two branches).
    #[default]
    Both,
    /// The key blocks alone (dK, dV): the first half of the two-launch form.
    Keys,
    /// The query blocks alone (dQ).
    Queries,
}

/// The backward's tiles.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BwdConfig {
    pub schedule: BwdSchedule,
    /// Head dimension (a multiple of 32).
    pub dim: u32,
    /// Waves per block.
    pub waves: u32,
    /// Keys per wave in a key block (a multiple of 16): a key block covers `waves × key_rows` keys.
    pub key_rows: u32,
    /// Queries per wave in a query block (a multiple of 16).
    pub query_rows: u32,
    /// Rows per pipeline step through shared memory (a multiple of 32): the keys a query block takes
    /// per step, and the rows of each slot of the rings (one ring serves both kinds of block).
    pub step: u32,
    /// Queries a key block takes per step (at most `step`, the first rows of a slot): a multiple of
    /// 32, or of 16 with 32×32 gradient accumulators (the `32x32x16` MFMA's K is 16 queries).
    pub key_step: u32,
    pub causal: Causal,
    pub layout: AttnLayout,
    /// Base shape of the key blocks' dK and dV accumulators, which picks the MFMA of `dVᵀ += dOᵀ·P`
    /// and `dKᵀ += Qᵀ·dS`: 16×16 (`16x16x32` on gfx950), or 32×32 (`32x32x16`, gfx942 `32x32x8`) beside
    /// the `16x16x32` of the score products — HipKittens §4's mixed MFMA shapes in one kernel, which
    /// take 16 queries per K step (instead of 32) and half the instructions for the same work.
    pub grad_base: BaseShape,
    /// Pin the key blocks' K, V (the A operands of the score products) and dK, dV accumulators to
    /// AGPRs (HipKittens §3.2.1, D.3): the MFMAs read and accumulate there, so the 256 VGPRs hold
    /// only the per-step tiles. Needs one wave per SIMD (the interleave's 512 registers per lane).
    pub pin_agprs: bool,
    /// Hopper key blocks: which products are a warpgroup's turn on the tensor cores (a compute
    /// cluster, passed between the two consumer warpgroups by named barriers, FlashAttention-3 §3.1's
    /// warp-specialised ping-pong), so that one warpgroup's softmax runs beside the other's products.
    pub turns: BwdTurns,
    /// Hopper key blocks up to head dim 128 ([`hopper`]'s `kv`): queries per step of the Q and dO
    /// ring, 64 or 128. 128 only at head dims up to 64: there the f32 `Sᵀ` and `dPᵀ` of 128 queries
    /// (64 registers each per consumer thread) fit beside dK and dV of 64 columns (32 each), so
    /// each step's fixed cost (the ring barrier, the statistics' addresses, the loop) covers twice
    /// the products; at 128 columns the four tiles would take 256 of the 240 registers.
    pub hopper_step: u32,
    /// The softmax scale and soft cap ([`Logits`]), constants of the kernel, on every program.
    pub logits: Logits,
    /// A sliding window ([`Window`], bottom-right aligned): its keys masked on every program, and
    /// the steps wholly outside it skipped.
    pub window: Option<Window>,
    /// Q, K, V, O, dO, dQ, dK, dV each in its own strides, kernel parameters
    /// ([`crate::attn::strides::tensor_strides`]) instead of `layout`'s; the log-sum-exp, D and the f32
    /// dQ accumulator stay dense (`layout`'s).
    pub strided: bool,
    /// The forward's log-sum-exp was an output with a gradient (`kittens.attention(...,
    /// return_lse=True)` under autograd): an f32 input `dlse [b, h, s_q]` folded into the
    /// preprocessing, `D = rowsum(dO∘O) − dlse` (as FlashAttention's ring attention does; `d lse_i /
    /// d S_ij = P_ij`, so the lse's term adds `dlse_i·P_ij` to dS), at no other cost.
    pub dlse: bool,
    /// ALiBi (`crate::attn::score::Alibi`): an f32 input `alibi [b, h]` of slopes after the other
    /// inputs, each score's logit biased as in the forward (the bias has no gradient of its own).
    pub alibi: bool,
    /// The CDNA program's blocks in one launch, or each kind in its own ([`BwdBlocks`]). Tensors in
    /// their own strides take two launches there: in one, the compiler runs the structurized branch's
    /// two halves one after the other, so what the key blocks load at the kernel's start (their
    /// tensors' pointers, spans and 15 more stride parameters) stays live across the query blocks'
    /// loop, past the wave's 102 SGPRs at head dim 128 (gfx942: 19 spilled; each launch alone: none).
    pub blocks: BwdBlocks,
}

/// The products of a Hopper key-block step taken in turns by the consumer warpgroups
/// ([`BwdConfig::turns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BwdTurns {
    /// No turns: both warpgroups issue as soon as their operands are ready.
    None,
    /// `Sᵀ` (the first score product) in turns: a turn around both score products kept the previous
    /// step's dK chain, `Sᵀ` and `dPᵀ` in flight together and spilled 68 bytes.
    Scores,
    /// `Sᵀ` in one turn and the gradient products (`dV`, `dK`) in another.
    Both,
}

impl Default for BwdConfig {
    /// Four waves (one per SIMD on CDNA), 16 keys and 16 queries per wave, 32-row steps: at head
    /// dimension 128 the key block's live registers stay near 200 per lane, and the three rings of the
    /// key blocks (Q, dO, O, double-buffered) take 48 KiB, within gfx942's 64 KiB beside the
    /// layout-change scratch.
    fn default() -> Self {
        BwdConfig {
            schedule: BwdSchedule::Plain,
            dim: 128,
            waves: 4,
            key_rows: 16,
            query_rows: 16,
            step: 32,
            key_step: 32,
            causal: Causal::No,
            layout: AttnLayout::Bshd,
            grad_base: BaseShape::S16X16,
            pin_agprs: false,
            turns: BwdTurns::None,
            hopper_step: 64,
            logits: Logits::default(),
            window: None,
            strided: false,
            dlse: false,
            alibi: false,
            blocks: BwdBlocks::Both,
        }
    }
}

impl BwdConfig {
    /// The strip passes' configuration (`crate::attn::bwd_strips`) of this backward's atomic form.
    pub(crate) fn strips(&self) -> crate::attn::bwd_strips::StripConfig {
        crate::attn::bwd_strips::StripConfig {
            dim: self.dim,
            layout: self.layout,
            strided: self.strided,
            logits: self.logits,
            dlse: self.dlse,
        }
    }

    /// The configuration for one GPU: the plain program on CDNA, the key blocks of the
    /// warp-specialised one on Hopper (its query blocks are [`BwdSchedule::HopperQ`]), with `Sᵀ` in
    /// turns (+1.5-3% over none, docs/performance.md; turns on the gradients too lost 7%).
    pub fn for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        if gpu.arch.is_amd() {
            Self::default()
        } else {
            BwdConfig {
                schedule: BwdSchedule::HopperKv,
                turns: BwdTurns::Scores,
                ..Self::default()
            }
        }
    }

    /// HipKittens §3.3.2's 4-wave interleave of the key blocks, configured from `base` (a GPU's
    /// configuration: its head dimension, mask and layout are kept): 32 keys per wave with dK and dV
    /// in 32×32 accumulators (the mixed MFMA shapes), K, V, dK, dV pinned to AGPRs, 32-query steps.
    pub fn interleave4(base: BwdConfig) -> BwdConfig {
        BwdConfig {
            schedule: BwdSchedule::Interleave4,
            waves: 4,
            key_rows: 32,
            query_rows: 16,
            step: 32,
            key_step: 16,
            grad_base: BaseShape::S32X32,
            pin_agprs: true,
            ..base
        }
    }

    /// HipKittens §3.3.2's 8-wave ping-pong of the key blocks, configured from `base`: two waves per
    /// SIMD leave 256 registers per lane to each, so the key blocks keep the plain program's 16 keys
    /// per wave and 16×16×32 MFMAs (a 32-key wave's dK, dV, K and V alone would take 192 of them).
    pub fn pingpong8(base: BwdConfig) -> BwdConfig {
        BwdConfig {
            schedule: BwdSchedule::PingPong8,
            waves: 8,
            key_rows: 16,
            query_rows: 16,
            step: 32,
            key_step: 32,
            grad_base: BaseShape::S16X16,
            pin_agprs: false,
            ..base
        }
    }

    fn check(&self) -> Result<(), KernelError> {
        let grad = self.grad_base;
        if !(grad == BaseShape::S16X16 || grad == BaseShape::S32X32)
            || !self.key_rows.is_multiple_of(grad.cols)
        {
            return Err(KernelError::Config(format!(
                "attn_bwd: dK/dV accumulators are 16x16 or 32x32 base tiles dividing key_rows {}, \
                 not {grad}",
                self.key_rows
            )));
        }
        let waves = match self.schedule {
            BwdSchedule::Interleave4 => Some(4),
            BwdSchedule::PingPong8 => Some(8),
            _ => None,
        };
        if waves.is_some_and(|w| w != self.waves) {
            return Err(KernelError::Config(format!(
                "attn_bwd: the {:?} schedule runs {} waves, not {}",
                self.schedule,
                waves.unwrap_or(0),
                self.waves
            )));
        }
        let ok = self.dim.is_multiple_of(32)
            && self.dim > 0
            && self.key_rows.is_multiple_of(16)
            && self.key_rows > 0
            && self.query_rows.is_multiple_of(16)
            && self.query_rows > 0
            && self.step.is_multiple_of(32)
            && self.step > 0
            && self.key_step.is_multiple_of(32 / (grad.rows / 16))
            && (1..=self.step).contains(&self.key_step)
            && (1..=16).contains(&self.waves);
        if ok {
            Ok(())
        } else {
            Err(KernelError::Config(format!(
                "attn_bwd: dim {} and step {} must be positive multiples of 32, key_rows {} and \
                 query_rows {} of 16, key_step {} at most step and a multiple of 32 (16 with 32x32 \
                 gradient accumulators), waves {} from 1 to 16",
                self.dim, self.step, self.key_rows, self.query_rows, self.key_step, self.waves
            )))
        }
    }
}

impl BwdConfig {
    /// The last key's offset (key `j` kept for query `i` when `j ≤ i + offset`): the causal mask's,
    /// the window's right side's, or the tighter of both; `None` without either.
    pub(crate) fn last_key_offset(&self, seq_q: &Expr, seq_kv: &Expr) -> Option<Expr> {
        let causal = self.causal.offset_expr(seq_q, seq_kv);
        min_offset(causal, self.window.and_then(|w| w.end_expr(seq_q, seq_kv)))
    }

    /// The first key's offset (key `j` kept for query `i` when `j ≥ i + offset`): the window's left
    /// side; `None` without one.
    pub(crate) fn first_key_offset(&self, seq_q: &Expr, seq_kv: &Expr) -> Option<Expr> {
        self.window.and_then(|w| w.start_expr(seq_q, seq_kv))
    }
}

/// The kernel's name: each mask is a separate kernel.
fn name(cfg: &BwdConfig) -> &'static str {
    match cfg.causal {
        Causal::No => "attn_bwd",
        Causal::TopLeft => "attn_bwd_causal",
        Causal::BottomRight => "attn_bwd_causal_br",
    }
}

/// The CDNA program's name: [`name`], then `_keys` or `_queries` for a launch of one kind of block.
fn name_blocks(cfg: &BwdConfig) -> String {
    let kind = match cfg.blocks {
        BwdBlocks::Both => "",
        BwdBlocks::Keys => "_keys",
        BwdBlocks::Queries => "_queries",
    };
    format!("{}{kind}", name(cfg))
}

/// The Hopper query blocks' name.
fn name_dq(cfg: &BwdConfig) -> &'static str {
    match cfg.causal {
        Causal::No => "attn_bwd_dq",
        Causal::TopLeft => "attn_bwd_dq_causal",
        Causal::BottomRight => "attn_bwd_dq_causal_br",
    }
}

/// The Hopper key blocks that also accumulate dQ ([`BwdSchedule::HopperAtomicKv`]).
fn name_atomic(cfg: &BwdConfig) -> String {
    format!("{}_kvdq", name(cfg))
}

/// Parameters `batch, heads, heads_kv, seq_q, seq_kv`. The plain program: tensors `q, k, v, o, do`
/// (bf16, read), `lse` (f32, read), `dq, dk, dv` (bf16, written). The Hopper launches: `q, k, v, do`
/// (bf16), `lse` and `delta` (f32 `[b, h, s_q]`, `delta = rowsum(dO∘O)`), then `dk, dv` (key
/// blocks) or `dq` (query blocks). The FlashAttention-3 form ([`BwdSchedule::HopperAtomicPre`] and
/// after): the strip passes take `o, do` → `delta, dq_acc` and `dq_acc` → `dq`; its key blocks take
/// the key blocks' tensors and `dq_acc` (f32, read and added to) after `dk, dv`.
pub fn build(cfg: &BwdConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    cfg.logits.check()?;
    if let Some(w) = cfg.window {
        w.check()?;
    }
    match cfg.schedule {
        BwdSchedule::Plain | BwdSchedule::Interleave4 | BwdSchedule::PingPong8 => {
            schedule::build(cfg)
        }
        // Head dims past 128: the key blocks of 64 keys (`hopper::wide`).
        BwdSchedule::HopperKv if hopper::wide::takes(cfg) => hopper::wide::build_kv(cfg, false),
        BwdSchedule::HopperAtomicKv if hopper::wide::takes(cfg) => {
            hopper::wide::build_kv(cfg, true)
        }
        BwdSchedule::HopperKv => hopper::build_kv(cfg, false),
        BwdSchedule::HopperQ => hopper::build_q(cfg),
        BwdSchedule::HopperAtomicPre => crate::attn::bwd_strips::build_pre(&cfg.strips()),
        BwdSchedule::HopperAtomicKv => hopper::build_kv(cfg, true),
        BwdSchedule::HopperAtomicDq => crate::attn::bwd_strips::build_dq(&cfg.strips()),
    }
}

/// `D = rowsum(dO∘O)` per query, f32 `[batch, heads, seq_q]` (the layout of the log-sum-exp), from O
/// and dO in `sh`'s layout (summed in f64): what the Hopper query-block launch writes, for tests.
pub fn delta(o: &[f32], d_o: &[f32], sh: &BwdShape) -> Vec<f32> {
    let mut out = vec![0.0f32; sh.lse_len()];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            for s in 0..sh.seq_q {
                let sum: f64 = (0..sh.dim)
                    .map(|x| {
                        let i = sh.q_at(b, h, s, x);
                        f64::from(o[i]) * f64::from(d_o[i])
                    })
                    .sum();
                out[sh.lse_at(b, h, s)] = sum as f32;
            }
        }
    }
    out
}
