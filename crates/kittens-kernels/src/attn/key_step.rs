//! One key block's step of the forward programs that walk a sequence's keys against a length read on
//! the device — the packed batches (`crate::attn_varlen` and its Hopper form) and the paged cache
//! (`crate::attn_paged` and its Hopper form): the block's masks (keys at or past the sequence's end,
//! bottom-right causal), the online softmax step (FlashAttention-2 §3.1, [`Softmax::step`]), the
//! output rescaled and `P·V` added. Written once for one wave holding Q, K and V in registers
//! ([`WaveStep`]) and once for a Hopper consumer wave reading Q and the K/V ring slots from shared
//! memory with `wgmma` ([`SharedStep`], FlashAttention-3's consumer), either one block after the
//! other ([`SharedStep::walk`]) or in the dense forward's schedule ([`SharedStep::walk_rotated`]:
//! the key loop rotated and the warpgroups taking turns on the tensor cores).

use super::{Logits, Softmax};
use kittens_ir::{Expr, KernelBuilder, MaskRule, MmaForm, MmaOperand, RegId, Rounding, SharedId};

/// Columns of one shared tile of the Hopper programs: 64 bf16 = 128 bytes, the 128-byte swizzle's row.
const COLS: u32 = 64;

/// The masks of a key block on its f32 scores: keys at or past `end`; with `causal` the last key kept
/// (query `i` keeps keys `j ≤ i + offset`: the bottom-right causal diagonal, a window's right side,
/// or the tighter of both, [`super::score::min_offset`]); with `start` a window's left side (keys
/// `j ≥ i + offset`). Before them, with `cap`, the soft cap on the raw scores ([`Logits::cap`]: a
/// masked `−∞` would become `−cap`), then with `alibi` the ALiBi bias from a row vector of slopes,
/// the distance shifted by `shift` (`len_k − len_q`: aligned bottom-right, FlashAttention's
/// convention, [`super::score::Alibi`]).
pub(crate) struct KeyMasks {
    pub end: Expr,
    pub causal: Option<Expr>,
    pub start: Option<Expr>,
    /// The logits and head dim whose soft cap (if any) the scores take first.
    pub cap: (Logits, u32),
    pub alibi: Option<(RegId, Expr)>,
}

impl KeyMasks {
    /// Masks the scores `s` whose first query is `q0` and first key `k0` to `−∞`.
    pub(crate) fn apply(&self, k: &mut KernelBuilder, s: RegId, q0: &Expr, k0: &Expr) {
        let (logits, dim) = self.cap;
        logits.cap(k, s, dim);
        if let Some((slope, shift)) = &self.alibi {
            super::score::Alibi::add(k, s, *slope, &(q0 + shift.clone()), k0);
        }
        let inf = f32::NEG_INFINITY;
        k.mask(s, MaskRule::ColsBelow(self.end.clone()), q0, k0, inf);
        if let Some(offset) = &self.causal {
            let rule = MaskRule::Causal {
                offset: offset.clone(),
            };
            k.mask(s, rule, q0, k0, inf);
        }
        if let Some(offset) = &self.start {
            let rule = MaskRule::WindowStart {
                offset: offset.clone(),
            };
            k.mask(s, rule, q0, k0, inf);
        }
    }
}

/// One wave's registers: Q, the block's K and V, the scores `s`, their bf16 copy `p` and the output
/// accumulator `acc`.
pub(crate) struct WaveStep {
    pub q: RegId,
    pub k: RegId,
    pub v: RegId,
    pub s: RegId,
    pub p: RegId,
    pub acc: RegId,
}

impl WaveStep {
    /// `S = Q·Kᵀ` (f32), the masks, the softmax step, `acc` rescaled, `P` rounded to bf16 and `P·V`
    /// added.
    pub(crate) fn step(
        &self,
        k: &mut KernelBuilder,
        sm: &Softmax,
        masks: &KeyMasks,
        q0: &Expr,
        k0: &Expr,
    ) {
        let WaveStep {
            q,
            k: kr,
            v,
            s,
            p,
            acc,
        } = *self;
        k.zero(s);
        k.mma_abt(s, q, kr, s);
        masks.apply(k, s, q0, k0);
        sm.step(k, s);
        k.mul_row(acc, acc, sm.scale);
        k.convert(p, s, Rounding::Rtne);
        k.mma_ab(acc, p, v, acc);
    }
}

