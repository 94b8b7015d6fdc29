//! `rotary` at a problem's sizes: the shape is the attention's (`attn`: batch, heads, seq, dim, layout),
//! the form `interleaved`; parameters `batch, heads, seq`, inputs `x` and the `[seq, dim/2]` tables,
//! output in `x`'s layout; the f64 reference and a fixed tolerance.

use super::{build, RotaryConfig};
use crate::attn::AttnShape;
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings,
    STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// Rotary's bound on `rel_err`: one bf16 rounding of each output (2^-9 relative) over exact products;
/// a wrong pairing or table row gives errors of order 1.
pub const TOLERANCE: f64 = 1e-2;

/// A `rotary` problem: `heads` heads of `dim` at `seq` positions in `layout` (`heads_kv` unused), and
/// the interleaved (GPT-J) pairing instead of half rotation (GPT-NeoX).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RotaryProblem {
    pub attn: AttnShape,
    pub interleaved: bool,
    pub run: RunSettings,
}

/// A `rotary_bwd` problem: the same tensors as the forward's, `dy` for `x` and `dx` for `out`,
/// rotated by −θ.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RotaryBwdProblem(pub RotaryProblem);

impl RotaryProblem {
    /// The problem `a` names: `batch`, `heads`, `seq`, `dim`, `layout`, `interleaved` (and the run
    /// settings).
    pub fn from_args(a: &NamedArgs) -> Result<RotaryProblem, KernelError> {
        Ok(RotaryProblem {
            attn: AttnShape::from_args(a, AttnShape::default())?,
            interleaved: a.flag_or("interleaved", false)?,
            run: RunSettings::from_args(a, &[])?,
        })
    }
}

/// The registry's parser of `rotary`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(RotaryProblem::from_args(a)?))
}

/// The registry's parser of `rotary_bwd`'s problem.
pub fn parse_bwd(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(RotaryBwdProblem(RotaryProblem::from_args(a)?)))
}

/// The configuration of a run (the same on every target: the program has no target-specific tiles).
pub fn config(p: &RotaryProblem) -> RotaryConfig {
    RotaryConfig::new(
        u32::try_from(p.attn.dim).unwrap_or(u32::MAX),
        p.attn.layout,
        p.interleaved,
    )
}

impl KernelProblem for RotaryBwdProblem {
    fn kernel(&self) -> &'static str {
        "rotary_bwd"
    }

    fn settings(&self) -> &RunSettings {
        &self.0.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = &self.0;
        p.launch()
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = &self.0;
        let plan = p.plan(target)?;
        Ok(Plan {
            what: plan.what.replacen("rotary", "rotary_bwd", 1),
            ..plan
        })
    }

    fn build(&self, _target: Target) -> Result<Kernel, KernelError> {
        let p = &self.0;
        build(&RotaryConfig {
            inverse: true,
            ..config(p)
        })
    }

    /// The forward's reference with the sine table negated: the rotation by −θ.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = &self.0;
        let neg: Vec<f32> = inputs[2].iter().map(|v| -v).collect();
        p.reference(&[inputs[0].clone(), inputs[1].clone(), neg])
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

impl KernelProblem for RotaryProblem {
    fn kernel(&self) -> &'static str {
        "rotary"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
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

    fn plan(&self, _target: Target) -> Result<Plan, KernelError> {
        let p = self;
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
            launch: self.launch()?,
            what,
            work: x,
            shape: serde_json::json!({
                "batch": sh.batch, "heads": sh.heads, "seq": sh.seq, "dim": sh.dim,
                "layout": sh.layout, "interleaved": p.interleaved,
            }),
        })
    }

    fn build(&self, _target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        build(&config(p))
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
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
