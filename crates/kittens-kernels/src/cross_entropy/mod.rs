//! Cross-entropy over rows of logits, with its gradient written where the logits were: the row-wise
//! half of a fused linear + cross-entropy (Liger-Kernel's `fused_linear_cross_entropy`,
//! docs/references.md: the caller computes one chunk of rows' logits with a GEMM, this kernel turns
//! them into the loss and `dlogits` in place, and two more GEMMs take `dlogits` to the gradients of
//! the hidden states and the weight, so the full `rows × V` logits never exist at once).
//!
//! ```text
//! lse   = log Σ_j e^(x_j)                                   (online softmax, docs/references.md)
//! loss  = lse − (1 − ε)·x_y − ε·mean_j x_j                  (label smoothing ε; 0 for an ignored row)
//! grad  = scale · (softmax(x) − (1 − ε)·onehot(y) − ε / V)   (0 for an ignored row)
//! ```
//!
//! bf16 or f32 logits in and gradient out (the same dtype: the caller passes one buffer for both),
//! f32 inside. One block per row; its waves take interleaved strips of `lanes × 8 × chunks` columns
//! (the block's accesses of a step are contiguous) and walk the row twice: the first pass keeps each
//! wave's running maximum and its rescaled sum of exponentials, the label's logit, how often the label
//! was met and (with smoothing) the row's sum; the waves combine them through shared memory
//! (`row_max_across_waves`, `row_sum_across_waves`); the second pass writes the gradient. Each element
//! is read by the wave that writes it, before it writes it, so the gradient may overwrite the logits.
//!
//! Labels come as f32 (class indices are exact below 2^24): a negative label ignores its row. A
//! label that matches no column (≥ V, or not an integer) makes the row's loss non-finite (it is
//! divided by the number of matches, 0), never a silently wrong finite value. The tile language has no
//! column index, so the kernel reads the column indices from `cols` (`0, 1, …` as f32; only the first
//! block step of them) and shifts the label instead.

pub mod problem;

use crate::KernelError;
use kittens_hw::dtype::DType::{self, Bf16, F32};
use kittens_hw::Gpu;
use kittens_ir::{
    Access, Arg, Cond, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MapFn, MaskRule, RegId,
    Schedule,
};
use kittens_tile::{BaseShape, Layout, Swizzle};

/// Vocabulary sizes the kernel takes: labels and column indices travel as f32, exact below 2^24.
pub const VOCAB: std::ops::RangeInclusive<u32> = 2..=(1 << 24);

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CrossEntropyConfig {
    /// f32 logits (and gradient) instead of bf16.
    pub f32_logits: bool,
    /// Label smoothing ε in `[0, 1)`, baked into the program.
    pub smoothing: f32,
    /// Lanes of a wave (32 on NVIDIA, 64 on AMD).
    pub lanes: u32,
    /// Waves per block, all on the block's one row.
    pub waves: u32,
    /// 8-element chunks per lane per step: a wave's strip is `lanes × 8 × chunks` columns (several
    /// loads in flight per lane per step).
    pub chunks: u32,
}

/// The environment variable that overrides the block shape for a measurement: `waves=N` (1 to 16)
/// and/or `chunks=C` (1 to 8), comma-separated (e.g. `KITTENS_CE=waves=4,chunks=4`).
pub const TUNE_VAR: &str = "KITTENS_CE";

impl CrossEntropyConfig {
    /// This configuration with the settings `v` (the form of [`TUNE_VAR`]).
    pub fn tuned(mut self, v: &str) -> Result<Self, KernelError> {
        let bad = || {
            KernelError::Config(format!(
                "{TUNE_VAR} = {v:?}: expected waves=N (1 to 16) and/or chunks=C (1 to 8), comma-separated"
            ))
        };
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = item.split_once('=').ok_or_else(bad)?;
            let n: u32 = val.trim().parse().map_err(|_| bad())?;
            match key.trim() {
                "waves" if (1..=16).contains(&n) => self.waves = n,
                "chunks" if (1..=8).contains(&n) => self.chunks = n,
                _ => return Err(bad()),
            }
        }
        Ok(self)
    }

    /// 256 threads per block, two chunks of 8 per lane: NVIDIA's 8 warps × 512 columns, AMD's 4
    /// waves × 1024 columns per step.
    pub fn new(f32_logits: bool, smoothing: f32, lanes: u32) -> Self {
        CrossEntropyConfig {
            f32_logits,
            smoothing,
            lanes,
            waves: 256 / lanes.max(1),
            chunks: 2,
        }
    }

    /// As configured for `gpu` (its wave width).
    pub fn for_gpu(gpu: &Gpu, f32_logits: bool, smoothing: f32) -> Self {
        Self::new(f32_logits, smoothing, gpu.wave_width)
    }

    /// Columns of one wave's strip.
    pub fn strip(&self) -> u32 {
        self.lanes * 8 * self.chunks
    }

    /// Columns the block covers per step.
    pub fn step(&self) -> u32 {
        self.strip() * self.waves
    }

    /// The dtype of the logits and the gradient.
    pub fn dtype(&self) -> DType {
        if self.f32_logits {
            F32
        } else {
            Bf16
        }
    }

    pub(crate) fn check(&self) -> Result<(), KernelError> {
        let bad = |m: String| Err(KernelError::Config(format!("cross_entropy: {m}")));
        if !(0.0..1.0).contains(&self.smoothing) {
            return bad(format!(
                "label smoothing {} must be in [0, 1)",
                self.smoothing
            ));
        }
        if !matches!(self.lanes, 32 | 64) {
            return bad(format!("{} lanes per wave (32 or 64)", self.lanes));
        }
        if self.waves == 0 || self.chunks == 0 || self.chunks > 8 {
            return bad(format!(
                "{} waves and {} chunks per lane (both positive, at most 8 chunks)",
                self.waves, self.chunks
            ));
        }
        Ok(())
    }
}

