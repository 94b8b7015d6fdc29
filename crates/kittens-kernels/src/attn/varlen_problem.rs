//! The packed variable-length attention's problem parameters (shape, lengths, causal, scale, ALiBi, the
//! caller's packed rows) and what both its kernels derive from them (the drawn lengths, the program
//! configuration): shared by `attn_varlen` ([`crate::attn_varlen_problem`]) and its backward
//! ([`crate::attn_varlen_bwd_problem`]), so neither kernel's problem imports the other's.

use crate::attn::varlen::VarlenConfig;
use crate::attn::{AttnArgs, AttnLayout};
use crate::budget;
use crate::problem::{elements, param, positive, random_scaled, NamedArgs, RunSettings};
use crate::reference_varlen::VarlenShape;
use crate::KernelError;
use kittens_hw::dtype::DType;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// An `attn_varlen` problem: the attention's shape (`attn.seq`, `seq_kv`: `max_seqlen_q`,
/// `max_seqlen_k`; the layout is the packed `[total, heads, dim]`), the causal mask (always
/// bottom-right per sequence), the logits, and the packed tensors' rows when a caller gives its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VarlenProblem {
    /// The attention's shape (`args.attn.seq` and `args.seq_kv`: `max_seqlen_q`, `max_seqlen_k`),
    /// causal mask, softmax scale, soft cap, window (both refused by the backward's build) and ALiBi
    /// (`args.alibi`: the slopes an input after the offsets); no bottom-right flag:
    /// [`VarlenProblem::from_args`] refuses it).
    pub args: AttnArgs,
    /// The packed tensors' rows `(total_q, total_k)` when a caller gives its own (Python); `None`:
    /// the sum of the lengths a random-input run draws.
    pub varlen_total: Option<(usize, usize)>,
    pub run: RunSettings,
}

impl Default for VarlenProblem {
    /// The default attention shape ([`crate::attn::AttnShape::default`]), no mask, the drawn lengths.
    fn default() -> Self {
        VarlenProblem {
            args: AttnArgs::default(),
            varlen_total: None,
            run: RunSettings::default(),
        }
    }
}

impl VarlenProblem {
    /// The problem `a` names: the attention's names ([`AttnArgs::from_args`]: `batch`, `heads`,
    /// `heads_kv`, `seq`, `seq_kv`, `dim`, `causal`, `scale`, `softcap`, `window`; a layout other
    /// than `bshd`, a bottom-right flag or `lse` are refused: the packed layout, the bottom-right
    /// causal mask and the `lse` output are this kernel's own), `total_q` and `total_k` (both or neither),
    /// and the run settings (variant `seqused_k`).
    pub fn from_args(a: &NamedArgs) -> Result<VarlenProblem, KernelError> {
        Self::from_args_of("attn_varlen", a, &[SEQUSED_K])
    }

