//! Running a kernel on the CPU interpreter on random inputs and checking it against its f64 reference —
//! what `kittens run --backend cpu` and the tests do.
//!
//! Order of a run: the problem is validated and its sizes checked against the CPU run's budget
//! ([`crate::budget`]) before anything is built or allocated; the inputs are drawn and snapshotted; the
//! interpreter runs (it refuses any write to a read-only tensor); the f64 reference — and for attention
//! the PyTorch-style bf16 baseline — is computed from the snapshot, never from the tensors the kernel
//! ran on; the error is judged ([`judge`]).

use crate::attn_fwd::{AttnConfig, AttnLayout};
use crate::budget;
use crate::gemm_bf16::{GemmConfig, GemmTypes, Scales};
use crate::reference::{self, AttnShape, ErrorReport, Verdict};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::{interp, Kernel};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// Problem sizes and tile choices for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub attn: AttnShape,
    pub causal: bool,
    pub gemm: GemmConfig,
    /// Tile sizes of the attention kernel; `dim` is taken from `attn.dim`.
    pub attn_cfg: AttnConfig,
    pub seed: u64,
    /// The random inputs (uniform in [-1, 1)) are multiplied by this before rounding to bf16; large
    /// scales give attention large logits (`8` at head dimension 64 gives logits of about ±64).
    pub input_scale: f32,
    /// A fixed bound on `rel_err` replacing the kernel's own ([`tolerance`]).
    pub tolerance: Option<f64>,
}

impl Default for Problem {
    fn default() -> Self {
        Problem {
            m: 256,
            n: 256,
            k: 192,
            attn: AttnShape {
                batch: 1,
                heads: 4,
                heads_kv: 2,
                seq: 256,
                dim: 64,
                layout: AttnLayout::Bshd,
            },
            causal: false,
            gemm: GemmConfig::default(),
            attn_cfg: AttnConfig {
                q_rows: 16,
                kv_block: 32,
                ..AttnConfig::default()
            },
            seed: 0,
            input_scale: 1.0,
            tolerance: None,
        }
    }
}

/// How a kernel's error is judged when no tolerance is given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// `rel_err` at most this.
    Fixed(f64),
    /// [`reference::check_rule`] on `rel_err` and on `max_rel`, against the kernel's baseline.
    Rule,
}

/// GEMM's fixed bound on `rel_err`: bf16 output rounding alone is a relative error of up to 2^-9 per
/// element and f32 accumulation adds about √k·2^-24; 1e-2 leaves room for both at any size the CPU run
/// allows and catches any indexing mistake (which gives errors of order 1).
pub const GEMM_TOLERANCE: f64 = 1e-2;

/// The kernel's own tolerance: attention is judged by the test rule against its bf16 baseline, because
/// its error grows with the logits (a fixed bound either fails good kernels at large logits or passes
/// bad ones at small); the GEMM's error does not depend on the scale of its inputs.
pub fn tolerance(kernel: &str) -> Tolerance {
    match kernel {
        "attn_fwd" => Tolerance::Rule,
        _ => Tolerance::Fixed(GEMM_TOLERANCE),
    }
}

/// One judged error measure.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Check {
    /// `rel_err` or `max_rel` (see [`ErrorReport`]).
    pub metric: &'static str,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Judges `error` for `kernel`: against `tolerance` when given (on `rel_err`), else by the kernel's own
