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
    pub run: RunSettings,
}

impl Default for SwigluProblem {
    /// The forward at odd sizes: 37 rows of 1000.
    fn default() -> Self {
        SwigluProblem {
            backward: false,
            rows: 37,
            dim: 1000,
            packed: false,
            run: RunSettings::default(),
        }
    }
}

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
        Ok(SwigluProblem {
            backward,
            rows: a.size_or("rows", d.rows)?,
            dim: a.size_or("norm_dim", d.dim)?,
            packed: a.flag_or("packed", d.packed)?,
            run: RunSettings::from_args(a, &[])?,
        })
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
pub fn config(p: &SwigluProblem, target: Target) -> SwigluConfig {
    let f = u32::try_from(p.dim).unwrap_or(u32::MAX);
    SwigluConfig::new(f, p.packed, target.gpu().map_or(32, |g| g.wave_width))
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
        let pair = if p.packed {
            vec![elements("x", &[p.rows, 2, p.dim])?]
        } else {
            vec![m, m]
        };
        let (inputs, outputs) = if self.backward {
            ([vec![m], pair.clone()].concat(), pair)
        } else {
            (pair, vec![m])
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
                "rows": rows, "f": f, "packed": p.packed, "config": config(p, target),
            }),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        let p = self;
        let cfg = config(p, target);
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
        let (gate, up) = split(&inputs[at..], f, p.packed);
        let values = if self.backward {
            let (dg, du) = backward(&inputs[0], &gate, &up);
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
