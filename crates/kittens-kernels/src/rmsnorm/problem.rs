//! `rmsnorm` and `rmsnorm_bwd` at a problem's sizes: `rows` rows of `dim`, `residual`,
//! `eps` (`None`: 1e-6); parameter `rows`.
//!
//! * `rmsnorm`: inputs `x`, `residual` (with a residual), `weight`; outputs `y`, `residual_out` (with
//!   a residual).
//! * `rmsnorm_bwd`: inputs `dy`, `r`, `weight`, `dresidual_out` (with a residual); outputs `dx` and
//!   `dweight`, in two launches ([`super::build_bwd`] writes `dx` and the scratch `dw_partial`,
//!   [`super::build_dweight`] sums it into `dweight`).
//!
//! The f64 references, and a fixed tolerance (each output one bf16 rounding of f32 arithmetic).

use super::{build, build_bwd, build_dweight, RmsNormConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings,
    Stage, STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::rows::{RowLoop, RowStrides};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// The bound on `rel_err`: one bf16 rounding of each output (2^-9 relative) over f32 arithmetic; a
/// wrong statistic, column or row gives errors of order 0.1 to 1.
pub const TOLERANCE: f64 = 1e-2;

/// An `rmsnorm` problem: `rows` rows of `dim`; `residual`: add a residual first and write the sum
/// out as the new residual (the default), else normalise `x` alone; `eps` added to the mean square
/// (`None`: the kernel's default, 1e-6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormProblem {
    pub rows: usize,
    pub dim: usize,
    pub residual: bool,
    pub eps: Option<f32>,
    /// The row strides of the inputs ([`FWD_STRIDED`] or [`BWD_STRIDED`]), read in place; dense by
    /// default.
    pub strides: RowStrides,
    pub run: RunSettings,
}

/// The forward's inputs that take a row stride (`{name}_row_stride`).
pub const FWD_STRIDED: [&str; 2] = ["x", "residual"];
/// The backward's inputs that take a row stride (`{name}_row_stride`).
pub const BWD_STRIDED: [&str; 3] = ["dy", "r", "dresidual_out"];

impl Default for RmsNormProblem {
    /// Odd sizes: 37 rows of 1000 (not a multiple of a wave's 256-column strip), with a residual.
    fn default() -> Self {
        RmsNormProblem {
            rows: 37,
            dim: 1000,
            residual: true,
            eps: None,
            strides: RowStrides::default(),
            run: RunSettings::default(),
        }
    }
}

/// An `rmsnorm_bwd` problem: the forward's sizes and settings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RmsNormBwdProblem(pub RmsNormProblem);

impl RmsNormProblem {
    /// The problem `a` names: `rows`, `norm_dim`, `residual`, `eps`, `{t}_row_stride` for each
    /// tensor `t` of `strided` (and the run settings).
    pub fn from_args(
        a: &NamedArgs,
        strided: &[&'static str],
        variants: &[&'static str],
    ) -> Result<RmsNormProblem, KernelError> {
        let d = RmsNormProblem::default();
        Ok(RmsNormProblem {
            rows: a.size_or("rows", d.rows)?,
            dim: a.size_or("norm_dim", d.dim)?,
            residual: a.flag_or("residual", d.residual)?,
            eps: a.opt_f32_or("eps", d.eps)?,
            strides: RowStrides::from_args(a, strided)?,
            run: RunSettings::from_args(a, variants)?,
        })
    }

    /// The buffer of `[rows, D]` input `t`: its span in its row stride.
    fn span(&self, t: &str) -> Result<usize, KernelError> {
        self.strides.span(t, self.rows, self.dim)
    }

    /// Input `t` gathered into dense rows.
    fn dense(&self, t: &str, data: &[f32]) -> Vec<f32> {
        self.strides.gather(t, data, self.rows, self.dim)
    }
}

/// The registry's parser of `rmsnorm`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(RmsNormProblem::from_args(a, &FWD_STRIDED, &[])?))
}

/// The registry's parser of `rmsnorm_bwd`'s problem.
pub fn parse_bwd(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(RmsNormBwdProblem(RmsNormProblem::from_args(
        a,
        &BWD_STRIDED,
        &[crate::rows::DWEIGHT],
    )?)))
}

