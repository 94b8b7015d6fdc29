//! f64 references of the attention backward (the gradients dQ, dK, dV of `O = softmax(Q·Kᵀ/√d)·V`,
//! or of any logits `crate::attn::score::Logits` describes: the `_with` forms),
//! the forward quantities a backward takes as inputs (O and the log-sum-exp), and the PyTorch-style
//! bf16 backward, the baseline of the test rule (`crate::reference::check_rule`).
//!
//! The gradients (FlashAttention-2 Algorithm 2, in exact arithmetic): with `s_ij = q_i·k_j/√d` over
//! the kept keys, `P = softmax(s)` per row, `dP_ij = dO_i·v_j`, `D_i = Σ_j P_ij·dP_ij = dO_i·O_i`,
//! `dS_ij = P_ij·(dP_ij − D_i)`: `dV_j = Σ_i P_ij·dO_i`, `dQ_i = Σ_j dS_ij·k_j/√d`,
//! `dK_j = Σ_i dS_ij·q_i/√d`, dK and dV summed over the query heads that share a KV head (GQA). With
//! other logits `l_ij = f(q_i·k_j)`, `1/√d` becomes `f′(q_i·k_j)` inside each sum.
//! A query row with no kept key (causal, bottom-right, more queries than keys) has `O = 0`,
//! `lse = +∞` and contributes nothing.

use crate::attn::score::AttnOptions;
use crate::attn::{BwdShape, Causal};
use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use std::ops::Range;

/// The exact forward at `q, k, v`: O (Q's layout), the log-sum-exp `lse_i = max_j s_ij +
/// ln Σ_j exp(s_ij − max)` (`[b, h, s_q]` contiguous; `+∞` for a row with no kept key) and the largest
/// `|s_ij|` over kept pairs.
pub struct Forward {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
    pub max_abs_logit: f64,
}

/// The exact gradients, dQ in Q's layout, dK and dV in K's.
pub struct Grads {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
}

/// The keys query `i` keeps.
pub(crate) fn kept(sh: &BwdShape, causal: Causal, opts: &AttnOptions, i: usize) -> Range<usize> {
    opts.keys(causal, sh.seq_q, sh.seq_kv, i)
}

/// The dots `q_i·k_{j0 + j}` of row `(b, h, i)` into `s[j]`.
fn dots(
    q: &[f32],
    k: &[f32],
    sh: &BwdShape,
    (b, h, i): (usize, usize, usize),
    j0: usize,
    s: &mut [f64],
) {
    let hk = sh.kv_head(h);
    for (j, sj) in s.iter_mut().enumerate() {
        *sj = (0..sh.dim)
            .map(|x| q[sh.q_at(b, h, i, x)] as f64 * k[sh.kv_at(b, hk, j0 + j, x)] as f64)
            .sum::<f64>();
    }
}

/// Softmax of `s` in place; returns the log-sum-exp (`+∞` for an empty row).
fn softmax(s: &mut [f64]) -> f64 {
    if s.is_empty() {
        return f64::INFINITY;
    }
    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = s.iter().map(|x| (x - mx).exp()).sum();
    let lse = mx + sum.ln();
    s.iter_mut().for_each(|x| *x = (*x - lse).exp());
    lse
}

/// The exact forward (see [`Forward`]).
pub fn forward(q: &[f32], k: &[f32], v: &[f32], sh: &BwdShape, causal: Causal) -> Forward {
    forward_with(q, k, v, sh, causal, &AttnOptions::default())
}

