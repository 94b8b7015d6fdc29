//! `gemm_bf16` at a problem's sizes: parameters `m, n, k`, inputs A (m×k) and B (n×k), output C (m×n),
//! the f64 reference `A·Bᵀ` and a fixed tolerance.

use super::{build, GemmConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, round_up, KernelProblem, Launch, Plan, Problem, Reference,
    STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// GEMM's fixed bound on `rel_err`: bf16 output rounding alone is a relative error of up to 2^-9 per
/// element and f32 accumulation adds about √k·2^-24; 1e-2 leaves room for both at any size a run
/// allows and catches any indexing mistake (which gives errors of order 1). The GEMM's error does not
/// depend on the scale of its inputs, so no baseline is needed.
pub const TOLERANCE: f64 = 1e-2;

/// The problem definition the registry hands out for `gemm_bf16`.
#[derive(Debug)]
pub struct GemmProblem;

/// The configuration a run on `target` builds: `p.gemm` on the CPU, the GPU's own elsewhere.
fn config(p: &Problem, target: Target) -> GemmConfig {
    match target.gpu() {
        Some(gpu) => GemmConfig::for_gpu(gpu),
        None => p.gemm,
    }
}

impl KernelProblem for GemmProblem {
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError> {
        Ok(Launch {
            params: vec![param("m", p.m)?, param("n", p.n)?, param("k", p.k)?],
            inputs: vec![elements("A", &[p.m, p.k])?, elements("B", &[p.n, p.k])?],
            output: elements("C", &[p.m, p.n])?,
        })
    }

    fn plan(&self, p: &Problem, target: Target) -> Result<Plan, KernelError> {
        let name = "gemm_bf16";
        positive(name, &[("m", p.m), ("n", p.n), ("k", p.k)])?;
        let cfg = config(p, target);
        let (block, k_step) = (u64::from(cfg.block), u64::from(cfg.k_step));
        budget::check_tile_side(name, "block", block)?;
        budget::check_tile_side(name, "k_step", k_step)?;
        let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
        let inputs = budget::sum(&[budget::product(&[m, k]), budget::product(&[n, k])]);
        let output = budget::product(&[m, n]);
        let bytes = budget::sum(&[
            // the inputs and their snapshot
            inputs.and_then(|x| x.checked_mul(2 * 4)),
            // output, pending stores, f64 reference
            output.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8)),
        ]);
        let what = format!("gemm_bf16 at m={m} n={n} k={k}");
        budget::check_host_bytes(&what, bytes)?;
        let padded = [round_up(m, block), round_up(n, block), round_up(k, k_step)];
        let work = padded
            .iter()
            .try_fold(1u64, |acc, x| x.and_then(|x| acc.checked_mul(x)));
        Ok(Plan {
            launch: self.launch(p)?,
            what,
            work,
            shape: serde_json::json!({
                "m": p.m, "n": p.n, "k": p.k, "block": cfg.block, "k_step": cfg.k_step,
            }),
        })
    }

    fn build(&self, p: &Problem, target: Target) -> Result<Kernel, KernelError> {
        build(&config(p, target))
    }

    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference {
        Reference {
            values: reference::gemm_abt(&inputs[0], &inputs[1], p.m, p.n, p.k),
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}
