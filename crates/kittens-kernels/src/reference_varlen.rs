//! References for variable-length (packed) attention ([`crate::attn_varlen`]): dense attention of each
//! sequence on its own, in f64, and the same computation in plain bf16 (the baseline of
//! FlashAttention's rule, [`crate::reference::check_rule`]). Rows past the last sequence are nobody's:
//! the references leave them out ([`VarlenShape::rows`]).

use crate::attn::score::Window;
use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use std::ops::Range;

/// A packed batch: `q [total_q, heads, dim]`, `k, v [total_k, heads_kv, dim]`, sequence `b`'s rows
/// `cu_q[b] .. cu_q[b + 1]` and `cu_k[b] .. cu_k[b + 1]`; with `softcap` the logits
/// `cap·tanh(x·scale/cap)` (before ALiBi, [`crate::attn::score::Logits`]), with `window` a sliding
/// window aligned bottom-right per sequence ([`crate::attn::score::Window`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarlenShape {
    pub heads: usize,
    pub heads_kv: usize,
    pub dim: usize,
    pub cu_q: Vec<usize>,
    pub cu_k: Vec<usize>,
    pub causal: bool,
    pub scale: f64,
    pub softcap: Option<f64>,
    pub window: Option<Window>,
}

impl VarlenShape {
    pub fn batch(&self) -> usize {
        self.cu_q.len().saturating_sub(1)
    }
    /// The keys query `i` (local) of sequence `b` keeps: all `len_k`, or with `causal` those
    /// `j ≤ i + len_k − len_q` (bottom-right), and with a window those within it (bottom-right).
    pub fn keys(&self, b: usize, i: usize) -> Range<usize> {
        let (lq, lk) = (
            self.cu_q[b + 1] - self.cu_q[b],
            self.cu_k[b + 1] - self.cu_k[b],
        );
        let offset = self.causal.then_some(lk as i64 - lq as i64);
        crate::attn::score::kept_keys(offset, self.window, lq, lk, i)
    }
    /// The logit of the score `dot` (f64): scaled, then capped.
    fn logit(&self, dot: f64) -> f64 {
        let s = dot * self.scale;
        self.softcap.map_or(s, |c| c * (s / c).tanh())
    }
    /// [`Self::logit`] the PyTorch way in f32, for the baseline.
    fn logit_f32(&self, dot: f32) -> f32 {
        let s = dot * self.scale as f32;
        self.softcap.map_or(s, |c| {
            let c = c as f32;
            c * (s / c).tanh()
        })
    }
    /// Every `(b, query row)` pair of the batch.
    pub fn rows(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.batch()).flat_map(move |b| (self.cu_q[b]..self.cu_q[b + 1]).map(move |r| (b, r)))
    }
    fn q_at(&self, r: usize, h: usize, x: usize) -> usize {
        (r * self.heads + h) * self.dim + x
    }
    fn k_at(&self, r: usize, h: usize, x: usize) -> usize {
        (r * self.heads_kv + h) * self.dim + x
    }
    fn kv_head(&self, h: usize) -> usize {
        h / (self.heads / self.heads_kv.max(1)).max(1)
    }
    /// ALiBi's bias (`crate::attn::score::Alibi::f64`, `slopes` `[batch, heads]`) of query `i` and key
    /// `j` (local) of sequence `b`, head `h`; 0 without slopes.
    fn bias(&self, slopes: Option<&[f32]>, b: usize, h: usize, i: usize, j: usize) -> f64 {
        slopes.map_or(0.0, |s| {
            let (lq, lk) = (
                self.cu_q[b + 1] - self.cu_q[b],
                self.cu_k[b + 1] - self.cu_k[b],
            );
            crate::attn::score::Alibi::f64(f64::from(s[b * self.heads + h]), lq, lk, i, j)
        })
    }
}

/// f64 varlen attention: the output `[total_q, heads, dim]` and the natural-log log-sum-exp
/// `[heads, total_q]` of the scaled scores (`−∞`, output 0, for a query that keeps no key). Entries of
/// rows outside every sequence are left 0.
pub fn forward(q: &[f32], k: &[f32], v: &[f32], sh: &VarlenShape) -> (Vec<f64>, Vec<f64>) {
    forward_alibi(q, k, v, sh, None)
}