/// [`forward`] with the logits and window of `opts`.
pub fn forward_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> Forward {
    let mut o = vec![0.0; sh.q_len()];
    let mut lse = vec![0.0; sh.lse_len()];
    let mut max_abs_logit = 0.0f64;
    let mut p = vec![0.0; sh.seq_kv];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            for i in 0..sh.seq_q {
                let keys = kept(sh, causal, opts, i);
                let p = &mut p[..keys.len()];
                dots(q, k, sh, (b, h, i), keys.start, p);
                for (x, j) in p.iter_mut().zip(keys.clone()) {
                    let bias = opts.bias((b, h, sh.heads), (sh.seq_q, sh.seq_kv), i, j);
                    *x = opts.logits.f64(*x, sh.dim) + bias;
                }
                max_abs_logit = p.iter().fold(max_abs_logit, |m, x| m.max(x.abs()));
                lse[sh.lse_at(b, h, i)] = softmax(p);
                for x in 0..sh.dim {
                    o[sh.q_at(b, h, i, x)] = p
                        .iter()
                        .zip(keys.clone())
                        .map(|(pj, j)| pj * v[sh.kv_at(b, hk, j, x)] as f64)
                        .sum();
                }
            }
        }
    }
    Forward {
        o,
        lse,
        max_abs_logit,
    }
}

/// The exact gradients (see the module documentation) at `q, k, v` for the output gradient `d_o`.
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &BwdShape,
    causal: Causal,
) -> Grads {
    backward_with(q, k, v, d_o, sh, causal, &AttnOptions::default())
}

/// [`backward`] with the logits and window of `opts`.
pub fn backward_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> Grads {
    backward_dlse(q, k, v, d_o, None, sh, causal, opts)
}

/// [`backward_with`] with the log-sum-exp's gradient `dlse` (f32 `[b, h, s_q]`, `None`: 0) as well:
/// `d lse_i / d S_ij = P_ij`, so `dS_ij = P_ij·(dP_ij − D_i + dlse_i)`.
#[allow(clippy::too_many_arguments)]
pub fn backward_dlse(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    dlse: Option<&[f32]>,
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> Grads {
    let lg = &opts.logits;
    let mut dot = vec![0.0; sh.seq_kv];
    let (mut dq, mut dk, mut dv) = (
        vec![0.0; sh.q_len()],
        vec![0.0; sh.kv_len()],
        vec![0.0; sh.kv_len()],
    );
    let (mut p, mut dp) = (vec![0.0; sh.seq_kv], vec![0.0; sh.seq_kv]);
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            for i in 0..sh.seq_q {
                let keys = kept(sh, causal, opts, i);
                let n = keys.len();
                let (p, dp, dot) = (&mut p[..n], &mut dp[..n], &mut dot[..n]);
                dots(q, k, sh, (b, h, i), keys.start, dot);
                for ((pj, &x), j) in p.iter_mut().zip(dot.iter()).zip(keys.clone()) {
                    let bias = opts.bias((b, h, sh.heads), (sh.seq_q, sh.seq_kv), i, j);
                    *pj = lg.f64(x, sh.dim) + bias;
                }
                softmax(p);
                let doi = |x| d_o[sh.q_at(b, h, i, x)] as f64;
                for (dpj, j) in dp.iter_mut().zip(keys.clone()) {
                    *dpj = (0..sh.dim)
                        .map(|x| doi(x) * v[sh.kv_at(b, hk, j, x)] as f64)
                        .sum();
                }
                let d: f64 = p.iter().zip(dp.iter()).map(|(a, b)| a * b).sum::<f64>()
                    - dlse.map_or(0.0, |l| f64::from(l[(b * sh.heads + h) * sh.seq_q + i]));
                for (t, j) in keys.enumerate() {
                    let ds = p[t] * (dp[t] - d) * lg.grad_f64(dot[t], sh.dim);
                    for x in 0..sh.dim {
                        let kv = sh.kv_at(b, hk, j, x);
                        dq[sh.q_at(b, h, i, x)] += ds * k[kv] as f64;
                        dk[kv] += ds * q[sh.q_at(b, h, i, x)] as f64;
                        dv[kv] += p[t] * doi(x);
                    }
                }
            }
        }
    }
    Grads { dq, dk, dv }
}

