//! `swiglu` and `swiglu_bwd` at a problem's sizes: `rows` rows of `F = dim`, `packed`;
//! parameter `rows`.
//!
//! * `swiglu`: inputs `gate`, `up` (`[rows, F]` each) or, packed, `x` (`[rows, 2F]`); output `out`.
//! * `swiglu_bwd`: inputs `dy`, then `gate`, `up` or, packed, `x`; outputs `dgate`, `dup` or, packed,
//!   `dx` (`[rows, 2F]`).
//!
//! The f64 references, and a fixed tolerance (each output one bf16 rounding of f32 arithmetic).

use super::{build, build_bwd, SwigluConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings,
    STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::rows::RowStrides;
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// The bound on `rel_err`: one bf16 rounding of each output (2^-9 relative) over f32 arithmetic and
/// the device's exponential; a wrong half or column gives errors of order 1.
pub const TOLERANCE: f64 = 1e-2;

/// A `swiglu` or `swiglu_bwd` problem: `rows` rows of `F = dim`; `packed`: gate and up are the two
/// halves of one `[rows, 2F]` tensor (gate first) instead of two `[rows, F]` tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwigluProblem {
    pub backward: bool,
    pub rows: usize,
    pub dim: usize,
    pub packed: bool,
    /// The row strides of the inputs ([`FWD_STRIDED`] or [`BWD_STRIDED`]; packed `x` a row of `2F`),
    /// read in place; dense by default.
    pub strides: RowStrides,
    pub run: RunSettings,
}

/// The forward's inputs that take a row stride (`{name}_row_stride`).
pub const FWD_STRIDED: [&str; 3] = ["gate", "up", "x"];
/// The backward's inputs that take a row stride (`{name}_row_stride`).
pub const BWD_STRIDED: [&str; 4] = ["dy", "gate", "up", "x"];

impl Default for SwigluProblem {
    /// The forward at odd sizes: 37 rows of 1000.
    fn default() -> Self {
        SwigluProblem {
            backward: false,
            rows: 37,
            dim: 1000,
            packed: false,
            strides: RowStrides::default(),
            run: RunSettings::default(),
        }
    }
}

/// The variant of the packed form (`kittens compile --schedule packed`): the setting `packed`.
pub const PACKED: &str = "packed";

/// The registry's parser of `swiglu`'s problem.
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(SwigluProblem::from_args(a, false)?))
}

/// The registry's parser of `swiglu_bwd`'s problem.
pub fn parse_bwd(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(SwigluProblem::from_args(a, true)?))
}

impl SwigluProblem {
    /// The problem `a` names: `rows`, `norm_dim` (F), `packed` (and the run settings).
    pub fn from_args(a: &NamedArgs, backward: bool) -> Result<SwigluProblem, KernelError> {
        let d = SwigluProblem::default();
        let run = RunSettings::from_args(a, &[PACKED])?;
        Ok(SwigluProblem {
            backward,
            rows: a.size_or("rows", d.rows)?,
            dim: a.size_or("norm_dim", d.dim)?,
            packed: a.flag_or("packed", d.packed)? || run.variant == Some(PACKED),
            strides: RowStrides::from_args(a, if backward { &BWD_STRIDED } else { &FWD_STRIDED })?,
            run,
        })
    }

    /// Input `t`'s row length: `2F` for the packed `x`, else `F`.
    fn row_len(&self, t: &str) -> usize {
        if t == "x" {
            2 * self.dim
        } else {
            self.dim
        }
    }

    /// The buffer of input `t`: its span in its row stride.
    fn span(&self, t: &str) -> Result<usize, KernelError> {
        self.strides.span(t, self.rows, self.row_len(t))
    }

    /// Input `t` gathered into dense rows.
    fn dense(&self, t: &str, data: &[f32]) -> Vec<f32> {
        self.strides.gather(t, data, self.rows, self.row_len(t))
    }

    fn name(&self) -> &'static str {
        if self.backward {
            "swiglu_bwd"
        } else {
            "swiglu"
        }
    }
}

/// The configuration a run on `target` builds: the target's wave width (32 lanes on the CPU).
/// Offsets are 32-bit ([`SwigluConfig::index32`]) where the rows, at the widest row stride of the
/// problem's tensors, span at most `kittens_ir::INDEX32_MAX_SPAN` elements.
pub fn config(p: &SwigluProblem, target: Target) -> SwigluConfig {
    let f = u32::try_from(p.dim).unwrap_or(u32::MAX);
    let row_len = if p.packed { 2 * p.dim } else { p.dim };
    let span = p.rows.checked_mul(p.strides.widest(row_len));
    SwigluConfig {
        strides: p.strides,
        index32: span.is_some_and(|n| n as u64 <= kittens_ir::INDEX32_MAX_SPAN),
        ..SwigluConfig::new(f, p.packed, target.gpu().map_or(32, |g| g.wave_width))
    }
}

/// [`config`] with what [`super::TUNE_VAR`] sets for a measurement; an error naming the variable where
/// it holds anything else.
pub fn tuned_config(p: &SwigluProblem, target: Target) -> Result<SwigluConfig, KernelError> {
    match std::env::var(super::TUNE_VAR) {
        Ok(v) => config(p, target).tuned(&v),
        Err(_) => Ok(config(p, target)),
    }
}

