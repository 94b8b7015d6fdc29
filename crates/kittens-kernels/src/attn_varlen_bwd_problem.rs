//! `attn_varlen_bwd` at a problem's sizes: the backward of [`crate::attn_varlen_problem`]'s packed
//! attention (the same names, lengths and checks), so that `kittens run attn_varlen_bwd` and the
//! Python package reach its programs through the registry like any kernel.
//!
//! Inputs in run order: `q, k, v, o, do` (bf16), `lse` (f32 `[heads, total_q]`), `cu_seqlens_q`,
//! `cu_seqlens_k`, with ALiBi (`alibi`) its slopes (f32 `[batch, heads]`); outputs `dk, dv, dq` (in the order the sm_90a launches finish them). O and the
//! log-sum-exp are the f64 forward's at the drawn Q, K, V (O rounded to bf16, the lse to f32: what a
//! forward hands its backward); each gradient is judged by FlashAttention's rule against the
//! per-sequence f64 backward and its plain-bf16 baseline ([`crate::reference_varlen::backward`]).
//!
//! The launches: on the CPU interpreter the one-wave programs ([`crate::attn_varlen_bwd`]: key
//! blocks for dK and dV, then query blocks for dQ, f32 gradients); on sm_90a FlashAttention-3's three (§3.3's backward, as the dense atomic form,
//! `attn_bwd::problem`'s `atomic` variant): the dense strip pass for `D = rowsum(dO∘O)` and the
//! zeroed f32 dQ accumulator run over the packed rows as one sequence of batch 1 (a per-row product:
//! no offsets needed), the varlen key blocks ([`crate::attn_varlen_bwd_hopper`]) adding `dS·K` into
//! the accumulator, and the dense conversion pass to bf16 dQ, again over the packed rows. The key
//! blocks read and write the accumulator, which the runner's inputs-then-outputs cannot express; a
//! prepared call (the `cuda` backend, Python) runs them, taking the run's inputs by name
//! ([`KernelProblem::input_names`]).

use crate::attn::bwd_strips::{self, StripConfig};
use crate::attn::varlen_problem::{config, totals, VarlenProblem};
use crate::attn::AttnLayout;
use crate::attn_varlen_bwd::{self, Part};
use crate::budget;
use crate::problem::{
    param, random_scaled, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings, Stage,
    STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::reference_varlen::{backward_alibi, forward_alibi};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::Kernel;
use rand::rngs::SmallRng;

const NAME: &str = "attn_varlen_bwd";

/// The run's inputs, as the programs name them.
const INPUTS: [&str; 8] = [
    "q",
    "k",
    "v",
    "o",
    "do",
    "lse",
    "cu_seqlens_q",
    "cu_seqlens_k",
];

/// An `attn_varlen_bwd` problem: the forward's ([`VarlenProblem`]: shape, lengths, causal, scale).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VarlenBwdProblem {
    pub fwd: VarlenProblem,
}

/// The registry's parser of `attn_varlen_bwd`'s problem (the forward's names; no variant).
pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(VarlenBwdProblem {
        fwd: VarlenProblem::from_args_of(NAME, a, &[])?,
    }))
}

/// The key blocks for `target` (built to refuse what they do not take, by name): sm_90a's, or the
/// CPU's one-wave [`Part::Keys`] elsewhere.
pub fn build_for(p: &VarlenProblem, target: Target) -> Result<Kernel, KernelError> {
    match target {
        Target::Sm90a => crate::attn_varlen_bwd_hopper::build(&config(p)),
        _ => attn_varlen_bwd::build(&config(p), Part::Keys),
    }
}

/// The strip passes' configuration at `p`'s head dimension and scale, over BSHD tensors (the packed
/// rows at batch 1).
fn strips(p: &VarlenProblem) -> Result<StripConfig, KernelError> {
    let cfg = config(p);
    cfg.logits.check()?;
    Ok(StripConfig {
        dim: cfg.dim,
        layout: AttnLayout::Bshd,
        strided: false,
        logits: cfg.logits,
        dlse: false,
    })
}