/// The configuration a run on `target` builds: the target's wave width (32 lanes on the CPU).
pub fn config(p: &RmsNormProblem, target: Target) -> RmsNormConfig {
    let dim = u32::try_from(p.dim).unwrap_or(u32::MAX);
    let lanes = target.gpu().map_or(32, |g| g.wave_width);
    let base = RmsNormConfig::new(dim, p.residual, lanes);
    RmsNormConfig {
        eps: p.eps.unwrap_or(base.eps),
        strides: p.strides,
        ..base
    }
}

/// The forward's configuration: [`config`], its rows split over waves as
/// [`crate::rows::fwd_per_lane`] says (the measured default, or [`crate::rows::FWD_SPLIT_VAR`]'s
/// override for a measurement).
pub fn fwd_config(p: &RmsNormProblem, target: Target) -> Result<RmsNormConfig, KernelError> {
    let cfg = config(p, target);
    let split = crate::rows::FwdSplit::Halved;
    let per_lane = crate::rows::fwd_per_lane(cfg.dim, cfg.lanes, split)?;
    let w = crate::rows::waves_per_row_at(cfg.dim, cfg.lanes, per_lane);
    Ok(RmsNormConfig {
        waves_per_row: w,
        waves: crate::rows::block_waves(w),
        ..cfg
    })
}

/// Registers the backward's first launch takes on sm_90a at two blocks per SM without prefetch and
/// with 32-bit offsets, zero spills (NVRTC, crates/kittens-runtime/tests/norm_index32.rs: 64 at
/// D = 3080 and 4096).
const PAIRED_REGISTERS: u32 = 64;

/// The widest row whose backward runs as a pair ([`RowLoop::pair_where_it_fits`]) now that it takes
/// both sums of a row at one barrier ([`RowLoop::one_sum`], the default at every width): on the H200
/// at 16384 rows, D = 4096 ran 0.72 of the copy bandwidth at one block per SM with prefetch against
/// 0.68 paired; D = 3080 0.62 paired against 0.48 (docs/performance.md, "rmsnorm and swiglu").
const PAIRED_MAX_DIM: u32 = 3080;

/// The backward's configuration on `target` and how its first launch walks the rows (with
/// [`crate::rows::ROW_LOOP_VAR`]'s override for a measurement).
pub fn bwd_config(
    p: &RmsNormProblem,
    target: Target,
) -> Result<(RmsNormConfig, RowLoop), KernelError> {
    let mut cfg = config(p, target);
    let lp = RowLoop::for_split(target, (&mut cfg.waves, &mut cfg.waves_per_row))?
        .index32_for(p.rows, cfg.strides.widest(cfg.dim as usize))
        .one_sum_where(target, true)
        .stage_where(target, cfg.dim >= crate::rows::STAGED_MIN_DIM);
    let lp = if cfg.dim <= PAIRED_MAX_DIM {
        lp.pair_where_it_fits(target, cfg.waves * cfg.lanes, cfg.slice(), PAIRED_REGISTERS)
    } else {
        lp
    };
    Ok((cfg, lp))
}

/// Validates the sizes and the configuration and returns `(rows, dim, rows × dim)`.
fn sizes(
    p: &RmsNormProblem,
    target: Target,
    name: &str,
) -> Result<(usize, usize, usize), KernelError> {
    positive(name, &[("rows", p.rows), ("dim", p.dim)])?;
    config(p, target).check()?;
    let (rows, d) = (p.rows, p.dim);
    Ok((rows, d, elements("x", &[rows, d])?))
}

/// The host bytes of a run: `tensors` bf16 tensors of `m` elements in (and their snapshot), `outs`
/// out (values, pending stores, the f64 reference).
fn check_bytes(what: &str, m: usize, tensors: u64, outs: u64) -> Result<(), KernelError> {
    let m = m as u64;
    budget::check_host_bytes(
        what,
        budget::sum(&[
            m.checked_mul(tensors * 2 * 4),
            m.checked_mul(outs * (4 + STORE_BYTES + 8)),
        ]),
    )
}

