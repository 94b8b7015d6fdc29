//! `layernorm` and `layernorm_bwd` at a problem's sizes: parameters `rows, seed_lo, seed_hi,
//! offset_lo, offset_hi`; the f64 references with the mask drawn from the Philox stream, and a fixed
//! tolerance.
//!
//! * `layernorm`: inputs `x`, `residual` (rows × D), `weight`, `bias` (D), output `out[2, rows, D]`.
//! * `layernorm_bwd`: inputs `dy`, `dh` (the gradients of the two output planes), `x`, `residual`
//!   (rows × D), `weight` (D); outputs `dx`, `dresidual` (rows × D), `dweight`, `dbias` (D), in two
//!   launches ([`super::bwd::build_bwd`] writes `dx`, `dresidual` and the scratches,
//!   [`super::bwd::build_dweight`] sums them).

use super::bwd::{build_bwd, build_dweight, parts_at};
use super::{build, LayerNormConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings,
    Stage, STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::rows::{NormShape, RowLoop, RowStrides};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// Layernorm's bound on `rel_err`: the bf16 rounding of both outputs is at most 2^-9 relative per
/// element and the f32 statistics add far less; an indexing mistake or a wrong mask gives errors of
/// order 0.1 to 1.
pub const TOLERANCE: f64 = 1e-2;

/// A `layernorm` problem: its rows, row length and dropout, and the epsilon added to the variance
/// (`None`: the kernel's default, 1e-5).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerNormProblem {
    pub norm: NormShape,
    pub eps: Option<f32>,
    /// The row strides of the inputs ([`FWD_STRIDED`] or [`BWD_STRIDED`]), read in place; dense by
    /// default.
    pub strides: RowStrides,
    pub run: RunSettings,
    /// The backward reads the forward's `h` in place of `x` and `residual`
    /// ([`LayerNormConfig::from_h`]; problem argument `from_h`): inputs `dy`, `dh`, `h`, `weight`;
    /// outputs `dx` (with dropout only: without, it is `dresidual`), `dresidual`, `dweight`, `dbias`.
    pub from_h: bool,
}

/// The forward's inputs that take a row stride (`{name}_row_stride`).
pub const FWD_STRIDED: [&str; 2] = ["x", "residual"];
/// The backward's inputs that take a row stride (`{name}_row_stride`).
pub const BWD_STRIDED: [&str; 4] = ["dy", "dh", "x", "residual"];
/// The backward's inputs that take a row stride when it reads `h` ([`LayerNormProblem::from_h`]).
pub const BWD_H_STRIDED: [&str; 3] = ["dy", "dh", "h"];

/// A `layernorm_bwd` problem: the forward's sizes and settings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerNormBwdProblem(pub LayerNormProblem);