    /// [`Self::from_args`] for kernel `name` (messages) with its `variants`.
    pub(crate) fn from_args_of(
        name: &str,
        a: &NamedArgs,
        variants: &[&'static str],
    ) -> Result<VarlenProblem, KernelError> {
        let args = AttnArgs::from_args(a)?;
        if args.attn.layout != AttnLayout::Bshd {
            return Err(KernelError::Problem(format!(
                "{name}: the packed layout is [total, heads, dim] (bshd), got {:?}",
                args.attn.layout
            )));
        }
        if args.bottom_right || a.flag_or("lse", false)? {
            return Err(KernelError::Problem(format!(
                "{name}: always writes lse with bottom-right causal (no lse, bottom_right)"
            )));
        }
        let varlen_total = match (
            a.opt_size_or("total_q", None)?,
            a.opt_size_or("total_k", None)?,
        ) {
            (Some(q), Some(k)) => Some((q, k)),
            (None, None) => None,
            (q, _) => {
                return Err(KernelError::Problem(format!(
                    "{name}: total_q and total_k come together; got only {}",
                    if q.is_some() { "total_q" } else { "total_k" }
                )))
            }
        };
        Ok(VarlenProblem {
            args,
            varlen_total,
            run: RunSettings::from_args(a, variants)?,
        })
    }

    /// The sizes a random-input run needs (each positive), the packed layout and the logits.
    pub(crate) fn check_sizes(&self, name: &str) -> Result<(), KernelError> {
        let a = self.args.attn;
        positive(
            name,
            &[
                ("batch", a.batch),
                ("heads", a.heads),
                ("heads_kv", a.heads_kv),
                ("seq (max_seqlen_q)", a.seq),
                ("seq_kv (max_seqlen_k)", self.args.keys()),
                ("dim", a.dim),
            ],
        )?;
        if a.layout != AttnLayout::Bshd {
            return Err(KernelError::Problem(format!(
                "{name}: the packed layout is [total, heads, dim] (bshd), got {:?}",
                a.layout
            )));
        }
        self.args.logits.check()
    }

    /// The run's sizes in messages.
    pub(crate) fn what(&self, name: &str) -> String {
        let a = self.args.attn;
        let (tq, tk) = totals(self);
        format!(
            "{name} at batch={} heads={} heads_kv={} max_seqlen_q={} max_seqlen_k={} dim={} \
             (total_q={tq}, total_k={tk})",
            a.batch,
            a.heads,
            a.heads_kv,
            a.seq,
            self.args.keys(),
            a.dim
        )
    }

    /// The multiply-adds of `products` `lq × lk × dim` products per head over the kept
    /// (sequence-local) score blocks of the drawn lengths.
    pub(crate) fn work(&self, products: u64) -> Option<u64> {
        let a = self.args.attn;
        let u = |x: usize| x as u64;
        lengths(self).iter().try_fold(0u64, |acc, &(lq, lk)| {
            budget::product(&[u(lq), u(lk), u(a.heads), u(a.dim), products])
                .and_then(|w| acc.checked_add(w))
        })
    }

    /// The report's shape.
    pub(crate) fn shape(&self) -> serde_json::Value {
        let (tq, tk) = totals(self);
        serde_json::json!({
            "attn": self.args.attn, "max_seqlen_k": self.args.keys(),
            "causal_bottom_right": self.args.causal, "lengths": lengths(self), "total_q": tq,
            "total_k": tk, "scale": self.args.logits.scale(config(self).dim),
        })
    }

    /// `cu_seqlens_q` and `cu_seqlens_k` of the drawn [`lengths`] (exact f32 integers).
    pub(crate) fn drawn_offsets(&self) -> [Vec<f32>; 2] {
        let l = lengths(self);
        [
            offsets(l.iter().map(|x| x.0)),
            offsets(l.iter().map(|x| x.1)),
        ]
        .map(|cu| cu.iter().map(|&x| x as f32).collect())
    }

    /// With ALiBi, the slopes' elements (`[batch, heads]`, the last input).
    pub(crate) fn slopes_len(&self) -> Result<Vec<usize>, KernelError> {
        let a = self.args.attn;
        Ok(match self.args.alibi {
            true => vec![elements("alibi", &[a.batch, a.heads])?],
            false => Vec::new(),
        })
    }

    /// With ALiBi, random slopes (f32, any sign: any values run), the run's last input.
    pub(crate) fn draw_slopes(&self, rng: &mut SmallRng) -> Option<Vec<f32>> {
        let a = self.args.attn;
        let n = a.batch * a.heads;
        (self.args.alibi).then(|| random_scaled(rng, n, DType::F32, self.run.input_scale))
    }

    /// With ALiBi, the slopes among a run's `inputs` (the last).
    pub(crate) fn slopes<'a>(&self, inputs: &'a [Vec<f32>]) -> Option<&'a [f32]> {
        inputs.last().filter(|_| self.args.alibi).map(Vec::as_slice)
    }

    /// The references' shape at the offsets `cu_q`, `cu_k` (a run's inputs).
    pub(crate) fn reference_shape(&self, cu_q: &[f32], cu_k: &[f32]) -> VarlenShape {
        let cu = |c: &[f32]| c.iter().map(|&x| x as usize).collect::<Vec<_>>();
        let cfg = config(self);
        VarlenShape {
            heads: self.args.attn.heads,
            heads_kv: self.args.attn.heads_kv,
            dim: self.args.attn.dim,
            cu_q: cu(cu_q),
            cu_k: cu(cu_k),
            causal: self.args.causal,
            scale: f64::from(cfg.logits.scale(cfg.dim)),
            softcap: cfg.logits.softcap.map(f64::from),
            window: cfg.window,
        }
    }

    /// Elements of `q`, of `k` (and `v`), of each `cu_seqlens`, of `lse`; heads that do not group
    /// evenly or sizes that overflow are errors naming the argument.
    pub(crate) fn sizes(&self, name: &str) -> Result<[usize; 4], KernelError> {
        let a = self.args.attn;
        if a.heads_kv == 0 || !a.heads.is_multiple_of(a.heads_kv) {
            return Err(KernelError::Problem(format!(
                "{name}: heads_kv {} must divide heads {}",
                a.heads_kv, a.heads
            )));
        }
        let (tq, tk) = totals(self);
        let cu = a
            .batch
            .checked_add(1)
            .ok_or_else(|| KernelError::Problem(format!("{name}: batch {} overflows", a.batch)))?;
        Ok([
            elements("q", &[tq, a.heads, a.dim])?,
            elements("k", &[tk, a.heads_kv, a.dim])?,
            cu,
            elements("lse", &[a.heads, tq])?,
        ])
    }

    /// The parameters every varlen program takes, in declaration order ([`crate::attn_varlen`]'s
    /// `Batch`), at the packed tensors' rows `(total_q, total_k)` ([`totals`]).
    pub(crate) fn params(&self) -> Result<Vec<i64>, KernelError> {
        let (p, a) = (self, self.args.attn);
        let (tq, tk) = totals(p);
        Ok(vec![
            param("batch", a.batch)?,
            param("heads", a.heads)?,
            param("heads_kv", a.heads_kv)?,
            param("total_q", tq)?,
            param("total_k", tk)?,
            // At least 1: a grid extent or trip count of 0 is an empty launch the analyses refuse.
            param("max_seqlen_q", a.seq.max(1))?,
            param("max_seqlen_k", p.args.keys().max(1))?,
        ])
    }
}