impl KernelProblem for RmsNormProblem {
    fn kernel(&self) -> &'static str {
        "rmsnorm"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let (rows, d) = (p.rows, p.dim);
        let m = elements("x", &[rows, d])?;
        let n = if p.residual { 2 } else { 1 };
        let mut inputs = FWD_STRIDED[..n]
            .iter()
            .map(|t| p.span(t))
            .collect::<Result<Vec<_>, _>>()?;
        inputs.push(d);
        Ok(Launch {
            params: vec![param("rows", rows)?],
            inputs,
            outputs: vec![m; n],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let (rows, d, m) = sizes(p, target, "rmsnorm")?;
        let what = format!("rmsnorm at rows={rows} dim={d}");
        let n = if p.residual { 2 } else { 1 };
        check_bytes(&what, m, n, n)?;
        Ok(Plan {
            launch: self.launch()?,
            what,
            work: Some(m as u64),
            shape: serde_json::json!({
                "rows": rows, "dim": d, "residual": p.residual,
                "config": fwd_config(p, target)?,
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        build(&fwd_config(p, target)?)
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let x = p.dense("x", &inputs[0]);
        let res = p.residual.then(|| p.dense("residual", &inputs[1]));
        let w = &inputs[inputs.len() - 1];
        let r = residual_sum(&x, res.as_deref());
        let mut values = forward(&r, w, p.dim, f64::from(config(p, Target::Cpu).eps));
        if p.residual {
            values.extend(r);
        }
        Reference {
            values,
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

impl KernelProblem for RmsNormBwdProblem {
    fn kernel(&self) -> &'static str {
        "rmsnorm_bwd"
    }

    fn settings(&self) -> &RunSettings {
        &self.0.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = &self.0;
        let (rows, d) = (p.rows, p.dim);
        let m = elements("dy", &[rows, d])?;
        let mut inputs = vec![p.span("dy")?, p.span("r")?, d];
        if p.residual {
            inputs.push(p.span("dresidual_out")?);
        }
        Ok(Launch {
            params: vec![param("rows", rows)?],
            inputs,
            outputs: vec![m, d],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = &self.0;
        let (rows, d, m) = sizes(p, target, "rmsnorm_bwd")?;
        let (cfg, lp) = bwd_config(p, target)?;
        cfg.check()?;
        let what = format!("rmsnorm_bwd at rows={rows} dim={d}");
        let parts = lp.scratch_len(&what, rows, cfg.rows_per_block(), d)?;
        // Inputs, dx and the scratch (under m / 16 more).
        check_bytes(&what, m, 3 + u64::from(p.residual), 2)?;
        budget::check_host_bytes(&what, (parts as u64).checked_mul(4 + STORE_BYTES + 4))?;
        Ok(Plan {
            launch: self.launch()?,
            what,
            work: Some(m as u64),
            shape: serde_json::json!({
                "rows": rows, "dim": d, "residual": p.residual,
                "config": cfg, "row_loop": lp, "dw_partial": [d, parts / d],
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let (cfg, lp) = bwd_config(&self.0, target)?;
        match self.0.run.variant {
            Some(crate::rows::DWEIGHT) => build_dweight(&cfg, &lp),
            _ => build_bwd(&cfg, &lp),
        }
    }

    /// `dx` and the scratch `dw_partial`, then `dweight` from the scratch (passed by name).
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = &self.0;
        let (cfg, lp) = bwd_config(p, target)?;
        let l = &plan.launch;
        let d = p.dim;
        let scratch = lp.scratch_len("rmsnorm_bwd", p.rows, cfg.rows_per_block(), d)?;
        Ok(vec![
            Stage {
                kernel: build_bwd(&cfg, &lp)?,
                launch: Launch {
                    params: l.params.clone(),
                    inputs: l.inputs.clone(),
                    outputs: vec![l.outputs[0], scratch],
                },
            },
            Stage {
                kernel: build_dweight(&cfg, &lp)?,
                launch: Launch {
                    params: l.params.clone(),
                    inputs: vec![scratch],
                    outputs: vec![d],
                },
            },
        ])
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = &self.0;
        let dres = p.residual.then(|| p.dense("dresidual_out", &inputs[3]));
        let (dx, dw) = backward(
            &p.dense("dy", &inputs[0]),
            &p.dense("r", &inputs[1]),
            &inputs[2],
            dres.as_deref(),
            p.dim,
            f64::from(config(p, Target::Cpu).eps),
        );
        Reference {
            values: dx.into_iter().chain(dw).collect(),
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

/// `r = x + residual` in f64 (exact for bf16 inputs).
pub fn residual_sum(x: &[f32], residual: Option<&[f32]>) -> Vec<f64> {
    match residual {
        Some(res) => x
            .iter()
            .zip(res)
            .map(|(&a, &b)| f64::from(a) + f64::from(b))
            .collect(),
        None => x.iter().map(|&a| f64::from(a)).collect(),
    }
}

/// `1 / √(mean(row²) + eps)`.
fn rstd(row: &[f64], eps: f64) -> f64 {
    let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
    1.0 / (ms + eps).sqrt()
}

/// The f64 forward: `y = r · rstd · w`, row by row (rows of `dim`).
pub fn forward(r: &[f64], w: &[f32], dim: usize, eps: f64) -> Vec<f64> {
    r.chunks(dim)
        .flat_map(|row| {
            let inv = rstd(row, eps);
            row.iter()
                .zip(w)
                .map(move |(v, &wj)| v * inv * f64::from(wj))
        })
        .collect()
}

/// The f64 backward: `(dx, dweight)` from `dy`, `r`, `w` and the gradient of the new residual.
pub fn backward(
    dy: &[f32],
    r: &[f32],
    w: &[f32],
    dres: Option<&[f32]>,
    dim: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut dx = Vec::with_capacity(r.len());
    let mut dw = vec![0.0; dim];
    for (i, (rrow, grow)) in r.chunks(dim).zip(dy.chunks(dim)).enumerate() {
        let row: Vec<f64> = rrow.iter().map(|&v| f64::from(v)).collect();
        let inv = rstd(&row, eps);
        let hat: Vec<f64> = row.iter().map(|v| v * inv).collect();
        let wdy: Vec<f64> = grow
            .iter()
            .zip(w)
            .map(|(&g, &wj)| f64::from(g) * f64::from(wj))
            .collect();
        let c = wdy.iter().zip(&hat).map(|(a, b)| a * b).sum::<f64>() / dim as f64;
        for j in 0..dim {
            let extra = dres.map_or(0.0, |d| f64::from(d[i * dim + j]));
            dx.push(inv * (wdy[j] - hat[j] * c) + extra);
            dw[j] += f64::from(grow[j]) * hat[j];
        }
    }
    (dx, dw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analytic backward is the forward's derivative: central differences of the f64 forward
    /// (through a random linear functional `Σ dy·y + Σ dres·r`) at a few coordinates of `r` and `w`.
    #[test]
    fn backward_matches_finite_differences() {
        let (rows, dim, eps) = (3, 24, 1e-6);
        let val = |i: usize, s: f32| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * s;
        let r: Vec<f32> = (0..rows * dim).map(|i| val(i, 2.0)).collect();
        // Multiples of 2^-10, so that a step of 2^-10 is exact in f32.
        let w: Vec<f32> = (0..dim)
            .map(|i| (val(i + 333, 1.5) * 1024.0).round() / 1024.0)
            .collect();
        let dy: Vec<f32> = (0..rows * dim).map(|i| val(i + 77, 1.0)).collect();
        let dres: Vec<f32> = (0..rows * dim).map(|i| val(i + 555, 1.0)).collect();
        let loss = |r: &[f64], w: &[f32]| -> f64 {
            let y = forward(r, w, dim, eps);
            let a: f64 = y.iter().zip(&dy).map(|(y, &g)| y * f64::from(g)).sum();
            let b: f64 = r.iter().zip(&dres).map(|(r, &g)| r * f64::from(g)).sum();
            a + b
        };
        let (dx, dw) = backward(&dy, &r, &w, Some(&dres), dim, eps);
        let r64: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
        let h = 1e-5;
        for i in [0, 5, dim + 3, 2 * dim + dim - 1] {
            let (mut up, mut down) = (r64.clone(), r64.clone());
            up[i] += h;
            down[i] -= h;
            let fd = (loss(&up, &w) - loss(&down, &w)) / (2.0 * h);
            assert!(
                (fd - dx[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "dx[{i}]: {fd} vs {}",
                dx[i]
            );
        }
        for j in [0, 7, dim - 1] {
            let hw = 1.0 / 1024.0;
            let (mut up, mut down) = (w.clone(), w.clone());
            up[j] += hw;
            down[j] -= hw;
            let fd = (loss(&r64, &up) - loss(&r64, &down)) / (2.0 * f64::from(hw));
            assert!(
                (fd - dw[j]).abs() < 1e-6 * (1.0 + fd.abs()),
                "dw[{j}]: {fd} vs {}",
                dw[j]
            );
        }
    }
}