impl KernelProblem for VarlenBwdProblem {
    fn kernel(&self) -> &'static str {
        NAME
    }

    fn settings(&self) -> &RunSettings {
        &self.fwd.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let p = &self.fwd;
        let [q, kv, cu, lse] = p.sizes(NAME)?;
        Ok(Launch {
            params: p.params()?,
            inputs: [&[q, kv, kv, q, q, lse, cu, cu][..], &p.slopes_len()?].concat(),
            outputs: vec![kv, kv, q],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = &self.fwd;
        p.check_sizes(NAME)?;
        build_for(p, target)?; // refuses what the target's program does not take, by name
        let launch = self.launch()?;
        let a = p.args.attn;
        let (tq, tk) = totals(p);
        let u = |x: usize| x as u64;
        let q = budget::product(&[u(tq), u(a.heads), u(a.dim)]);
        let kv = budget::product(&[u(tk), u(a.heads_kv), u(a.dim)]);
        let bytes = budget::sum(&[
            // five inputs held as f32 and their f64 forward, the outputs, their stores, their f64
            // references and bf16 baselines
            budget::sum(&[q, q, q, kv, kv]).and_then(|x| x.checked_mul(4 + 8)),
            budget::sum(&[q, kv, kv]).and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 8)),
        ]);
        let what = p.what(NAME);
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch,
            what,
            // S, dP, dV, dK, dQ: five products per kept score block.
            work: p.work(5),
            shape: p.shape(),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        build_for(&self.fwd, target)
    }

    /// Two launches on the CPU (key blocks, query blocks); on sm_90a the three of the module
    /// documentation, each with its own parameters (the strip passes': `batch 1, heads, heads_kv,
    /// total_q, total_k`).
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = &self.fwd;
        let l = &plan.launch;
        if target != Target::Sm90a {
            // The key blocks (dk, dv), then the query blocks (dq), each on the run's inputs.
            let part = |part, outputs| -> Result<Stage, KernelError> {
                Ok(Stage {
                    kernel: attn_varlen_bwd::build(&config(p), part)?,
                    launch: Launch {
                        params: l.params.clone(),
                        inputs: l.inputs.clone(),
                        outputs,
                    },
                })
            };
            return Ok(vec![
                part(Part::Keys, l.outputs[..2].to_vec())?,
                part(Part::Queries, l.outputs[2..].to_vec())?,
            ]);
        }
        let [q, k, v, o, d_o, lse, cu_q, cu_k] = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| l.inputs[i]);
        let [dk, dv, dq] = [0, 1, 2].map(|i| l.outputs[i]);
        let a = p.args.attn;
        let (tq, tk) = totals(p);
        let strip = vec![
            param("batch", 1)?,
            param("heads", a.heads)?,
            param("heads_kv", a.heads_kv)?,
            param("total_q", tq)?,
            param("total_k", tk)?,
        ];
        let stage = |kernel, params, inputs, outputs| Stage {
            kernel,
            launch: Launch {
                params,
                inputs,
                outputs,
            },
        };
        Ok(vec![
            // o, do in; delta, dq_acc (zeroed) out.
            stage(
                bwd_strips::build_pre(&strips(p)?)?,
                strip.clone(),
                vec![o, d_o],
                vec![lse, q],
            ),
            // q, k, v, do, lse, delta, the offsets (, the slopes) in; dk, dv out, dq_acc added
            // to (declared last: the pass before wrote it, the pass after reads it).
            stage(
                self.build(target)?,
                l.params.clone(),
                [&[q, k, v, d_o, lse, lse, cu_q, cu_k][..], &l.inputs[8..]].concat(),
                vec![dk, dv, q],
            ),
            stage(bwd_strips::build_dq(&strips(p)?)?, strip, vec![q], vec![dq]),
        ])
    }

    fn input_names(&self, _target: Target) -> Option<Vec<String>> {
        let alibi = self.fwd.args.alibi.then_some("alibi");
        Some(INPUTS.iter().chain(&alibi).map(|s| s.to_string()).collect())
    }

    /// Q, K, V and dO uniform in `[-input_scale, input_scale)` (bf16); O and the log-sum-exp from
    /// the f64 forward at those Q, K, V; the offsets of the drawn lengths.
    fn draw(&self, _kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let p = &self.fwd;
        let scale = p.run.input_scale;
        let l = &launch.inputs;
        let [q, k, v, d_o] =
            [l[0], l[1], l[2], l[4]].map(|n| random_scaled(rng, n, DType::Bf16, scale));
        let [cu_q, cu_k] = p.drawn_offsets();
        let slopes = p.draw_slopes(rng);
        let sh = p.reference_shape(&cu_q, &cu_k);
        let (o, lse) = forward_alibi(&q, &k, &v, &sh, slopes.as_deref());
        let o = o
            .iter()
            .map(|&x| round(x as f32, DType::Bf16, Rounding::Rtne))
            .collect();
        let lse = lse.iter().map(|&x| x as f32).collect();
        let mut all = vec![q, k, v, o, d_o, lse, cu_q, cu_k];
        all.extend(slopes);
        all
    }

    /// `dk, dv, dq` per sequence in f64; the baseline in plain bf16.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let sh = self.fwd.reference_shape(&inputs[6], &inputs[7]);
        let (q, k, v, d_o) = (&inputs[0], &inputs[1], &inputs[2], &inputs[4]);
        let slopes = self.fwd.slopes(inputs);
        let (dq, dk, dv) = backward_alibi(q, k, v, d_o, &sh, false, slopes);
        let (bq, bk, bv) = backward_alibi(q, k, v, d_o, &sh, true, slopes);
        let f32s = |x: Vec<f64>| x.into_iter().map(|y| y as f32).collect::<Vec<_>>();
        Reference {
            values: [dk, dv, dq].concat(),
            baseline: Some([f32s(bk), f32s(bv), f32s(bq)].concat()),
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}