/// The registry's parser of `attn_varlen`'s problem.
/// The sequence lengths of a random-input run, `(queries, keys)` per sequence, from the seed:
/// sequence 0 the longest (`seq`, `seq_kv`), 1 a single row, 2 empty, the rest uniform in
/// `0..=max` (each with its own draw for the keys).
pub fn lengths(p: &VarlenProblem) -> Vec<(usize, usize)> {
    let (mq, mk) = (p.args.attn.seq, p.args.keys());
    let mut rng = SmallRng::seed_from_u64(p.run.seed ^ 0x7661_726c_656e);
    (0..p.args.attn.batch)
        .map(|b| match b {
            0 => (mq, mk),
            1 => (1.min(mq), 1.min(mk)),
            2 => (0, 0),
            _ => (rng.gen_range(0..=mq), rng.gen_range(0..=mk)),
        })
        .collect()
}

fn offsets(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut cu = vec![0];
    for l in lens {
        cu.push(cu.last().copied().unwrap_or(0) + l);
    }
    cu
}

/// The configuration of `p` (head dim, causal, scale, soft cap, window; the backward's build refuses
/// the last two).
pub fn config(p: &VarlenProblem) -> VarlenConfig {
    VarlenConfig {
        dim: u32::try_from(p.args.attn.dim).unwrap_or(u32::MAX),
        causal: p.args.causal,
        logits: p.args.logits,
        window: p.args.window,
        seqused_k: p.run.variant == Some(SEQUSED_K),
        alibi: p.args.alibi,
    }
}

/// The variant with FlashAttention's `seqused_k` (a KV cache's lengths; `flash_attn_with_kvcache`).
pub const SEQUSED_K: &str = "seqused_k";

/// `(total_q, total_k)`: the caller's, or the drawn lengths' sums.
pub(crate) fn totals(p: &VarlenProblem) -> (usize, usize) {
    p.varlen_total.unwrap_or_else(|| {
        let l = lengths(p);
        (l.iter().map(|x| x.0).sum(), l.iter().map(|x| x.1).sum())
    })
}