impl KeyMasks {
    /// [`Self::apply`] with each mask only where the key block reaches it (conditions on the whole
    /// block, the same for every wave, as the dense forward's): the end where the block's keys
    /// `k0 .. k_end` reach past it, the causal diagonal where the block's first query `q_first`
    /// does not keep key `k_end − 1`, the window's left side where its last query `q_last` drops
    /// key `k0`. A block inside the kept keys then pays for the cap and ALiBi only.
    pub(crate) fn apply_needed(
        &self,
        k: &mut KernelBuilder,
        s: RegId,
        (q0, k0): (&Expr, &Expr),
        (q_first, q_last): (&Expr, &Expr),
        k_end: &Expr,
    ) {
        let (logits, dim) = self.cap;
        logits.cap(k, s, dim);
        if let Some((slope, shift)) = &self.alibi {
            super::score::Alibi::add(k, s, *slope, &(q0 + shift.clone()), k0);
        }
        let inf = f32::NEG_INFINITY;
        k.if_(self.end.lt(k_end), |k| {
            k.mask(s, MaskRule::ColsBelow(self.end.clone()), q0, k0, inf)
        });
        if let Some(offset) = &self.causal {
            k.if_((q_first + offset.clone()).lt(k_end - 1), |k| {
                let rule = MaskRule::Causal {
                    offset: offset.clone(),
                };
                k.mask(s, rule, q0, k0, inf)
            });
        }
        if let Some(offset) = &self.start {
            k.if_(k0.lt(q_last + offset.clone()), |k| {
                let rule = MaskRule::WindowStart {
                    offset: offset.clone(),
                };
                k.mask(s, rule, q0, k0, inf)
            });
        }
    }
}

/// A Hopper consumer wave's operands: Q's 64-column shared tiles (one slot), the K and V rings, the
/// wave's `16 × kv` scores `s`, their bf16 copy `p` (the next `wgmma`'s register A operand) and its
/// `16 × 64` output accumulators `o`, and the consumer wave's index `wave` (its 16 rows of Q).
pub(crate) struct SharedStep<'a> {
    pub wave: Expr,
    pub q_s: &'a [SharedId],
    pub k_s: &'a [SharedId],
    pub v_s: &'a [SharedId],
    pub s: RegId,
    pub p: RegId,
    pub o: &'a [RegId],
}

