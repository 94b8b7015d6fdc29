//! `attn_fwd` at a problem's sizes: parameters `batch, heads, heads_kv, seq`, inputs Q, K, V and output
//! O in the problem's layout, the f64 reference, the PyTorch-style bf16 baseline and the test rule.

use super::{build, AttnConfig};
use crate::budget;
use crate::problem::{
    elements, param, positive, round_up, KernelProblem, Launch, Plan, Problem, Reference,
    STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::Target;
use kittens_ir::Kernel;

/// The problem definition the registry hands out for `attn_fwd`.
#[derive(Debug)]
pub struct AttnProblem;

/// The name of the causal variant (the registry's, for `kittens compile --schedule causal`).
pub const CAUSAL: &str = "causal";

/// `base`, a GPU's configuration, turned into its variant `name`.
pub fn variant(base: AttnConfig, name: &str) -> Result<AttnConfig, KernelError> {
    match name {
        CAUSAL => Ok(AttnConfig {
            causal: true,
            ..base
        }),
        other => Err(KernelError::Config(format!(
            "attn_fwd: no variant `{other}`; variants: {CAUSAL}"
        ))),
    }
}

/// A run's variant must agree with its problem: `causal` only with `p.causal` (what `--causal`
/// already builds); an unknown one is refused rather than ignored.
fn no_variant(p: &Problem) -> Result<(), KernelError> {
    match p.variant {
        None => Ok(()),
        Some(CAUSAL) if p.causal => Ok(()),
        Some(CAUSAL) => Err(KernelError::Config(
            "attn_fwd: the `causal` variant runs with the causal mask (--causal)".into(),
        )),
        Some(v) => variant(AttnConfig::default(), v).map(|_| ()),
    }
}

/// The configuration a run on `target` builds: `p.attn_cfg`'s tiles on the CPU, the default tiles
/// (the registry's for both CDNA targets) elsewhere; head dimension, causality and layout from `p`.
fn config(p: &Problem, target: Target) -> AttnConfig {
    let tiles = match target.gpu() {
        Some(gpu) => AttnConfig::for_gpu(gpu),
        None => p.attn_cfg,
    };
    let cfg = AttnConfig {
        dim: u32::try_from(p.attn.dim).unwrap_or(u32::MAX),
        causal: p.causal,
        layout: p.attn.layout,
        ..tiles
    };
    match target.gpu() {
        Some(gpu) if gpu.arch.is_amd() => cfg.fit_cdna(gpu),
        _ => cfg,
    }
}

impl KernelProblem for AttnProblem {
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError> {
        let sh = p.attn;
        if sh.heads_kv == 0 || !sh.heads.is_multiple_of(sh.heads_kv) {
            return Err(KernelError::Problem(format!(
                "attn_fwd: heads_kv {} must divide heads {} (GQA groups the query heads evenly)",
                sh.heads_kv, sh.heads
            )));
        }
        let q = elements("Q", &[sh.batch, sh.heads, sh.seq, sh.dim])?;
        let kv = elements("K", &[sh.batch, sh.heads_kv, sh.seq, sh.dim])?;
        Ok(Launch {
            params: vec![
                param("batch", sh.batch)?,
                param("heads", sh.heads)?,
                param("heads_kv", sh.heads_kv)?,
                param("seq", sh.seq)?,
            ],
            inputs: vec![q, kv, kv],
            outputs: vec![q],
        })
    }

    fn plan(&self, p: &Problem, target: Target) -> Result<Plan, KernelError> {
        let (name, sh) = ("attn_fwd", p.attn);
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
            // The launch refuses it too; say it before the budget does.
            self.launch(p)?;
        }
        no_variant(p)?;
        let cfg = config(p, target);
        let u = |x: usize| x as u64;
        let (b, h, hk, s, d) = (
            u(sh.batch),
            u(sh.heads),
            u(sh.heads_kv),
            u(sh.seq),
            u(sh.dim),
        );
        let (qr, kv) = (u64::from(cfg.q_rows), u64::from(cfg.kv_block));
        budget::check_tile_side(name, "dim", d)?;
        budget::check_tile_side(name, "q_rows", qr)?;
        budget::check_tile_side(name, "kv_block", kv)?;
        let q = budget::product(&[b, h, s, d]);
        let kv_len = budget::product(&[b, hk, s, d]);
        let bytes = budget::sum(&[
            // the inputs and their snapshot
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
        Ok(Plan {
            launch: self.launch(p)?,
            what,
            work,
            shape: serde_json::json!({
                "attn": sh, "causal": p.causal, "q_rows": cfg.q_rows, "kv_block": cfg.kv_block,
            }),
        })
    }

    fn build(&self, p: &Problem, target: Target) -> Result<Kernel, KernelError> {
        no_variant(p)?;
        build(&config(p, target))
    }

    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference {
        let (sh, [q, k, v]) = (p.attn, [&inputs[0], &inputs[1], &inputs[2]]);
        let (values, logit) = reference::attention_with_logits(q, k, v, &sh, p.causal);
        Reference {
            values,
            baseline: Some(reference::attention_bf16_baseline(q, k, v, &sh, p.causal)),
            max_abs_logit: Some(logit),
        }
    }

    /// The test rule against the bf16 baseline: attention's error grows with the logits, so a fixed
    /// bound either fails good kernels at large logits or passes bad ones at small.
    fn tolerance(&self) -> Tolerance {
        Tolerance::Rule
    }
}