/// [`forward`] with ALiBi's bias (`slopes` `[batch, heads]`, `crate::attn::score::Alibi`) added to
/// the scaled logits.
pub fn forward_alibi(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &VarlenShape,
    slopes: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let total_q = q.len() / (sh.heads * sh.dim);
    let mut o = vec![0.0f64; q.len()];
    let mut lse = vec![0.0f64; sh.heads * total_q];
    for (b, r) in sh.rows() {
        let i = r - sh.cu_q[b];
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            let keys = sh.keys(b, i);
            let s: Vec<f64> = keys
                .clone()
                .map(|j| {
                    let kr = sh.cu_k[b] + j;
                    let dot: f64 = (0..sh.dim)
                        .map(|x| q[sh.q_at(r, h, x)] as f64 * k[sh.k_at(kr, hk, x)] as f64)
                        .sum();
                    sh.logit(dot) + sh.bias(slopes, b, h, i, j)
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if s.is_empty() {
                lse[h * total_q + r] = f64::NEG_INFINITY;
                continue;
            }
            let p: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = p.iter().sum();
            lse[h * total_q + r] = mx + sum.ln();
            for x in 0..sh.dim {
                let acc: f64 = keys
                    .clone()
                    .zip(&p)
                    .map(|(j, pj)| pj * v[sh.k_at(sh.cu_k[b] + j, hk, x)] as f64)
                    .sum();
                o[sh.q_at(r, h, x)] = acc / sum;
            }
        }
    }
    (o, lse)
}

/// The same output in plain bf16 arithmetic (f32 sums, softmax in f32, P rounded to bf16, output
/// rounded to bf16), as [`crate::reference::attention_bf16_baseline`] computes dense attention.
pub fn forward_bf16_baseline(q: &[f32], k: &[f32], v: &[f32], sh: &VarlenShape) -> Vec<f32> {
    forward_bf16_baseline_lse(q, k, v, sh).0
}

/// [`forward_bf16_baseline`] and its log-sum-exp `[heads, total_q]` in f32 (`max + ln(sum)` of the
/// f32 scores, `−∞` for a query that keeps no key).
pub fn forward_bf16_baseline_lse(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &VarlenShape,
) -> (Vec<f32>, Vec<f32>) {
    forward_bf16_baseline_alibi(q, k, v, sh, None)
}

/// [`forward_bf16_baseline_lse`] with ALiBi's bias (f32) on the scaled logits.
pub fn forward_bf16_baseline_alibi(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &VarlenShape,
    slopes: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    let bf16 = |x: f32| round(x, DType::Bf16, Rounding::Rtne);
    let total_q = q.len() / (sh.heads * sh.dim).max(1);
    let mut o = vec![0.0f32; q.len()];
    let mut lse = vec![0.0f32; sh.heads * total_q];
    for (b, r) in sh.rows() {
        let i = r - sh.cu_q[b];
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            let keys = sh.keys(b, i);
            let mut p: Vec<f32> = keys
                .clone()
                .map(|j| {
                    let kr = sh.cu_k[b] + j;
                    let dot = (0..sh.dim).fold(0.0f32, |a, x| {
                        a + q[sh.q_at(r, h, x)] * k[sh.k_at(kr, hk, x)]
                    });
                    sh.logit_f32(dot) + sh.bias(slopes, b, h, i, j) as f32
                })
                .collect();
            let mx = p.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for pj in &mut p {
                *pj = (*pj - mx).exp();
                sum += *pj;
            }
            lse[h * total_q + r] = if p.is_empty() {
                f32::NEG_INFINITY
            } else {
                mx + sum.ln()
            };
            for pj in &mut p {
                *pj = bf16(*pj / sum);
            }
            for x in 0..sh.dim {
                let acc = keys.clone().zip(&p).fold(0.0f32, |a, (j, pj)| {
                    a + pj * v[sh.k_at(sh.cu_k[b] + j, hk, x)]
                });
                o[sh.q_at(r, h, x)] = bf16(acc);
            }
        }
    }
    (o, lse)
}