/// The kernel. Parameters `rows`, `vocab`, `pitch` (elements from one row of `logits` and `grad` to the
/// next, at least `vocab`: a pitch that is a multiple of 8 starts every row on a 16-byte boundary, so a
/// vocabulary like GPT-2's 50257 still moves in vectors); tensors in launch order: `logits` (`[rows,
/// vocab]` at that pitch, bf16 or f32), `labels` (f32 `[rows]`), `cols` (f32 `[vocab]`: `0, 1, 2, …`), `scale` (f32, one value: the
/// gradient's factor, `1 / n` for the mean over `n` rows); then the outputs `grad` (`[rows, vocab]`,
/// the logits' dtype and pitch; may be the logits' own buffer) and `loss` (f32 `[rows]`, unscaled).
pub fn build(cfg: &CrossEntropyConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let (w, eps) = (cfg.waves, cfg.smoothing);
    let dt = cfg.dtype();
    let name = format!(
        "cross_entropy_{}{}",
        if cfg.f32_logits { "f32" } else { "bf16" },
        if eps > 0.0 { "_smoothed" } else { "" }
    );
    let mut k = KernelBuilder::new(&name, Schedule::Plain { waves: w });
    let rows = k.param("rows");
    let vocab = k.param("vocab");
    let pitch = k.param("pitch");
    let (zero, one) = (Expr::c(0), Expr::c(1));
    let m = [("row", rows.clone()), ("col", vocab.clone())];
    let per_row = [("row", rows.clone()), ("one", one.clone())];
    let pitched = vec![pitch, one.clone()];
    let logits = k.global_strided("logits", dt, &m, pitched.clone(), Access::Read);
    let labels = k.global("labels", F32, &per_row, Access::Read);
    let cols = k.global_strided("cols", F32, &m, vec![zero.clone(), one], Access::Read);
    let scale = k.global_strided(
        "scale",
        F32,
        &per_row,
        vec![zero.clone(), zero.clone()],
        Access::Read,
    );
    let grad = k.global_strided("grad", dt, &m, pitched, Access::Write);
    let loss = k.global("loss", F32, &per_row, Access::Write);
    k.grid(vec![rows.clone()], GridOrder::RowMajor);

    let row = k.block(0);
    let (strip, step) = (cfg.strip(), i64::from(cfg.step()));
    let steps = vocab.ceil_div(step);
    let first = k.wave() * i64::from(strip);
    let col0 = move |s: &Expr| s.clone() * step + first.clone();
    let view =
        |k: &KernelBuilder, g: GlobalId, c: Expr| k.gview(g, vec![row.clone(), c], 0, 1, 1, strip);
    let one_of =
        |k: &KernelBuilder, g: GlobalId| k.gview(g, vec![row.clone(), Expr::c(0)], 0, 1, 1, 1);

    let x = k.tile("x", F32, 1, strip, Layout::Row, BaseShape::STRIP);
    let hot = k.tile("onehot", F32, 1, strip, Layout::Row, BaseShape::STRIP);
    let iota = k.col_vec("col_index", x, F32);
    let vec = |k: &mut KernelBuilder, n: &str| k.row_vec(n, x, F32);
    let [label, lab] = ["label", "shifted_label"].map(|n| vec(&mut k, n));
    let [mx, run, sum, tmp, den] =
        ["max", "running_max", "sum", "t", "matches"].map(|n| vec(&mut k, n));
    let [xl, found, sx, nv] = ["label_logit", "found", "row_sum", "count"].map(|n| vec(&mut k, n));
    let partials = k.shared("partials", F32, 1, w, Swizzle::None, 2);

    // onehot(j) = 1 where this step's column j is the label: cols[j] = label − s·step exactly (both
    // integers below 2^25, exact in f32), so a label that is no integer matches nothing.
    let onehot = |k: &mut KernelBuilder| {
        k.map(
            hot,
            MapFn::Sub,
            vec![Arg::ColBcast(iota), Arg::RowBcast(lab)],
        );
        k.map(hot, MapFn::Abs, vec![Arg::Reg(hot)]);
        k.ge(hot, 0.0, hot);
    };

    k.load_global(label, one_of(&k, labels));
    k.load_global(iota, view(&k, cols, col0(&Expr::c(0))));
    k.copy(lab, label);
    // The running maximum starts at the lowest finite f32, so that a wave with no column in the row
    // (masked to −∞) rescales by e^0 instead of e^(−∞ + ∞).
    k.fill(run, -f32::MAX);
    for v in [sum, xl, found, sx, nv] {
        k.zero(v);
    }
    k.for_range("pass1", 0, steps.clone(), |k, s| {
        let c = col0(&s);
        k.load_global(x, view(k, logits, c.clone()));
        onehot(k);
        // Columns past V read zero; the label may not match one of them.
        k.mask(hot, MaskRule::ColsBelow(vocab.clone()), 0, c.clone(), 0.0);
        k.row_sum_acc(found, hot, found);
        k.mul(hot, hot, x);
        k.row_sum_acc(xl, hot, xl);
        if eps > 0.0 {
            k.row_sum_acc(sx, x, sx);
            k.fill(hot, 1.0);
            k.mask(hot, MaskRule::ColsBelow(vocab.clone()), 0, c.clone(), 0.0);
            k.row_sum_acc(nv, hot, nv);
        }
        k.mask(
            x,
            MaskRule::ColsBelow(vocab.clone()),
            0,
            c,
            f32::NEG_INFINITY,
        );
        k.row_max_acc(mx, x, run);
        // sum ← sum · e^(run − max) + Σ e^(x − max)
        k.sub(tmp, run, mx);
        k.exp(tmp, tmp);
        k.mul(sum, sum, tmp);
        k.sub_row(x, x, mx);
        k.exp(x, x);
        k.row_sum_acc(sum, x, sum);
        k.copy(run, mx);
        k.sub(lab, lab, step as f32);
    });

    // The waves' statistics become the row's (ring slots alternate, see `row_sum_across_waves`).
    let part = k.wave();
    k.copy(mx, run);
    k.row_max_across_waves(mx, partials, 0, 0, part.clone(), w);
    k.sub(tmp, run, mx);
    k.exp(tmp, tmp);
    k.mul(sum, sum, tmp);
    let mut slot = 1;
    let mut across = |k: &mut KernelBuilder, v: RegId| {
        k.row_sum_across_waves(v, partials, slot, 0, part.clone(), w);
        slot = 1 - slot;
    };
    across(&mut k, sum);
    across(&mut k, xl);
    across(&mut k, found);
    if eps > 0.0 {
        across(&mut k, sx);
        across(&mut k, nv);
    }

    // lse = max + log(sum), kept in `mx`.
    k.log(sum, sum);
    k.add(mx, mx, sum);
    // loss = (lse − (1 − ε)·x_y − ε·Σx / V) · valid / max(found, 1 − valid)
    let valid = sum;
    k.ge(valid, label, 0.0);
    k.mul(tmp, xl, 1.0 - eps);
    k.sub(tmp, mx, tmp);
    if eps > 0.0 {
        k.div(sx, sx, nv);
        k.mul(sx, sx, eps);
        k.sub(tmp, tmp, sx);
        // ε / V, subtracted from every column's gradient below.
        k.div(nv, eps, nv);
    }
    k.mul(tmp, tmp, valid);
    k.sub(den, 1.0, valid);
    k.max(den, den, found);
    k.div(tmp, tmp, den);
    k.if_(Cond::Eq(k.wave(), Expr::c(0)), |k| {
        k.store(one_of(k, loss), tmp)
    });

    // grad = scale · valid · (e^(x − lse) − (1 − ε)·onehot − ε/V)
    k.load_global(run, one_of(&k, scale));
    k.mul(run, run, valid);
    k.copy(lab, label);
    k.for_range("pass2", 0, steps, |k, s| {
        let c = col0(&s);
        k.load_global(x, view(k, logits, c.clone()));
        k.sub_row(x, x, mx);
        k.exp(x, x);
        if eps > 0.0 {
            k.sub_row(x, x, nv);
        }
        onehot(k);
        if eps > 0.0 {
            k.mul(hot, hot, 1.0 - eps);
        }
        k.sub(x, x, hot);
        k.mul_row(x, x, run);
        k.store(view(k, grad, c), x);
        k.sub(lab, lab, step as f32);
    });
    Ok(k.finish()?)
}