/// [`tolerance`]; the rule needs the `baseline`'s error against the same reference (a missing baseline
/// fails). Every backend's run reports these checks.
pub fn judge(
    kernel: &str,
    error: &ErrorReport,
    baseline: Option<&ErrorReport>,
    tolerance_override: Option<f64>,
) -> Vec<Check> {
    let check = |metric, verdict| Check { metric, verdict };
    match (tolerance_override, tolerance(kernel)) {
        (Some(t), _) => vec![check("rel_err", reference::check_fixed(error.rel_err, t))],
        (None, Tolerance::Fixed(t)) => {
            vec![check("rel_err", reference::check_fixed(error.rel_err, t))]
        }
        (None, Tolerance::Rule) => {
            let nan = ErrorReport {
                rel_err: f64::NAN,
                max_rel: f64::NAN,
                mean_rel: f64::NAN,
            };
            let b = baseline.unwrap_or(&nan);
            vec![
                check("rel_err", reference::check_rule(error.rel_err, b.rel_err)),
                check("max_rel", reference::check_rule(error.max_rel, b.max_rel)),
            ]
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub kernel: String,
    pub shape: serde_json::Value,
    #[serde(flatten)]
    pub error: ErrorReport,
    /// Error of the PyTorch-style bf16 computation against the same f64 reference (attention:
    /// `reference::attention_bf16_baseline`); the test rule's yardstick.
    pub baseline: Option<ErrorReport>,
    /// Every check passed.
    pub passed: bool,
    /// The largest `rel_err` that passes (the bound of the `rel_err` check).
    pub tolerance: f64,
    pub checks: Vec<Check>,
    pub input_scale: f32,
    /// Attention: the largest `|q·k|/√d` the inputs produced (`reference::attention_with_logits`).
    pub max_abs_logit: Option<f64>,
    pub blocks: u64,
    pub waves_per_block: u32,
    pub interp_seconds: f64,
    pub reference_seconds: f64,
}

/// Uniform values in [-1, 1) rounded to `dtype` (so the reference sees exactly what the kernel stores).
pub fn random(rng: &mut SmallRng, len: usize, dtype: DType) -> Vec<f32> {
    random_scaled(rng, len, dtype, 1.0)
}

/// Uniform values in [-scale, scale) rounded to `dtype`.
pub fn random_scaled(rng: &mut SmallRng, len: usize, dtype: DType, scale: f32) -> Vec<f32> {
    (0..len)
        .map(|_| round(rng.gen_range(-1.0f32..1.0) * scale, dtype, Rounding::Rtne))
        .collect()
}

fn attn_config(p: &Problem) -> AttnConfig {
    let sh = p.attn;
    AttnConfig {
        dim: u32::try_from(sh.dim).unwrap_or(u32::MAX),
        causal: p.causal,
        layout: sh.layout,
        ..p.attn_cfg
    }
}

/// The GEMM configuration `run` builds for kernel `name`: `p.gemm` as given for `gemm_bf16`; for
/// `gemm_fp8` the same tiles and schedule with fp8 types (OCP e4m3 and per-tensor scales unless
/// `p.gemm.types` already names fp8 operands).
pub fn gemm_config(name: &str, p: &Problem) -> GemmConfig {
    match name {
        "gemm_fp8" if !p.gemm.types.input.is_fp8() => GemmConfig {
            types: GemmTypes::fp8(DType::Fp8E4m3),
            ..p.gemm
        },
        _ => p.gemm,
    }
}

/// The kernel `run` executes for `p`.
pub fn build(name: &str, p: &Problem) -> Result<Kernel, KernelError> {
    match name {
        "gemm_bf16" | "gemm_fp8" => crate::gemm_bf16::build(&gemm_config(name, p)),
        "attn_fwd" => crate::attn_fwd::build(&attn_config(p)),
        _ => Err(KernelError::Unknown(name.into())),
    }
}

/// What a validated run allocates: kernel parameters, input lengths, output length.
struct Plan {
    params: Vec<i64>,
    inputs: Vec<usize>,
    output: usize,
}

/// Bytes the interpreter holds per output element until the blocks' stores are applied.
const STORE_BYTES: u64 = std::mem::size_of::<(usize, usize, f32)>() as u64;

fn positive(what: &str, dims: &[(&str, usize)]) -> Result<(), KernelError> {
    match dims.iter().find(|(_, v)| *v == 0) {
        // An empty problem would "pass" with zero error.
        Some((name, _)) => Err(KernelError::Problem(format!(
            "{what}: {name} must be positive"
        ))),
        None => Ok(()),
    }
}

fn param(name: &str, v: u64) -> Result<i64, KernelError> {
    i64::try_from(v).map_err(|_| KernelError::Problem(format!("{name} {v} exceeds 2^63 - 1")))
}

fn round_up(x: u64, to: u64) -> Option<u64> {
    x.div_ceil(to).checked_mul(to)
}

/// Checks `p` for kernel `name` against the CPU run's budget ([`crate::budget`]) — tile sides, host
/// bytes, the interpreter's work — with checked arithmetic, before anything is built or allocated.
pub fn validate(name: &str, p: &Problem) -> Result<(), KernelError> {
    plan(name, p).map(|_| ())
}

fn plan(name: &str, p: &Problem) -> Result<Plan, KernelError> {
    budget::check_input_scale(p.input_scale)?;
    if let Some(t) = p.tolerance {
        if !(t.is_finite() && t > 0.0) {
            return Err(KernelError::Problem(format!(
                "tolerance {t} must be finite and positive"
            )));
        }
    }
    let u = |x: usize| x as u64;
    match name {
        "gemm_bf16" | "gemm_fp8" => {
            let (m, n, k) = (u(p.m), u(p.n), u(p.k));
            positive(name, &[("m", p.m), ("n", p.n), ("k", p.k)])?;
            let (block, k_step) = (u64::from(p.gemm.block), u64::from(p.gemm.k_step));
            budget::check_tile_side(name, "block", block)?;
            budget::check_tile_side(name, "k_step", k_step)?;
            let inputs = budget::sum(&[budget::product(&[m, k]), budget::product(&[n, k])]);
            let output = budget::product(&[m, n]);
            let bytes = budget::sum(&[
                inputs.and_then(|x| x.checked_mul(2 * 4)),
                output.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8)),
            ]);
            let what = format!("{name} at m={m} n={n} k={k}");
            budget::check_host_bytes(&what, bytes)?;
            let padded = [round_up(m, block), round_up(n, block), round_up(k, k_step)];
            let work = padded
                .iter()
                .try_fold(1u64, |acc, x| x.and_then(|x| acc.checked_mul(x)));
            budget::check_work(&what, work)?;
            let mut inputs = vec![p.m * p.k, p.n * p.k];
            inputs.extend(match gemm_config(name, p).types.scales {
                None => vec![],
                Some(Scales::PerTensor) => vec![1, 1],
                Some(Scales::PerRowCol) => vec![p.m, p.n],
            });
            Ok(Plan {
                params: vec![param("m", m)?, param("n", n)?, param("k", k)?],
                inputs,
                output: p.m * p.n,
            })
        }
        "attn_fwd" => {
            let sh = p.attn;
            positive(
                name,
                &[
                    ("batch", sh.batch),
                    ("heads", sh.heads),
                    ("heads_kv", sh.heads_kv),
                    ("seq", sh.seq),
                    ("dim", sh.dim),
                ],
            )?;
            if !sh.heads.is_multiple_of(sh.heads_kv) {
                return Err(KernelError::Problem(format!(
                    "attn_fwd: heads_kv {} must divide heads {}",
                    sh.heads_kv, sh.heads
                )));
            }
            let (b, h, hk, s, d) = (
                u(sh.batch),
                u(sh.heads),
                u(sh.heads_kv),
                u(sh.seq),
                u(sh.dim),
            );
            let (qr, kv) = (u64::from(p.attn_cfg.q_rows), u64::from(p.attn_cfg.kv_block));
            budget::check_tile_side(name, "dim", d)?;
            budget::check_tile_side(name, "q_rows", qr)?;
            budget::check_tile_side(name, "kv_block", kv)?;
            let q = budget::product(&[b, h, s, d]);
            let kv_len = budget::product(&[b, hk, s, d]);
            let bytes = budget::sum(&[
                budget::sum(&[q, kv_len, kv_len]).and_then(|x| x.checked_mul(2 * 4)),
                // output, pending stores, f64 reference, bf16 baseline (held as f32)
                q.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 4)),
            ]);
            let what = format!("attn_fwd at batch={b} heads={h} heads_kv={hk} seq={s} dim={d}");
            budget::check_host_bytes(&what, bytes)?;
            // Every query block (8 waves × q_rows) against every key block, for Q·Kᵀ and P·V.
            let work = round_up(s, 8 * qr)
                .zip(round_up(s, kv))
                .and_then(|(pq, pk)| budget::product(&[b, h, pq, pk, d, 2]));
            budget::check_work(&what, work)?;
            let (q, kv_len) = (sh.len(sh.heads), sh.len(sh.heads_kv));
            Ok(Plan {
                params: vec![
                    param("batch", b)?,
                    param("heads", h)?,
                    param("heads_kv", hk)?,
                    param("seq", s)?,
                ],
                inputs: vec![q, kv_len, kv_len],
                output: q,
            })
        }
        _ => Err(KernelError::Unknown(name.into())),
    }
}