/// Gradients `(dq, dk, dv)` of varlen attention (layouts of `q`, `k`, `v`) for the upstream gradient
/// `d_o`, each sequence on its own: `P = softmax(S·scale)` over its kept keys, `dV = Pᵀ·dO`,
/// `dS = P ∘ (dO·Vᵀ − δ)` with `δ = rowsum(dO ∘ O)`, `dQ = dS·K·scale`, `dK = dSᵀ·Q·scale`, the heads
/// of a GQA group summed into their KV head. With `low` the plain-bf16 baseline instead: scores and
/// sums rounded to f32, `P` and `dS` rounded to bf16 before they multiply, the gradients rounded to
/// bf16 (sums are formed in f64 before rounding, which makes the baseline slightly more accurate
/// than f32 accumulation, so a rule judged against it is stricter, not looser).
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &VarlenShape,
    low: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    backward_alibi(q, k, v, d_o, sh, low, None)
}

/// [`backward`] with ALiBi's bias (`slopes` `[batch, heads]`) on the scaled logits (a constant of
/// the inputs: the gradient formulas are unchanged). The shape's soft cap and window apply as in
/// [`forward_alibi`]: `dS` carries the cap's derivative `scale·(1 − tanh²)` in place of the scale,
/// and a query's masked keys take no part.
pub fn backward_alibi(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &VarlenShape,
    low: bool,
    slopes: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let f32r = |x: f64| if low { x as f32 as f64 } else { x };
    let bf = |x: f64| {
        if low {
            round(x as f32, DType::Bf16, Rounding::Rtne) as f64
        } else {
            x
        }
    };
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let dd = sh.dim;
    let dot = |a: &[f32], ia: usize, b: &[f32], ib: usize| -> f64 {
        (0..dd).map(|x| a[ia + x] as f64 * b[ib + x] as f64).sum()
    };
    for (b, r) in sh.rows() {
        let i = r - sh.cu_q[b];
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            let keys: Vec<usize> = sh.keys(b, i).map(|j| sh.cu_k[b] + j).collect();
            if keys.is_empty() {
                continue;
            }
            let (qi, oi) = (sh.q_at(r, h, 0), sh.q_at(r, h, 0));
            // The logits and each one's derivative in its unscaled score `q·k` (times the
            // scale, and with a cap `1 − tanh²`: the chain rule through `cap·tanh(x·scale/cap)`).
            let (s, grad): (Vec<f64>, Vec<f64>) = keys
                .iter()
                .map(|&kr| {
                    let bias = sh.bias(slopes, b, h, i, kr - sh.cu_k[b]);
                    let x = dot(q, qi, k, sh.k_at(kr, hk, 0));
                    let t = sh.softcap.map_or(0.0, |c| f32r((x * sh.scale / c).tanh()));
                    (f32r(sh.logit(x) + bias), f32r(sh.scale * (1.0 - t * t)))
                })
                .unzip();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| f32r((x - mx).exp())).collect();
            let sum: f64 = f32r(e.iter().sum());
            let p: Vec<f64> = e.iter().map(|x| f32r(x / sum)).collect();
            // O and δ from the same P (the forward's output).
            let mut o = vec![0.0; dd];
            for (x, ox) in o.iter_mut().enumerate() {
                let acc: f64 = keys
                    .iter()
                    .zip(&p)
                    .map(|(&kr, pj)| bf(*pj) * v[sh.k_at(kr, hk, x)] as f64)
                    .sum();
                *ox = bf(acc);
            }
            let delta = f32r((0..dd).map(|x| d_o[oi + x] as f64 * o[x]).sum());
            for ((&kr, pj), gj) in keys.iter().zip(&p).zip(&grad) {
                let dp = f32r(dot(d_o, oi, v, sh.k_at(kr, hk, 0)));
                let ds = bf(f32r(pj * (dp - delta) * gj));
                for x in 0..dd {
                    dv[sh.k_at(kr, hk, x)] += bf(*pj) * d_o[oi + x] as f64;
                    dq[qi + x] += ds * k[sh.k_at(kr, hk, x)] as f64;
                    dk[sh.k_at(kr, hk, x)] += ds * q[qi + x] as f64;
                }
            }
        }
    }
    for g in [&mut dq, &mut dk, &mut dv] {
        for x in g.iter_mut() {
            *x = bf(f32r(*x));
        }
    }
    (dq, dk, dv)
}