impl LayerNormProblem {
    /// The problem `a` names: `rows`, `norm_dim`, `p`, `dropout_seed`, `offset`, `eps` (and the run
    /// settings), `{t}_row_stride` for each tensor `t` of `strided`; the others default.
    pub fn from_args(
        a: &NamedArgs,
        strided: &[&'static str],
        variants: &[&'static str],
    ) -> Result<LayerNormProblem, KernelError> {
        let d = NormShape::default();
        Ok(LayerNormProblem {
            norm: NormShape {
                rows: a.size_or("rows", d.rows)?,
                dim: a.size_or("norm_dim", d.dim)?,
                p: a.f32_or("p", d.p)?,
                dropout_seed: a.u64_or("dropout_seed", d.dropout_seed)?,
                offset: a.u64_or("offset", d.offset)?,
            },
            eps: a.opt_f32_or("eps", None)?,
            strides: RowStrides::from_args(a, strided)?,
            run: RunSettings::from_args(a, variants)?,
            from_h: false,
        })
    }

    /// The buffer of `[rows, D]` input `t`: its span in its row stride.
    fn span(&self, t: &str) -> Result<usize, KernelError> {
        self.strides.span(t, self.norm.rows, self.norm.dim)
    }

    /// Input `t` gathered into dense rows.
    fn dense(&self, t: &str, data: &[f32]) -> Vec<f32> {
        self.strides.gather(t, data, self.norm.rows, self.norm.dim)
    }
}

/// The registry's parser of `layernorm`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(LayerNormProblem::from_args(a, &FWD_STRIDED, &[])?))
}

/// The registry's parser of `layernorm_bwd`'s problem.
pub fn parse_bwd(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    let from_h = a.flag_or("from_h", false)?;
    let strided: &[&'static str] = if from_h { &BWD_H_STRIDED } else { &BWD_STRIDED };
    Ok(Box::new(LayerNormBwdProblem(LayerNormProblem {
        from_h,
        ..LayerNormProblem::from_args(a, strided, &[crate::rows::DWEIGHT])?
    })))
}

/// The configuration a run on `target` builds: the target's wave width (32 lanes on the CPU).
pub fn config(p: &LayerNormProblem, target: Target) -> LayerNormConfig {
    let dim = u32::try_from(p.norm.dim).unwrap_or(u32::MAX);
    let base = match target.gpu() {
        Some(gpu) => LayerNormConfig::for_gpu(gpu, dim, p.norm.p),
        None => LayerNormConfig::new(dim, p.norm.p, 32),
    };
    LayerNormConfig {
        eps: p.eps.unwrap_or(base.eps),
        strides: p.strides,
        from_h: p.from_h,
        ..base
    }
}

/// The forward's configuration: [`config`], its rows split over waves as
/// [`crate::rows::fwd_per_lane`] says (the measured default, or [`crate::rows::FWD_SPLIT_VAR`]'s
/// override for a measurement).
pub fn fwd_config(p: &LayerNormProblem, target: Target) -> Result<LayerNormConfig, KernelError> {
    let cfg = config(p, target);
    let split = crate::rows::FwdSplit::OneWaveUpTo1024;
    let per_lane = crate::rows::fwd_per_lane(cfg.dim, cfg.lanes, split)?;
    let w = crate::rows::waves_per_row_at(cfg.dim, cfg.lanes, per_lane);
    Ok(LayerNormConfig {
        waves_per_row: w,
        waves: crate::rows::block_waves(w),
        ..cfg
    })
}

/// Registers the backward's first launch takes on sm_90a at two blocks per SM without prefetch and
/// with 32-bit offsets, zero spills (NVRTC, crates/kittens-runtime/tests/norm_index32.rs: 71 at
/// D = 3080 without dropout, 72 with; D = 4096 spills at the 64 a 512-thread pair leaves).
const PAIRED_REGISTERS: u32 = 72;

/// The narrowest row the backward runs as a pair: below it a block is a few waves (D = 768: 192
/// threads), several fit an SM unpaired, and the pair only gives up the prefetch — it ran slower on
/// the H200 (docs/performance.md, "rmsnorm and swiglu").
const PAIRED_MIN_DIM: u32 = 1024;

/// The narrowest row whose backward takes every sum of a row at one barrier by default
/// ([`RowLoop::one_sum`]): on the H200 at 16384 rows, 1.02× and 1.07× at D = 4096 and 8192, 1.00× and
/// 0.99× (paired) at 768 and 3080, where the two-pass variance is kept (docs/performance.md, "rmsnorm and
/// swiglu").
const ONE_SUM_MIN_DIM: u32 = 4096;

/// The backward's configuration on `target` (the forward's) and how its first launch walks the rows
/// (with [`crate::rows::ROW_LOOP_VAR`]'s override for a measurement).
pub fn bwd_config(
    p: &LayerNormProblem,
    target: Target,
) -> Result<(LayerNormConfig, RowLoop), KernelError> {
    let mut cfg = config(p, target);
    // The interpreter runs what 32-lane waves refuse (dropout past 4096) on 64-lane waves, as AMD does.
    if target.gpu().is_none() && cfg.p > 0.0 && cfg.dim > super::bwd::MAX_DIM_32_LANES_DROPOUT {
        cfg = LayerNormConfig {
            eps: cfg.eps,
            strides: cfg.strides,
            from_h: cfg.from_h,
            ..LayerNormConfig::new(cfg.dim, cfg.p, 64)
        };
    }
    let lp = RowLoop::for_split(target, (&mut cfg.waves, &mut cfg.waves_per_row))?
        .index32_for(p.norm.rows, cfg.strides.widest(cfg.dim as usize))
        .one_sum_where(target, cfg.dim >= ONE_SUM_MIN_DIM)
        .stage_where(target, cfg.dim >= crate::rows::STAGED_MIN_DIM);
    let lp = if cfg.dim >= PAIRED_MIN_DIM {
        lp.pair_where_it_fits(target, cfg.waves * cfg.lanes, cfg.slice(), PAIRED_REGISTERS)
    } else {
        lp
    };
    Ok((cfg, lp))
}

/// A 64-bit seed or offset as the kernel's two 32-bit word parameters `[low, high]`, each the word's
/// bit pattern as a signed 32-bit value (what a device launch passes).
pub fn words(v: u64) -> [i64; 2] {
    [
        i64::from(v as u32 as i32),
        i64::from((v >> 32) as u32 as i32),
    ]
}

/// The parameters both directions take: `rows`, then the seed's and the offset's words.
fn params(p: &LayerNormProblem) -> Result<Vec<i64>, KernelError> {
    Ok([param("rows", p.norm.rows)?]
        .into_iter()
        .chain(words(p.norm.dropout_seed))
        .chain(words(p.norm.offset))
        .collect())
}

impl KernelProblem for LayerNormProblem {
    fn kernel(&self) -> &'static str {
        "layernorm"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let (rows, d) = (p.norm.rows, p.norm.dim);
        elements("x", &[rows, d])?;
        Ok(Launch {
            params: params(p)?,
            inputs: vec![p.span("x")?, p.span("residual")?, d, d],
            outputs: vec![elements("out", &[2, rows, d])?],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let name = "layernorm";
        positive(name, &[("rows", p.norm.rows), ("dim", p.norm.dim)])?;
        // The configuration's checks (D range and multiple of 8, p) before any size is used.
        build(&fwd_config(p, target)?)?;
        let (rows, d) = (p.norm.rows as u64, p.norm.dim as u64);
        let m = budget::product(&[rows, d]);
        let bytes = budget::sum(&[
            // inputs and their snapshot
            m.and_then(|x| x.checked_mul(2 * 2 * 4)),
            // two output planes: values, pending stores, f64 reference
            m.and_then(|x| x.checked_mul(2 * (4 + STORE_BYTES + 8))),
        ]);
        let what = format!("layernorm at rows={rows} dim={d}");
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch: self.launch()?,
            what,
            // Memory-bound: count one unit of work per element read.
            work: m,
            shape: serde_json::json!({ "norm": p.norm, "config": fwd_config(p, target)? }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        build(&fwd_config(p, target)?)
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let eps = f64::from(config(p, Target::Cpu).eps);
        Reference {
            values: reference::layernorm(
                &p.dense("x", &inputs[0]),
                &p.dense("residual", &inputs[1]),
                &inputs[2],
                &inputs[3],
                &p.norm,
                eps,
            ),
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

impl KernelProblem for LayerNormBwdProblem {
    fn kernel(&self) -> &'static str {
        "layernorm_bwd"
    }

    fn settings(&self) -> &RunSettings {
        &self.0.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = &self.0;
        let (rows, d) = (p.norm.rows, p.norm.dim);
        let m = elements("dy", &[rows, d])?;
        let (inputs, outputs) = if p.from_h {
            let ins = vec![p.span("dy")?, p.span("dh")?, p.span("h")?, d];
            let outs = if p.norm.p > 0.0 { vec![m, m] } else { vec![m] };
            (ins, outs)
        } else {
            let ins = ["dy", "dh", "x", "residual"].map(|t| p.span(t));
            let mut ins = ins.into_iter().collect::<Result<Vec<_>, _>>()?;
            ins.push(d);
            (ins, vec![m, m])
        };
        Ok(Launch {
            params: params(p)?,
            inputs,
            outputs: outputs.into_iter().chain([d, d]).collect(),
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = &self.0;
        positive(
            "layernorm_bwd",
            &[("rows", p.norm.rows), ("dim", p.norm.dim)],
        )?;
        let (cfg, lp) = bwd_config(p, target)?;
        super::bwd::check(&cfg)?;
        let (rows, d) = (p.norm.rows, p.norm.dim);
        let what = format!("layernorm_bwd at rows={rows} dim={d}");
        let scratch = scratch_len(&cfg, &lp, p)?;
        let m = budget::product(&[rows as u64, d as u64]);
        let bytes = budget::sum(&[
            // four inputs and their snapshot
            m.and_then(|x| x.checked_mul(4 * 2 * 4)),
            // dx and dresidual: values, pending stores, f64 reference
            m.and_then(|x| x.checked_mul(2 * (4 + STORE_BYTES + 8))),
            // the two scratches (values, pending stores, read back)
            (scratch as u64).checked_mul(2 * (4 + STORE_BYTES + 4)),
        ]);
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch: self.launch()?,
            what,
            work: m,
            shape: serde_json::json!({
                "norm": p.norm, "config": cfg, "row_loop": lp,
                "partials": [d, parts_at(&cfg, &lp, rows)],
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

    /// `dx`, `dresidual` and the scratches, then `dweight` and `dbias` from the scratches (passed by
    /// name).
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = &self.0;
        let (cfg, lp) = bwd_config(p, target)?;
        let l = &plan.launch;
        let scratch = scratch_len(&cfg, &lp, p)?;
        // The rows' outputs (`dx` and/or `dresidual`), then `dweight` and `dbias`.
        let n = l.outputs.len() - 2;
        Ok(vec![
            Stage {
                kernel: build_bwd(&cfg, &lp)?,
                launch: Launch {
                    params: l.params.clone(),
                    inputs: l.inputs.clone(),
                    outputs: l.outputs[..n]
                        .iter()
                        .copied()
                        .chain([scratch, scratch])
                        .collect(),
                },
            },
            Stage {
                kernel: build_dweight(&cfg, &lp)?,
                launch: Launch {
                    params: l.params[..1].to_vec(),
                    inputs: vec![scratch, scratch],
                    outputs: l.outputs[n..].to_vec(),
                },
            },
        ])
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = &self.0;
        let eps = f64::from(config(p, Target::Cpu).eps);
        let (dy, dh) = (p.dense("dy", &inputs[0]), p.dense("dh", &inputs[1]));
        let values = if p.from_h {
            // h = residual + keep·0: the reference's sum is h itself, its dx still keep·dh.
            let h = p.dense("h", &inputs[2]);
            let zero = vec![0.0; h.len()];
            let all = reference::layernorm_backward(&dy, &dh, &zero, &h, &inputs[3], &p.norm, eps);
            // Without dropout dx is dresidual, not an output of its own.
            let skip = if p.norm.p > 0.0 { 0 } else { h.len() };
            all[skip..].to_vec()
        } else {
            let (x, r) = (p.dense("x", &inputs[2]), p.dense("residual", &inputs[3]));
            reference::layernorm_backward(&dy, &dh, &x, &r, &inputs[4], &p.norm, eps)
        };
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

/// Elements of each scratch of the backward (`D × parts`).
fn scratch_len(
    cfg: &LayerNormConfig,
    lp: &RowLoop,
    p: &LayerNormProblem,
) -> Result<usize, KernelError> {
    let what = format!("layernorm_bwd at rows={}", p.norm.rows);
    lp.scratch_len(&what, p.norm.rows, cfg.rows_per_block(), p.norm.dim)
}
