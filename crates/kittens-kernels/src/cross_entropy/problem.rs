//! `cross_entropy` at a problem's sizes: `rows` rows of `V = vocab` logits `pitch` elements apart, the
//! options (label smoothing, f32 logits); parameters `rows`, `vocab`, `pitch`.
//!
//! Inputs `logits`, `labels`, `cols`, `scale`; outputs `grad`, `loss`. The random inputs are logits
//! uniform in `±input_scale`, labels uniform over the vocabulary with about one row in eight ignored,
//! the column indices, and `scale = 1 / (rows not ignored)` (the mean's factor). Judged by the test
//! rule against PyTorch's computation on bf16 logits ([`baseline`]); with a pitch past `vocab` the
//! gaps between the rows must stay unwritten.

use super::{build, CrossEntropyConfig, VOCAB};
use crate::budget;
use crate::problem::{
    param, positive, random_scaled, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings,
    STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::Kernel;
use rand::rngs::SmallRng;
use rand::Rng;

/// The cross-entropy's settings in a [`CrossEntropyProblem`].
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct CrossEntropyOptions {
    /// Label smoothing ε in `[0, 1)`.
    pub smoothing: f32,
    /// f32 logits and gradient instead of bf16.
    pub f32_logits: bool,
}

/// A `cross_entropy` problem: `rows` rows of `vocab` logits, and its options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyProblem {
    pub rows: usize,
    pub vocab: usize,
    /// Elements from one row of the logits (and the gradient) to the next; `None`: `vocab` (dense).
    /// The fused loss pads an odd vocabulary's rows to a multiple of 8 so that they move in vectors.
    pub pitch: Option<usize>,
    pub options: CrossEntropyOptions,
    pub run: RunSettings,
}

impl Default for CrossEntropyProblem {
    /// Odd sizes: 37 rows of 1000 logits.
    fn default() -> Self {
        CrossEntropyProblem {
            rows: 37,
            vocab: 1000,
            pitch: None,
            options: CrossEntropyOptions::default(),
            run: RunSettings::default(),
        }
    }
}

impl CrossEntropyProblem {
    /// The problem `a` names: `rows`, `norm_dim` (the vocabulary), `pitch` (default: the vocabulary),
    /// `smoothing`, `f32_logits` (and the run settings).
    pub fn from_args(a: &NamedArgs) -> Result<CrossEntropyProblem, KernelError> {
        let d = CrossEntropyProblem::default();
        let run = RunSettings::from_args(a, &[F32])?;
        Ok(CrossEntropyProblem {
            rows: a.size_or("rows", d.rows)?,
            vocab: a.size_or("norm_dim", d.vocab)?,
            pitch: a.opt_size_or("pitch", d.pitch)?,
            options: CrossEntropyOptions {
                smoothing: a.f32_or("smoothing", d.options.smoothing)?,
                f32_logits: a.flag_or("f32_logits", d.options.f32_logits)?
                    || run.variant == Some(F32),
            },
            run,
        })
    }
}

/// The variant of f32 logits (`kittens compile --schedule f32`): the setting `f32_logits`.
pub const F32: &str = "f32";

/// The registry's parser of `cross_entropy`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(CrossEntropyProblem::from_args(a)?))
}

/// The configuration a run on `target` builds: the target's wave width (32 lanes on the CPU).
pub fn config(p: &CrossEntropyProblem, target: Target) -> CrossEntropyConfig {
    let o = p.options;
    let lanes = target.gpu().map_or(32, |g| g.wave_width);
    CrossEntropyConfig::new(o.f32_logits, o.smoothing, lanes)
}

/// [`config`] with what [`super::TUNE_VAR`] sets for a measurement; an error naming the variable where
/// it holds anything else.
pub fn tuned_config(
    p: &CrossEntropyProblem,
    target: Target,
) -> Result<CrossEntropyConfig, KernelError> {
    match std::env::var(super::TUNE_VAR) {
        Ok(v) => config(p, target).tuned(&v),
        Err(_) => Ok(config(p, target)),
    }
}