/// The backward the way PyTorch's math path computes it in bf16 (autograd through
/// `softmax(Q·Kᵀ·scale)·V` with bf16 tensors), the baseline of the test rule. Every `f32` operation
/// rounds to f32; sums run in index order. Step by step:
///
/// 1. The forward as `crate::reference::attention_bf16_baseline`: f32 scores, f32 softmax, P rounded
///    to bf16.
/// 2. `dV = Pᵀ·dO` and `dP = dO·Vᵀ`, f32 accumulation, each rounded to bf16 (matmul outputs).
/// 3. The softmax backward on bf16 `P` and `dP`: `dS_ij = P_ij·(dP_ij − Σ_j P_ij·dP_ij)` in f32,
///    rounded to bf16.
/// 4. `dQ = dS·K·scale`, `dK = dSᵀ·Q·scale`, f32 accumulation, the scale on the f32 sum, rounded to
///    bf16 (one rounding where PyTorch's scaled operands give two or three: stricter).
/// 5. GQA: each query head's dK and dV are rounded to bf16, then summed over the group in f32 and
///    rounded again (the backward of expanding K and V to every query head).
///
/// Returns dQ, dK, dV in their tensors' layouts.
pub fn backward_bf16_baseline(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &BwdShape,
    causal: Causal,
) -> [Vec<f32>; 3] {
    backward_bf16_baseline_with(q, k, v, d_o, sh, causal, &AttnOptions::default())
}

/// [`backward_bf16_baseline`] with the logits `lg`: with a soft cap, dS is multiplied by the cap's
/// derivative (`1 − tanh²`, f32) before its bf16 rounding, as autograd through `cap·tanh(s/cap)`
/// in f32 scores does; the scale stays on the f32 sums.
pub fn backward_bf16_baseline_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> [Vec<f32>; 3] {
    backward_bf16_baseline_dlse(q, k, v, d_o, None, sh, causal, opts)
}

