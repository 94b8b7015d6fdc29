//! `layernorm` at a problem's sizes: parameters `rows, seed_lo, seed_hi, offset_lo, offset_hi`, inputs `x`, `residual` (rows × D),
//! `weight`, `bias` (D), output `out[2, rows, D]`; the f64 reference with the mask drawn from the Philox
//! stream, and a fixed tolerance.

use super::{build, LayerNormConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, Plan, Problem, Reference, STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// Layernorm's bound on `rel_err`: the bf16 rounding of both outputs is at most 2^-9 relative per
/// element and the f32 statistics add far less; an indexing mistake or a wrong mask gives errors of
/// order 0.1 to 1.
pub const TOLERANCE: f64 = 1e-2;

/// The problem definition the registry hands out for `layernorm`.
#[derive(Debug)]
pub struct LayerNormProblem;

/// The configuration a run on `target` builds: the target's wave width (32 lanes on the CPU).
pub fn config(p: &Problem, target: Target) -> LayerNormConfig {
    let dim = u32::try_from(p.norm.dim).unwrap_or(u32::MAX);
    let base = match target.gpu() {
        Some(gpu) => LayerNormConfig::for_gpu(gpu, dim, p.norm.p),
        None => LayerNormConfig::new(dim, p.norm.p, 32),
    };
    LayerNormConfig {
        eps: p.eps.unwrap_or(base.eps),
        ..base
    }
}

/// A 64-bit seed or offset as the kernel's two 32-bit word parameters `[low, high]`, each the word's
/// bit pattern as a signed 32-bit value (what a device launch passes).
pub fn words(v: u64) -> [i64; 2] {
    [
        i64::from(v as u32 as i32),
        i64::from((v >> 32) as u32 as i32),
    ]
}

impl KernelProblem for LayerNormProblem {
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError> {
        let (rows, d) = (p.norm.rows, p.norm.dim);
        let m = elements("x", &[rows, d])?;
        Ok(Launch {
            params: [param("rows", rows)?]
                .into_iter()
                .chain(words(p.norm.dropout_seed))
                .chain(words(p.norm.offset))
                .collect(),
            inputs: vec![m, m, d, d],
            outputs: vec![elements("out", &[2, rows, d])?],
        })
    }

    fn plan(&self, p: &Problem, target: Target) -> Result<Plan, KernelError> {
        let name = "layernorm";
        positive(name, &[("rows", p.norm.rows), ("dim", p.norm.dim)])?;
        // The configuration's checks (D range and multiple of 8, p) before any size is used.
        build(&config(p, target))?;
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
            launch: self.launch(p)?,
            what,
            // Memory-bound: count one unit of work per element read.
            work: m,
            shape: serde_json::json!({ "norm": p.norm, "config": config(p, target) }),
        })
    }

    fn build(&self, p: &Problem, target: Target) -> Result<Kernel, KernelError> {
        build(&config(p, target))
    }

    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference {
        let eps = f64::from(config(p, Target::Cpu).eps);
        Reference {
            values: reference::layernorm(
                &inputs[0], &inputs[1], &inputs[2], &inputs[3], &p.norm, eps,
            ),
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}