impl KernelProblem for SwigluProblem {
    fn kernel(&self) -> &'static str {
        self.name()
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = self;
        let m = elements("gate", &[p.rows, p.dim])?;
        let x = elements("x", &[p.rows, 2, p.dim])?;
        let (pair_in, pair_out) = if p.packed {
            (vec![p.span("x")?], vec![x])
        } else {
            (vec![p.span("gate")?, p.span("up")?], vec![m, m])
        };
        let (inputs, outputs) = if self.backward {
            ([vec![p.span("dy")?], pair_in].concat(), pair_out)
        } else {
            (pair_in, vec![m])
        };
        Ok(Launch {
            params: vec![param("rows", p.rows)?],
            inputs,
            outputs,
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let name = self.name();
        positive(name, &[("rows", p.rows), ("dim", p.dim)])?;
        self.build(target)?;
        let (rows, f) = (p.rows, p.dim);
        let what = format!("{name} at rows={rows} F={f}");
        let m = budget::product(&[rows as u64, f as u64]);
        // Forward: 2 inputs, 1 output; backward: 3 inputs, 2 outputs (of `rows × F` each).
        let (ins, outs) = if self.backward { (3, 2) } else { (2, 1) };
        let bytes = budget::sum(&[
            m.and_then(|x| x.checked_mul(ins * 2 * 4)),
            m.and_then(|x| x.checked_mul(outs * (4 + STORE_BYTES + 8))),
        ]);
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch: self.launch()?,
            what,
            work: m,
            shape: serde_json::json!({
                "rows": rows, "f": f, "packed": p.packed, "config": tuned_config(p, target)?,
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let cfg = tuned_config(self, target)?;
        if self.backward {
            build_bwd(&cfg)
        } else {
            build(&cfg)
        }
    }

    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let f = p.dim;
        let at = usize::from(self.backward);
        let names: &[&str] = if p.packed { &["x"] } else { &["gate", "up"] };
        let dense: Vec<Vec<f32>> = names
            .iter()
            .zip(&inputs[at..])
            .map(|(t, data)| p.dense(t, data))
            .collect();
        let (gate, up) = split(&dense, f, p.packed);
        let values = if self.backward {
            let (dg, du) = backward(&p.dense("dy", &inputs[0]), &gate, &up);
            pack(dg, du, f, p.packed)
        } else {
            forward(&gate, &up)
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

/// Gate and up from the inputs: two tensors, or the halves of each `2F` row of one.
fn split(inputs: &[Vec<f32>], f: usize, packed: bool) -> (Vec<f32>, Vec<f32>) {
    if !packed {
        return (inputs[0].clone(), inputs[1].clone());
    }
    let (mut g, mut u) = (Vec::new(), Vec::new());
    for row in inputs[0].chunks(2 * f) {
        g.extend_from_slice(&row[..f]);
        u.extend_from_slice(&row[f..]);
    }
    (g, u)
}

/// The two gradients as the outputs are laid out: one after the other, or the halves of `2F` rows.
fn pack(dg: Vec<f64>, du: Vec<f64>, f: usize, packed: bool) -> Vec<f64> {
    if !packed {
        return dg.into_iter().chain(du).collect();
    }
    dg.chunks(f)
        .zip(du.chunks(f))
        .flat_map(|(a, b)| a.iter().chain(b).copied())
        .collect()
}

fn sigmoid(g: f64) -> f64 {
    1.0 / (1.0 + (-g).exp())
}

/// `silu(gate) · up` in f64.
pub fn forward(gate: &[f32], up: &[f32]) -> Vec<f64> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            g * sigmoid(g) * f64::from(u)
        })
        .collect()
}

/// `(dgate, dup)` in f64.
pub fn backward(dy: &[f32], gate: &[f32], up: &[f32]) -> (Vec<f64>, Vec<f64>) {
    dy.iter()
        .zip(gate.iter().zip(up))
        .map(|(&d, (&g, &u))| {
            let (d, g, u) = (f64::from(d), f64::from(g), f64::from(u));
            let s = sigmoid(g);
            (d * u * s * (1.0 + g * (1.0 - s)), d * g * s)
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analytic gradients are the forward's derivatives (central differences in f64).
    #[test]
    fn backward_matches_finite_differences() {
        let gates = [-30.0f32, -4.5, -1.0, -0.125, 0.0, 0.3, 2.0, 9.0];
        let (up, dy) = (0.75f32, -1.25f32);
        let h = 1e-6;
        for g in gates {
            let (dg, du) = backward(&[dy], &[g], &[up]);
            let fwd = |g: f64, u: f64| g * sigmoid(g) * u * f64::from(dy);
            let (g64, u64) = (f64::from(g), f64::from(up));
            let fd_g = (fwd(g64 + h, u64) - fwd(g64 - h, u64)) / (2.0 * h);
            let fd_u = (fwd(g64, u64 + h) - fwd(g64, u64 - h)) / (2.0 * h);
            assert!((fd_g - dg[0]).abs() < 1e-7, "g {g}: {fd_g} vs {}", dg[0]);
            assert!((fd_u - du[0]).abs() < 1e-7, "g {g}: {fd_u} vs {}", du[0]);
        }
    }
}