/// `(rows, vocab, pitch)`, checked.
fn sizes(p: &CrossEntropyProblem) -> Result<(usize, usize, usize), KernelError> {
    let (rows, v) = (p.rows, p.vocab);
    let pitch = p.pitch.unwrap_or(v);
    if pitch < v {
        return Err(KernelError::Problem(format!(
            "cross_entropy: pitch {pitch} must be at least the vocabulary size {v}"
        )));
    }
    if !u32::try_from(v).is_ok_and(|v| VOCAB.contains(&v)) {
        return Err(KernelError::Problem(format!(
            "cross_entropy: vocabulary size {v} must be from {} to {} (labels are f32)",
            VOCAB.start(),
            VOCAB.end()
        )));
    }
    Ok((rows, v, pitch))
}

/// Elements the `[rows, vocab]` logits span at `pitch`.
fn span(rows: usize, v: usize, pitch: usize) -> Result<usize, KernelError> {
    let last = crate::problem::elements("logits", &[rows.saturating_sub(1), pitch])?;
    last.checked_add(v).ok_or_else(|| {
        KernelError::Problem(format!(
            "cross_entropy: {rows} rows of pitch {pitch} overflow"
        ))
    })
}

impl KernelProblem for CrossEntropyProblem {
    fn kernel(&self) -> &'static str {
        "cross_entropy"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let (rows, v, pitch) = sizes(p)?;
        crate::problem::elements("logits", &[rows, v])?;
        let m = span(rows, v, pitch)?;
        Ok(Launch {
            params: vec![
                param("rows", rows)?,
                param("vocab", v)?,
                param("pitch", pitch)?,
            ],
            inputs: vec![m, rows, v, 1],
            outputs: vec![m, rows],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        positive("cross_entropy", &[("rows", p.rows), ("vocab", p.vocab)])?;
        let cfg = tuned_config(p, target)?;
        cfg.check()?;
        let launch = self.launch()?;
        let (rows, v, pitch) = sizes(p)?;
        let what = format!("cross_entropy at rows={rows} vocab={v} pitch={pitch}");
        let m = launch.inputs[0] as u64;
        // The logits and their snapshot, the gradient (value, pending store, reference, baseline).
        budget::check_host_bytes(&what, m.checked_mul(2 * 4 + 4 + STORE_BYTES + 8 + 4))?;
        Ok(Plan {
            launch,
            what,
            // Two passes over the row, a few operations per element each.
            work: m.checked_mul(2),
            shape: serde_json::json!({
                "rows": rows, "vocab": v, "pitch": pitch, "options": p.options, "config": cfg,
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        build(&tuned_config(self, target)?)
    }

    fn draw(&self, k: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let p = self;
        let (rows, v) = (p.rows, p.vocab);
        let logits = random_scaled(rng, launch.inputs[0], k.globals[0].dtype, p.run.input_scale);
        let labels: Vec<f32> = (0..rows)
            .map(|_| match rng.gen_range(0..8) {
                0 => -1.0,
                _ => rng.gen_range(0..v) as f32,
            })
            .collect();
        let kept = labels.iter().filter(|&&l| l >= 0.0).count().max(1);
        let cols = (0..v).map(|j| j as f32).collect();
        vec![logits, labels, cols, vec![1.0 / kept as f32]]
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let (v, pitch) = (p.vocab, p.pitch.unwrap_or(p.vocab));
        let (eps, scale) = (f64::from(p.options.smoothing), f64::from(inputs[3][0]));
        let x = dense_rows(&inputs[0], p.rows, v, pitch);
        let (grad, loss) = reference(&x, &inputs[1], v, eps, scale);
        let dtype = config(p, Target::Cpu).dtype();
        let (g, l) = baseline(&x, &inputs[1], v, eps as f32, inputs[3][0], dtype);
        let n = inputs[0].len();
        Reference {
            values: pitched_rows(&grad, v, pitch, n, f64::NAN)
                .into_iter()
                .chain(loss)
                .collect(),
            baseline: Some(
                pitched_rows(&g, v, pitch, n, f32::NAN)
                    .into_iter()
                    .chain(l)
                    .collect(),
            ),
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}

/// The first `v` of every `pitch` elements of `x`'s `rows` rows, back to back.
fn dense_rows(x: &[f32], rows: usize, v: usize, pitch: usize) -> Vec<f32> {
    (0..rows)
        .flat_map(|r| &x[r * pitch..r * pitch + v])
        .copied()
        .collect()
}

/// Rows of `v` values laid out `pitch` apart over `n` elements, `gap` between them (a NaN reference
/// entry: a position the kernel must leave unwritten).
fn pitched_rows<T: Copy>(dense: &[T], v: usize, pitch: usize, n: usize, gap: T) -> Vec<T> {
    let mut out = vec![gap; n];
    for (r, row) in dense.chunks(v).enumerate() {
        out[r * pitch..r * pitch + v].copy_from_slice(row);
    }
    out
}

/// The f64 computation: `(grad, loss)` per the module documentation of [`super`], rows of `v` logits.
pub fn reference(
    x: &[f32],
    labels: &[f32],
    v: usize,
    eps: f64,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut grad = Vec::with_capacity(x.len());
    let mut loss = Vec::with_capacity(labels.len());
    for (row, &y) in x.chunks(v).zip(labels) {
        let row: Vec<f64> = row.iter().map(|&a| f64::from(a)).collect();
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
        if y < 0.0 {
            grad.extend(std::iter::repeat_n(0.0, v));
            loss.push(0.0);
            continue;
        }
        let y = y as usize;
        let mean = row.iter().sum::<f64>() / v as f64;
        loss.push(lse - (1.0 - eps) * row[y] - eps * mean);
        grad.extend(row.iter().enumerate().map(|(j, a)| {
            let hot = if j == y { 1.0 - eps } else { 0.0 };
            scale * ((a - lse).exp() - hot - eps / v as f64)
        }));
    }
    (grad, loss)
}

/// PyTorch's computation on logits of `dtype`, the test rule's baseline: `F.cross_entropy(x, y,
/// reduction="none", label_smoothing=ε)` — log-softmax in f32 rounded to `dtype`, the loss from those
/// log-probabilities rounded to `dtype` — and its backward at `grad_output = scale`
/// (`g_j − e^(logp_j) · Σ g` with `g = −scale·((1 − ε)·onehot + ε/V)`, rounded to `dtype`).
pub fn baseline(
    x: &[f32],
    labels: &[f32],
    v: usize,
    eps: f32,
    scale: f32,
    dtype: kittens_hw::dtype::DType,
) -> (Vec<f32>, Vec<f32>) {
    let bf = |a: f32| round(a, dtype, Rounding::Rtne);
    let mut grad = Vec::with_capacity(x.len());
    let mut loss = Vec::with_capacity(labels.len());
    for (row, &y) in x.chunks(v).zip(labels) {
        if y < 0.0 {
            grad.extend(std::iter::repeat_n(0.0, v));
            loss.push(0.0);
            continue;
        }
        let y = y as usize;
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = m + row.iter().map(|a| (a - m).exp()).sum::<f32>().ln();
        let logp: Vec<f32> = row.iter().map(|a| bf(a - lse)).collect();
        let mean = logp.iter().sum::<f32>() / v as f32;
        loss.push(bf(-((1.0 - eps) * logp[y] + eps * mean)));
        let g: Vec<f32> = (0..v)
            .map(|j| {
                let hot = if j == y { 1.0 - eps } else { 0.0 };
                bf(-scale * (hot + eps / v as f32))
            })
            .collect();
        let total: f32 = g.iter().sum();
        grad.extend(
            logp.iter()
                .zip(&g)
                .map(|(lp, gj)| bf(gj - lp.exp() * total)),
        );
    }
    (grad, loss)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 gradient is the loss's derivative: central differences of the mean loss at a few
    /// logits, with smoothing and an ignored row.
    #[test]
    fn gradient_matches_finite_differences() {
        let (v, eps) = (7, 0.1);
        let x: Vec<f32> = (0..3 * v)
            .map(|i| ((i * 7919 % 97) as f32 / 97.0 - 0.5) * 6.0)
            .collect();
        let labels = [2.0, -1.0, 6.0];
        let scale = 0.5; // two rows kept
        let mean = |x: &[f32]| reference(x, &labels, v, eps, scale).1.iter().sum::<f64>() * scale;
        let (g, _) = reference(&x, &labels, v, eps, scale);
        for i in [0, 2, v + 3, 2 * v + 6, 2 * v] {
            let h = 1.0 / 1024.0;
            let (mut up, mut down) = (x.clone(), x.clone());
            up[i] += h;
            down[i] -= h;
            let fd = (mean(&up) - mean(&down)) / (2.0 * f64::from(h));
            assert!((fd - g[i]).abs() < 1e-5, "grad[{i}]: {fd} vs {}", g[i]);
        }
    }
}
