//! `rotary` at a problem's sizes: the shape is the attention's (`attn`: batch, heads, seq, dim, layout),
//! the form `interleaved`; parameters `batch, heads, seq`, inputs `x` and the `[seq, dim/2]` tables,
//! output in `x`'s layout; the f64 reference and a fixed tolerance.

use super::{build, RotaryConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, Plan, Problem, Reference, STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// Rotary's bound on `rel_err`: one bf16 rounding of each output (2^-9 relative) over exact products;
/// a wrong pairing or table row gives errors of order 1.
pub const TOLERANCE: f64 = 1e-2;

/// The problem definition the registry hands out for `rotary`.
#[derive(Debug)]
pub struct RotaryProblem;

/// The backward's (`rotary_bwd`): the same tensors as the forward's, `dy` for `x` and `dx` for `out`,
/// rotated by −θ.
#[derive(Debug)]
pub struct RotaryBwdProblem;

/// The configuration of a run (the same on every target: the program has no target-specific tiles).
pub fn config(p: &Problem) -> RotaryConfig {
    RotaryConfig::new(
        u32::try_from(p.attn.dim).unwrap_or(u32::MAX),
        p.attn.layout,
        p.interleaved,
    )
}

impl KernelProblem for RotaryBwdProblem {
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError> {
        RotaryProblem.launch(p)
    }

    fn plan(&self, p: &Problem, target: Target) -> Result<Plan, KernelError> {
        let plan = RotaryProblem.plan(p, target)?;
        Ok(Plan {
            what: plan.what.replacen("rotary", "rotary_bwd", 1),
            ..plan
        })
    }

    fn build(&self, p: &Problem, _target: Target) -> Result<Kernel, KernelError> {
        build(&RotaryConfig {
            inverse: true,
            ..config(p)
        })
    }

    /// The forward's reference with the sine table negated: the rotation by −θ.
    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference {
        let neg: Vec<f32> = inputs[2].iter().map(|v| -v).collect();
        RotaryProblem.reference(p, &[inputs[0].clone(), inputs[1].clone(), neg])
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

impl KernelProblem for RotaryProblem {
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError> {
        let sh = p.attn;
        let x = elements("x", &[sh.batch, sh.heads, sh.seq, sh.dim])?;
        let table = elements("cos", &[sh.seq, sh.dim / 2])?;
        Ok(Launch {
            params: vec![
                param("batch", sh.batch)?,
                param("heads", sh.heads)?,
                param("seq", sh.seq)?,
            ],
            inputs: vec![x, table, table],
            outputs: vec![x],
        })
    }

    fn plan(&self, p: &Problem, _target: Target) -> Result<Plan, KernelError> {
        let sh = p.attn;
        positive(
            "rotary",
            &[
                ("batch", sh.batch),
                ("heads", sh.heads),
                ("seq", sh.seq),
                ("dim", sh.dim),
            ],
        )?;
        build(&config(p))?;
        let u = |x: usize| x as u64;
        let x = budget::product(&[u(sh.batch), u(sh.heads), u(sh.seq), u(sh.dim)]);
        let bytes = budget::sum(&[
            x.and_then(|x| x.checked_mul(2 * 4 + 4 + STORE_BYTES + 8)),
            budget::product(&[u(sh.seq), u(sh.dim), 2 * 4]),
        ]);
        let what = format!(
            "rotary at batch={} heads={} seq={} dim={}",
            sh.batch, sh.heads, sh.seq, sh.dim
        );
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch: self.launch(p)?,
            what,
            work: x,
            shape: serde_json::json!({
                "batch": sh.batch, "heads": sh.heads, "seq": sh.seq, "dim": sh.dim,
                "layout": sh.layout, "interleaved": p.interleaved,
            }),
        })
    }

    fn build(&self, p: &Problem, _target: Target) -> Result<Kernel, KernelError> {
        build(&config(p))
    }

    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference {
        Reference {
            values: reference::rotary(&inputs[0], &inputs[1], &inputs[2], &p.attn, p.interleaved),
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}
