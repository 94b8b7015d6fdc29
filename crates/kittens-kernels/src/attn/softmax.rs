//! The online softmax every attention forward program runs on its f32 score tiles (the dense
//! schedules of `crate::attn_fwd`, the packed ones of `crate::attn_varlen`), written once.

use super::score::Logits;
use kittens_hw::dtype::DType;
use kittens_ir::{Axis, KernelBuilder, ReduceOp, RegId};

/// What the softmax reads of a program's configuration: the logits' scale and cap, and the head
/// dimension that the default scale `1/√d` is of.
pub(crate) trait HeadLogits {
    fn logits(&self) -> Logits;
    fn dim(&self) -> u32;
}

/// The online softmax (FlashAttention-2 §3.1) of one query per row (`keys = Axis::Rows`: S = Q·Kᵀ) or
/// per column (`keys = Axis::Cols`: Sᵀ = K·Qᵀ) of an f32 score tile: its register vectors (the running
/// max, its value before this block, the max times the scale, the running sum, the correction factor
/// of this block), the axis that runs over keys, and the scale `c = log2(e)·scale` that turns exp(x·scale)
/// into exp2(x·c).
pub(crate) struct Softmax {
    pub max: RegId,
    pub max_prev: RegId,
    pub max_c: RegId,
    pub norm: RegId,
    pub scale: RegId,
    pub keys: Axis,
    pub c: f32,
    /// The softmax scale itself (`1/√d` by default, 1 on capped logits): the log-sum-exp is in natural-log units of the scaled logits.
    pub scale_nat: f32,
    /// Rows may keep no key (the program says so: a bottom-right mask, a key split, a window, packed
    /// sequences): the running max is floored at the lowest
    /// finite f32 and [`Self::inv_norm`] guards the division.
    pub floor: bool,
}

impl Softmax {
    /// Declares the vectors beside the score tile `scores` for the logits of `cfg`: the softmax
    /// scales what [`Logits::cap`] left in the tile ([`Logits::softmax_scale`]).
    pub fn declare(
        k: &mut KernelBuilder,
        scores: RegId,
        keys: Axis,
        cfg: &impl HeadLogits,
    ) -> Softmax {
        Self::declare_named(k, scores, keys, cfg, "")
    }

    /// [`Self::declare`] with `suffix` on every vector's name: one softmax per score tile when a wave
    /// holds several (MI300X-attn §5.1's query tiles).
    pub fn declare_named(
        k: &mut KernelBuilder,
        scores: RegId,
        keys: Axis,
        cfg: &impl HeadLogits,
        suffix: &str,
    ) -> Softmax {
        let scale = cfg.logits().softmax_scale(cfg.dim());
        let mut vec = |name: &str| {
            let name = format!("{name}{suffix}");
            match keys {
                Axis::Rows => k.row_vec(&name, scores, DType::F32),
                Axis::Cols => k.col_vec(&name, scores, DType::F32),
            }
        };
        Softmax {
            max: vec("max_v"),
            max_prev: vec("max_prev"),
            max_c: vec("max_c"),
            scale: vec("scale"),
            norm: vec("norm"),
            keys,
            c: std::f32::consts::LOG2_E * scale,
            scale_nat: scale,
            floor: false,
        }
    }

    /// One K/V block's step on the f32 scores `s` (in place, becoming P): the running max over `keys`
    /// (the axis that runs over keys: `Axis::Rows` for S = Q·Kᵀ with a query per row, `Axis::Cols` for
    /// Sᵀ = K·Qᵀ with a query per column), P = exp2(S·c − max·c) (the multiply and subtract contract to
    /// one FMA; the scale `c` never touches a bf16 operand), the correction exp2((max_prev − max)·c)
    /// into `scale`, and the running sum rescaled and accumulated. The caller rescales its output
    /// accumulator by `scale`.
    pub fn step(&self, k: &mut KernelBuilder, s: RegId) {
        self.step_p(k, s);
        self.step_sum(k, s);
    }

    /// The first part of [`Self::step`]: the running max, P = exp2(S·c − max·c) in place and the
    /// correction `scale`, all that the output's rescale and the P·V multiply need.
    pub fn step_p(&self, k: &mut KernelBuilder, s: RegId) {
        let (keys, c) = (self.keys, self.c);
        k.copy(self.max_prev, self.max);
        k.reduce(keys, ReduceOp::Max, self.max, s, Some(self.max));
        if self.floor {
            // A row with no kept key so far has max −∞, and `s·c − max·c` would be −∞ − (−∞) = NaN:
            // the lowest finite f32 instead makes its P exactly 0 and its correction exp2(0) = 1
            // (FlashAttention-2 substitutes 0 for such a max). No other row is changed. Divided by
            // `c` where `c > 1` (a large softmax scale, capped logits), so that `max·c` stays finite.
            k.max(self.max, self.max, f32::MIN / c.max(1.0));
        }
        k.mul(self.max_c, self.max, c);
        k.mul(s, s, c);
        match keys {
            Axis::Rows => k.sub_row(s, s, self.max_c),
            Axis::Cols => k.sub_col(s, s, self.max_c),
        }
        k.exp2(s, s);
        k.sub(self.scale, self.max_prev, self.max);
        k.mul(self.scale, self.scale, c);
        k.exp2(self.scale, self.scale);
    }

    /// The rest of [`Self::step`]: the running sum rescaled and P's sums added. Nothing the P·V
    /// multiply reads, so a schedule may issue it beside those MFMAs (HipKittens E.3's compute
    /// clusters interleave the softmax's vector work with the matrix work).
    pub fn step_sum(&self, k: &mut KernelBuilder, s: RegId) {
        k.mul(self.norm, self.norm, self.scale);
        k.reduce(self.keys, ReduceOp::Sum, self.norm, s, Some(self.norm));
    }

    /// After the last block: `dst = 1 / norm`, the factor of the output's rows. With [`Self::floor`],
    /// of `max(norm, f32::MIN_POSITIVE)`: a row with no kept key has `norm = 0` and an output of 0,
    /// which stays 0 instead of `0·∞ = NaN`; every other row has `norm ≥ 1` (its max contributes
    /// `exp2(0)`).
    pub fn inv_norm(&self, k: &mut KernelBuilder, dst: RegId) {
        if self.floor {
            k.max(dst, self.norm, f32::MIN_POSITIVE);
            k.div(dst, 1.0f32, dst);
        } else {
            k.div(dst, 1.0f32, self.norm);
        }
    }

    /// After the last block: the log-sum-exp of each query into `lse` (a vector like `max`),
    /// `ln Σ_j exp(s_j·scale) = max·scale + ln(norm)`, the running max being of the unscaled scores and the
    /// running sum relative to it (`max_c` is free after the loop and holds `max·scale`). A query that
    /// kept no key has `norm = 0`, so `ln 0 = −∞` makes its log-sum-exp `−∞`.
    pub fn lse(&self, k: &mut KernelBuilder, lse: RegId) {
        k.log(lse, self.norm);
        k.mul(self.max_c, self.max, self.scale_nat);
        k.add(lse, lse, self.max_c);
    }
}