impl SharedStep<'_> {
    /// The step on ring slot `slot`: `S = Q·Kᵀ` over the
    /// head dimension 64 columns at a time, the masks, the softmax step, `P` packed to bf16 in
    /// registers (the accumulator fragment is the A operand's), `O` rescaled and `P·V` added.
    pub(crate) fn step(
        &self,
        k: &mut KernelBuilder,
        sm: &Softmax,
        masks: &KeyMasks,
        slot: &Expr,
        q0: &Expr,
        k0: &Expr,
    ) {
        let s = self.s;
        for (i, (&qs, &ks)) in self.q_s.iter().zip(self.k_s).enumerate() {
            let a = MmaOperand::Shared(k.smem(qs, 0).sub(16, COLS, &self.wave, 0));
            let b = MmaOperand::Shared(k.smem(ks, slot.clone()));
            k.mma(MmaForm::Abt, s, a, b, (i > 0).then_some(s));
        }
        masks.apply(k, s, q0, k0);
        sm.step(k, s);
        k.copy(self.p, s);
        for &o in self.o {
            k.mul_row(o, o, sm.scale);
        }
        for (&o, &vs) in self.o.iter().zip(self.v_s) {
            let b = MmaOperand::Shared(k.smem(vs, slot.clone()));
            k.mma(MmaForm::Ab, o, MmaOperand::Reg(self.p), b, Some(o));
        }
    }

    /// The consumer's walk in the dense forward's schedule (`crate::attn_fwd`'s producer/consumer
    /// program, FlashAttention-3 §3.1-§3.2): after the barrier that hands over Q (slot `q_slot`),
    /// `count ≥ 1` key blocks, K of block `j` in slot `j % ring_k` and V in `j % ring_v` (V's ring
    /// at least 3: P·V of block `j` runs in iteration `j + 1`). The loop is rotated by half a step:
    /// iteration `j` issues `Q·K(j)ᵀ` and `P(j−1)·V(j−1)` together, then runs the softmax of block
    /// `j` (after `mask(k, j)` on the scores) while `P·V` is still on the tensor cores; with
    /// `pingpong` each warpgroup's products are a compute cluster, its turn on the tensor cores,
    /// so that one warpgroup's softmax runs under the other's products. P is packed at the top of
    /// the next iteration, so that the wait for `P·V(j−1)` sits past the back edge (the dense
    /// program's module docs say what ptxas did otherwise).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn walk_rotated(
        &self,
        k: &mut KernelBuilder,
        sm: &Softmax,
        mask: &dyn Fn(&mut KernelBuilder, &Expr),
        count: &Expr,
        (ring_k, ring_v): (u32, u32),
        q_slot: &Expr,
        pingpong: bool,
    ) {
        let s = self.s;
        let turn = |k: &mut KernelBuilder, label: &str, f: &dyn Fn(&mut KernelBuilder)| {
            if pingpong {
                k.compute(label, |k| f(k));
            } else {
                f(k);
            }
        };
        let qk = |k: &mut KernelBuilder, j: &Expr| {
            let slot = j % i64::from(ring_k);
            for (i, (&qs, &ks)) in self.q_s.iter().zip(self.k_s).enumerate() {
                let q = k.smem(qs, q_slot.clone()).sub(16, COLS, &self.wave, 0);
                let b = MmaOperand::Shared(k.smem(ks, slot.clone()));
                k.mma(
                    MmaForm::Abt,
                    s,
                    MmaOperand::Shared(q),
                    b,
                    (i > 0).then_some(s),
                );
            }
        };
        let pv = |k: &mut KernelBuilder, j: &Expr| {
            let slot = j % i64::from(ring_v);
            for (&o, &vs) in self.o.iter().zip(self.v_s) {
                let b = MmaOperand::Shared(k.smem(vs, slot.clone()));
                k.mma(MmaForm::Ab, o, MmaOperand::Reg(self.p), b, Some(o));
            }
        };
        let softmax = |k: &mut KernelBuilder, j: &Expr| {
            mask(k, j);
            sm.step(k, s);
        };
        let rescale_and_pack = |k: &mut KernelBuilder| {
            for &o in self.o {
                k.mul_row(o, o, sm.scale);
            }
            k.copy(self.p, s);
        };
        k.barrier(); // Q has landed
        for &o in self.o {
            k.zero(o);
        }
        k.zero(sm.norm);
        k.neg_infty(sm.max);
        k.barrier(); // key block 0 has landed
        turn(k, "S = Q·K(0)ᵀ", &|k: &mut KernelBuilder| {
            qk(k, &Expr::c(0))
        });
        softmax(k, &Expr::c(0));
        k.for_range("j", 1, count, |k, j| {
            k.barrier(); // key block j has landed
            rescale_and_pack(k); // by block j−1's correction, before its P·V accumulates
            turn(
                k,
                "S = Q·K(j)ᵀ, O += P·V(j−1)",
                &|k: &mut KernelBuilder| {
                    qk(k, &j);
                    pv(k, &(&j - 1));
                },
            );
            softmax(k, &j);
        });
        rescale_and_pack(k);
        pv(k, &(count - 1));
    }

    /// The consumer's whole walk: after the block barrier that hands over Q, the accumulators and the
    /// softmax's running max and sum start empty, then `count` key blocks, block `j` in ring slot
    /// `j % ring` (each behind the barrier that hands it over), its first key `key(j)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn walk(
        &self,
        k: &mut KernelBuilder,
        sm: &Softmax,
        masks: &KeyMasks,
        count: &Expr,
        ring: u32,
        q0: &Expr,
        key: impl Fn(&Expr) -> Expr,
    ) {
        k.barrier(); // Q has landed
        for &o in self.o {
            k.zero(o);
        }
        k.zero(sm.norm);
        k.neg_infty(sm.max);
        k.for_range("j", 0, count, |k, j| {
            k.barrier(); // key block j has landed
            let slot = &j % i64::from(ring);
            self.step(k, sm, masks, &slot, q0, &key(&j));
        });
    }
}