/// Builds kernel `name` for `p`, runs it on the interpreter on random inputs and judges its error
/// against the f64 reference of a snapshot of those inputs.
pub fn run(name: &str, p: &Problem) -> Result<RunReport, KernelError> {
    let plan = plan(name, p)?;
    let k = build(name, p)?;
    budget::check_block_state(&k)?;
    let mut rng = SmallRng::seed_from_u64(p.seed);
    // Each input in its tensor's dtype (globals are declared inputs first, in plan order); f32 tensors
    // are the GEMM's scales, drawn in [0.5, 2) so a lost or doubled scale shows.
    let inputs: Vec<Vec<f32>> = plan
        .inputs
        .iter()
        .zip(&k.globals)
        .map(|(&len, g)| match g.dtype {
            DType::F32 => (0..len).map(|_| rng.gen_range(0.5f32..2.0)).collect(),
            dt => random_scaled(&mut rng, len, dt, p.input_scale),
        })
        .collect();
    let snapshot = inputs.clone();
    let mut t = inputs;
    t.push(vec![0.0; plan.output]);
    let t0 = Instant::now();
    let stats = interp::run(&k, &plan.params, &mut t)?;
    let interp_seconds = t0.elapsed().as_secs_f64();
    let out = &t[t.len() - 1];
    let r0 = Instant::now();
    let mut max_abs_logit = None;
    let (shape, r, baseline) = match name {
        "gemm_bf16" | "gemm_fp8" => {
            let mut r = reference::gemm_abt(&snapshot[0], &snapshot[1], p.m, p.n, p.k);
            let types = gemm_config(name, p).types;
            if let Some(mode) = types.scales {
                reference::scale_rows_cols(&mut r, p.n, mode, &snapshot[2], &snapshot[3]);
            }
            let shape = serde_json::json!({
                "m": p.m, "n": p.n, "k": p.k, "block": p.gemm.block, "k_step": p.gemm.k_step,
                "schedule": k.schedule.name(), "input": types.input, "output": types.output,
                "scales": types.scales.map(|s| format!("{s:?}")),
            });
            (shape, r, None)
        }
        _ => {
            let (sh, cfg) = (p.attn, attn_config(p));
            let [q, kk, v] = [&snapshot[0], &snapshot[1], &snapshot[2]];
            let (r, logit) = reference::attention_with_logits(q, kk, v, &sh, p.causal);
            max_abs_logit = Some(logit);
            let b = reference::attention_bf16_baseline(q, kk, v, &sh, p.causal);
            let shape = serde_json::json!({"attn": sh, "causal": p.causal, "q_rows": cfg.q_rows, "kv_block": cfg.kv_block});
            let baseline = reference::compare(&b, &r);
            (shape, r, Some(baseline))
        }
    };
    let error = reference::compare(out, &r);
    let checks = judge(name, &error, baseline.as_ref(), p.tolerance);
    Ok(RunReport {
        kernel: k.name.clone(),
        shape,
        error,
        baseline,
        passed: checks.iter().all(|c| c.verdict.passed),
        tolerance: checks[0].verdict.bound,
        checks,
        input_scale: p.input_scale,
        max_abs_logit,
        blocks: stats.blocks,
        waves_per_block: stats.waves_per_block,
        interp_seconds,
        reference_seconds: r0.elapsed().as_secs_f64(),
    })
}