/// [`backward_bf16_baseline_with`] with the log-sum-exp's gradient `dlse` (f32 `[b, h, s_q]`) taken
/// off the softmax backward's row sum in f32, as autograd adds the lse's term to dS.
#[allow(clippy::too_many_arguments)]
pub fn backward_bf16_baseline_dlse(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    dlse: Option<&[f32]>,
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> [Vec<f32>; 3] {
    let lg = &opts.logits;
    let bf16 = |x: f32| round(x, DType::Bf16, Rounding::Rtne);
    let scale = lg.scale(sh.dim as u32);
    // d logit / d(x·scale) of each kept pair (1 without a cap).
    let mut cap_grad = vec![1.0f32; sh.seq_q * sh.seq_kv];
    let (sq, skv, dd) = (sh.seq_q, sh.seq_kv, sh.dim);
    let mut dq = vec![0.0f32; sh.q_len()];
    let (mut dk, mut dv) = (vec![0.0f32; sh.kv_len()], vec![0.0f32; sh.kv_len()]);
    // One query head's P, dS (rows × keys) and dK, dV accumulators (keys × dim).
    let (mut p, mut ds) = (vec![0.0f32; sq * skv], vec![0.0f32; sq * skv]);
    let (mut dk_h, mut dv_h) = (vec![0.0f32; skv * dd], vec![0.0f32; skv * dd]);
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            let qv = |i, x| q[sh.q_at(b, h, i, x)];
            let dov = |i, x| d_o[sh.q_at(b, h, i, x)];
            let kv = |j, x| sh.kv_at(b, hk, j, x);
            for i in 0..sq {
                let keys = kept(sh, causal, opts, i);
                let row = &mut p[i * skv..(i + 1) * skv];
                row.fill(0.0);
                for j in keys.clone() {
                    let dot = (0..dd).fold(0.0f32, |a, x| a + qv(i, x) * k[kv(j, x)]);
                    let bias = opts.bias((b, h, sh.heads), (sq, skv), i, j);
                    row[j] = lg.f32(dot, dd) + bias as f32;
                    cap_grad[i * skv + j] = lg.grad_f32(dot, dd) / scale;
                }
                let kept_row = &mut row[keys.clone()];
                let mx = kept_row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for pj in kept_row.iter_mut() {
                    *pj = (*pj - mx).exp();
                    sum += *pj;
                }
                kept_row.iter_mut().for_each(|pj| *pj = bf16(*pj / sum));
                // dP (bf16), then the softmax backward.
                let drow = &mut ds[i * skv..(i + 1) * skv];
                drow.fill(0.0);
                for j in keys.clone() {
                    drow[j] = bf16((0..dd).fold(0.0f32, |a, x| a + dov(i, x) * v[kv(j, x)]));
                }
                let dsum = keys.clone().fold(0.0f32, |a, j| a + row[j] * drow[j])
                    - dlse.map_or(0.0, |l| l[(b * sh.heads + h) * sq + i]);
                for j in keys {
                    drow[j] = bf16(row[j] * (drow[j] - dsum) * cap_grad[i * skv + j]);
                }
            }
            for x in 0..dd {
                for i in 0..sq {
                    let acc = (0..skv).fold(0.0f32, |a, j| a + ds[i * skv + j] * k[kv(j, x)]);
                    dq[sh.q_at(b, h, i, x)] = bf16(acc * scale);
                }
                for j in 0..skv {
                    let (mut a, mut c) = (0.0f32, 0.0f32);
                    for i in 0..sq {
                        a += ds[i * skv + j] * qv(i, x);
                        c += p[i * skv + j] * dov(i, x);
                    }
                    dk_h[j * dd + x] = bf16(a * scale);
                    dv_h[j * dd + x] = bf16(c);
                }
            }
            for j in 0..skv {
                for x in 0..dd {
                    let at = kv(j, x);
                    let first = h % sh.group() == 0;
                    let (ok, ov) = if first { (0.0, 0.0) } else { (dk[at], dv[at]) };
                    dk[at] = bf16(ok + dk_h[j * dd + x]);
                    dv[at] = bf16(ov + dv_h[j * dd + x]);
                }
            }
        }
    }
    [dq, dk, dv]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::AttnLayout;

    fn shape(seq_q: usize, seq_kv: usize, dim: usize) -> BwdShape {
        BwdShape {
            batch: 1,
            heads: 1,
            heads_kv: 1,
            seq_q,
            seq_kv,
            dim,
            layout: AttnLayout::Bhsd,
        }
    }

    /// One key: P = 1, so dV = dO, D = dO·v, dS = 0, dQ = dK = 0; lse is the one logit.
    #[test]
    fn one_key_gradients_by_hand() {
        let sh = shape(1, 1, 2);
        let (q, k, v, d_o) = ([1.0, 2.0], [0.5, -1.0], [3.0, 4.0], [0.25, -2.0]);
        let f = forward(&q, &k, &v, &sh, Causal::No);
        assert_eq!(f.o, vec![3.0, 4.0]);
        let logit = (0.5 - 2.0) / 2f64.sqrt();
        assert!((f.lse[0] - logit).abs() < 1e-15);
        let g = backward(&q, &k, &v, &d_o, &sh, Causal::No);
        assert_eq!(g.dv, vec![0.25, -2.0]);
        assert_eq!(g.dq, vec![0.0, 0.0]);
        assert_eq!(g.dk, vec![0.0, 0.0]);
    }

    /// Two keys, d = 1, q = 0: P = (½, ½). dP = dO·v = (1·2, 1·4) = (2, 4), D = 3, dS = (−½, ½);
    /// dQ = Σ dS·k = −½·1 + ½·3 = 1, dK = dS·q = 0, dV = P·dO = (½, ½).
    #[test]
    fn two_keys_gradients_by_hand() {
        let sh = shape(1, 2, 1);
        let g = backward(&[0.0], &[1.0, 3.0], &[2.0, 4.0], &[1.0], &sh, Causal::No);
        assert!((g.dq[0] - 1.0).abs() < 1e-15, "{:?}", g.dq);
        assert_eq!(g.dk, vec![0.0, 0.0]);
        assert_eq!(g.dv, vec![0.5, 0.5]);
    }

    /// The gradients are the derivatives of `L = Σ dO∘O`: central differences of the f64 forward
    /// agree with [`backward`] for every input, GQA, bottom-right causal with more queries than keys
    /// (a fully masked row), BSHD.
    #[test]
    fn gradients_match_finite_differences() {
        let sh = BwdShape {
            batch: 1,
            heads: 2,
            heads_kv: 1,
            seq_q: 4,
            seq_kv: 3,
            dim: 2,
            layout: AttnLayout::Bshd,
        };
        let causal = Causal::BottomRight;
        let r = |n: usize, s: f32| -> Vec<f32> {
            (0..n).map(|x| (x as f32 * 0.37 + s).sin() * 1.5).collect()
        };
        let (q, k, v, d_o) = (
            r(sh.q_len(), 0.1),
            r(sh.kv_len(), 0.7),
            r(sh.kv_len(), 1.3),
            r(sh.q_len(), 2.9),
        );
        let g = backward(&q, &k, &v, &d_o, &sh, causal);
        let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
            let f = forward(q, k, v, &sh, causal);
            f.o.iter().zip(&d_o).map(|(o, d)| o * *d as f64).sum()
        };
        let eps = 1e-3f32;
        let fd = |which: usize, at: usize| -> f64 {
            let mut t = [q.clone(), k.clone(), v.clone()];
            t[which][at] += eps;
            let up = loss(&t[0], &t[1], &t[2]);
            t[which][at] -= 2.0 * eps;
            let down = loss(&t[0], &t[1], &t[2]);
            // The perturbation is what f32 represents, not eps exactly.
            let step = (t[which][at] + 2.0 * eps) as f64 - t[which][at] as f64;
            (up - down) / step
        };
        for (which, grad) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
            for (at, &want) in grad.iter().enumerate() {
                let got = fd(which, at);
                assert!(
                    (got - want).abs() < 1e-4,
                    "tensor {which} at {at}: {got} vs {want}"
                );
            }
        }
        // Query 0 keeps no key (bottom-right: key j ≤ i + 3 − 4): lse = +∞, no gradient.
        let f = forward(&q, &k, &v, &sh, causal);
        assert_eq!(f.lse[sh.lse_at(0, 0, 0)], f64::INFINITY);
        assert!((0..2).all(|x| g.dq[sh.q_at(0, 0, 0, x)] == 0.0));
    }

    /// The baseline agrees with the exact gradients to bf16 accuracy on a small random problem.
    #[test]
    fn baseline_is_close_to_exact() {
        let sh = BwdShape {
            heads: 2,
            ..shape(5, 7, 4)
        };
        let r = |n: usize, s: f32| -> Vec<f32> {
            (0..n)
                .map(|x| round((x as f32 * 0.61 + s).sin(), DType::Bf16, Rounding::Rtne))
                .collect()
        };
        let (q, k, v, d_o) = (
            r(sh.q_len(), 0.2),
            r(sh.kv_len(), 0.9),
            r(sh.kv_len(), 1.7),
            r(sh.q_len(), 2.3),
        );
        let g = backward(&q, &k, &v, &d_o, &sh, Causal::TopLeft);
        let base = backward_bf16_baseline(&q, &k, &v, &d_o, &sh, Causal::TopLeft);
        for (b, e) in base.iter().zip([&g.dq, &g.dk, &g.dv]) {
            let err = crate::reference::compare(b, e);
            assert!(err.rel_err > 0.0 && err.rel_err < 2e-2, "{err:?}");
        }
    }
}
