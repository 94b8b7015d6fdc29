//! `attn_varlen` at a problem's sizes: `batch` sequences of at most `seq` queries and `seq_kv` keys
//! (the kernel's `max_seqlen_q`, `max_seqlen_k`), `heads` / `heads_kv` heads of `dim`, causal
//! bottom-right or not, any softmax scale. A random-input run draws the lengths from the seed
//! ([`lengths`]: the longest, 1, 0 and random ones, so tiles cross sequence ends), packs them without
//! gaps (every row of `o` and `lse` belongs to a sequence, so a row the kernel leaves unwritten —
//! the runner poisons outputs with NaN — fails the comparison), and judges `o` and `lse` by
//! FlashAttention's rule against the per-sequence f64 reference ([`crate::reference_varlen`]).
//!
//! Inputs in launch order: `q, k, v` (bf16), `cu_seqlens_q`, `cu_seqlens_k` (i32 offsets, held as
//! exact f32 integers); outputs `o`, `lse`. A caller with its own tensors (Python) gives the packed
//! rows as `total_q` and `total_k` ([`VarlenProblem::varlen_total`]).

pub(crate) use crate::attn::varlen_problem::totals;
pub use crate::attn::varlen_problem::{config, lengths, VarlenProblem, SEQUSED_K};
use crate::attn_varlen::VarlenConfig;
use crate::budget;
use crate::problem::{
    draw_operands, KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings, STORE_BYTES,
};
use crate::reference::Tolerance;
use crate::reference_varlen::{forward_alibi, forward_bf16_baseline_alibi};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;
use rand::rngs::SmallRng;

pub fn parse(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(VarlenProblem::from_args(a)?))
}

/// The program for `target`: the warp-specialised one on sm_90a, the one-wave one elsewhere (the
/// CPU's, which gfx942 and gfx950 lower too).
pub fn build_for(cfg: &VarlenConfig, target: Target) -> Result<Kernel, KernelError> {
    match target {
        Target::Sm90a => crate::attn_varlen_hopper::build(cfg),
        _ => crate::attn_varlen::build(cfg),
    }
}

impl KernelProblem for VarlenProblem {
    fn kernel(&self) -> &'static str {
        "attn_varlen"
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    fn launch(&self) -> Result<Launch, KernelError> {
        let (p, a) = (self, self.args.attn);
        let [q, kv, cu, lse] = p.sizes("attn_varlen")?;
        Ok(Launch {
            params: p.params()?,
            inputs: [
                vec![q, kv, kv, cu, cu],
                (p.run.variant == Some(SEQUSED_K))
                    .then_some(a.batch)
                    .into_iter()
                    .collect(),
                p.slopes_len()?,
            ]
            .concat(),
            outputs: vec![q, lse],
        })
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let (p, a) = (self, self.args.attn);
        let name = "attn_varlen";
        p.check_sizes(name)?;
        if p.run.variant.is_some() {
            return Err(KernelError::Problem(format!(
                "{name}: the seqused_k variant runs on the caller's tensors only (Python's \
                 flash_attn_with_kvcache), not on the runner's random inputs"
            )));
        }
        build_for(&config(p), target)?; // refuses what the target's program does not take, by name
        let launch = self.launch()?;
        let (tq, tk) = totals(p);
        let u = |x: usize| x as u64;
        let q = budget::product(&[u(tq), u(a.heads), u(a.dim)]);
        let kv = budget::product(&[u(tk), u(a.heads_kv), u(a.dim)]);
        let bytes = budget::sum(&[
            budget::sum(&[q, kv, kv]).and_then(|x| x.checked_mul(2 * 4)),
            q.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8 + 4)),
        ]);
        let what = p.what(name);
        budget::check_host_bytes(&what, bytes)?;
        Ok(Plan {
            launch,
            what,
            work: p.work(2),
            shape: p.shape(),
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        build_for(&config(self), target)
    }

    /// `q, k, v` uniform (scaled) bf16; the offsets of [`lengths`].
    fn draw(&self, kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let mut inputs = draw_operands(self.run.input_scale, kernel, &launch.inputs[..3], rng);
        inputs.extend(self.drawn_offsets());
        inputs.extend(self.draw_slopes(rng));
        inputs
    }

    /// `o` then `lse`, per sequence in f64; the baseline in plain bf16 (f32 sums).
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let sh = self.reference_shape(&inputs[3], &inputs[4]);
        let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
        let slopes = self.slopes(inputs);
        let (o, lse) = forward_alibi(q, k, v, &sh, slopes);
        let (ob, lseb) = forward_bf16_baseline_alibi(q, k, v, &sh, slopes);
        Reference {
            values: [o, lse].concat(),
            baseline: Some([ob, lseb].concat()),
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}
