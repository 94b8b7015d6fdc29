//! References of the attention forward at any query and key lengths and either causal alignment, with
//! the log-sum-exp output: the exact forward (f64) and the PyTorch-style bf16 forward, the baseline
//! of the test rule (`crate::reference::check_rule`).
//!
//! The log-sum-exp of query row `i` is `lse_i = ln Σ_j exp(s_ij)` over its kept keys, with
//! `s_ij = q_i·k_j/√d`; a row that keeps no key (causal aligned bottom-right with more queries than
//! keys) has `lse = −∞` and an all-zero output row.

use crate::attn::score::AttnOptions;
use crate::attn::{BwdShape, Causal};
use crate::reference_bwd;
use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};

/// The keys query `i` keeps under `causal` alone: `0..kept`.
pub fn kept(sh: &BwdShape, causal: Causal, i: usize) -> usize {
    reference_bwd::kept(sh, causal, &AttnOptions::default(), i).end
}

/// The exact forward: O in Q's layout, the log-sum-exp `[b, h, s_q]` (`−∞` for a row with no kept
/// key) and the largest `|s_ij|` over kept pairs.
pub fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
) -> (Vec<f64>, Vec<f64>, f64) {
    forward_with(q, k, v, sh, causal, &AttnOptions::default())
}

/// [`forward`] with the logits (any scale, a soft cap) and window of `opts`; the log-sum-exp is of
/// those logits.
pub fn forward_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    opts: &AttnOptions,
) -> (Vec<f64>, Vec<f64>, f64) {
    // The backward's reference computes the same forward; its empty rows carry `+∞` (what makes
    // `exp(s − lse)` vanish there), the forward's output contract `−∞` (the log of an empty sum).
    let f = reference_bwd::forward_with(q, k, v, sh, causal, opts);
    let lse = f
        .lse
        .iter()
        .map(|&x| {
            if x == f64::INFINITY {
                f64::NEG_INFINITY
            } else {
                x
            }
        })
        .collect();
    (f.o, lse, f.max_abs_logit)
}

/// The forward the way PyTorch's math path computes it in bf16 (as
/// `crate::reference::attention_bf16_baseline`: f32 scores scaled in f32, f32 softmax, P rounded to
/// bf16, f32 accumulation of P·V rounded to bf16 once), at any lengths and alignment; the log-sum-exp
/// `max + ln Σ exp(s − max)` in f32 from the same scores. Returns O (Q's layout) and the log-sum-exp.
/// O rounds with `rounding`, the kernel's output rounding: the baseline of an RTZ kernel truncates
/// too (MI300X-attn §6 compares each rounding mode with the same mode); P always rounds RTNE.
pub fn forward_bf16_baseline(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    rounding: Rounding,
) -> (Vec<f32>, Vec<f32>) {
    forward_bf16_baseline_with(q, k, v, sh, causal, rounding, &AttnOptions::default())
}

/// [`forward_bf16_baseline`] with the logits and window of `opts`, the logits computed in f32 from
/// the f32 score (`Logits::f32`).
pub fn forward_bf16_baseline_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &BwdShape,
    causal: Causal,
    rounding: Rounding,
    opts: &AttnOptions,
) -> (Vec<f32>, Vec<f32>) {
    let lg = &opts.logits;
    let bf16 = |x: f32| round(x, DType::Bf16, Rounding::Rtne);
    let mut o = vec![0.0f32; sh.q_len()];
    let mut lse = vec![f32::NEG_INFINITY; sh.lse_len()];
    let mut p = vec![0.0f32; sh.seq_kv];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let hk = sh.kv_head(h);
            for i in 0..sh.seq_q {
                let keys = reference_bwd::kept(sh, causal, opts, i);
                if keys.is_empty() {
                    continue; // O stays 0, the log-sum-exp −∞
                }
                let p = &mut p[..keys.len()];
                for (pj, j) in p.iter_mut().zip(keys.clone()) {
                    let dot = (0..sh.dim).fold(0.0f32, |acc, x| {
                        acc + q[sh.q_at(b, h, i, x)] * k[sh.kv_at(b, hk, j, x)]
                    });
                    let bias = opts.bias((b, h, sh.heads), (sh.seq_q, sh.seq_kv), i, j);
                    *pj = lg.f32(dot, sh.dim) + bias as f32;
                }
                let mx = p.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for pj in p.iter_mut() {
                    *pj = (*pj - mx).exp();
                    sum += *pj;
                }
                lse[sh.lse_at(b, h, i)] = mx + sum.ln();
                p.iter_mut().for_each(|pj| *pj = bf16(*pj / sum));
                for x in 0..sh.dim {
                    let acc = p
                        .iter()
                        .zip(keys.clone())
                        .fold(0.0f32, |acc, (pj, j)| acc + pj * v[sh.kv_at(b, hk, j, x)]);
                    o[sh.q_at(b, h, i, x)] = round(acc, DType::Bf16, rounding);
                }
            }
        }
    }
    (o, lse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::AttnLayout;
    use crate::problem::random;
    use rand::{rngs::SmallRng, SeedableRng};

    fn shape(seq_q: usize, seq_kv: usize) -> BwdShape {
        BwdShape {
            batch: 1,
            heads: 2,
            heads_kv: 1,
            seq_q,
            seq_kv,
            dim: 32,
            layout: AttnLayout::Bhsd,
        }
    }

    /// The log-sum-exp from its definition, summed directly in f64 (no max subtracted) at small
    /// logits, against the reference's stable form; and the two alignments' empty rows.
    #[test]
    fn lse_is_the_log_of_the_softmax_denominator() {
        let sh = shape(7, 4);
        let mut rng = SmallRng::seed_from_u64(3);
        let q = random(&mut rng, sh.q_len(), DType::Bf16);
        let k = random(&mut rng, sh.kv_len(), DType::Bf16);
        let v = random(&mut rng, sh.kv_len(), DType::Bf16);
        for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
            let (o, lse, _) = forward(&q, &k, &v, &sh, causal);
            let (ob, lseb) = forward_bf16_baseline(&q, &k, &v, &sh, causal, Rounding::Rtne);
            for h in 0..2 {
                for i in 0..7 {
                    let keys = kept(&sh, causal, i);
                    let direct: f64 = (0..keys)
                        .map(|j| {
                            let s: f64 = (0..32)
                                .map(|x| {
                                    q[sh.q_at(0, h, i, x)] as f64 * k[sh.kv_at(0, 0, j, x)] as f64
                                })
                                .sum();
                            (s / 32f64.sqrt()).exp()
                        })
                        .sum::<f64>()
                        .ln();
                    let (got, base) = (lse[sh.lse_at(0, h, i)], lseb[sh.lse_at(0, h, i)]);
                    if keys == 0 {
                        assert_eq!(got, f64::NEG_INFINITY, "{causal:?} row {i}");
                        assert_eq!(base, f32::NEG_INFINITY, "{causal:?} row {i}");
                        assert!((0..32).all(|x| o[sh.q_at(0, h, i, x)] == 0.0));
                        assert!((0..32).all(|x| ob[sh.q_at(0, h, i, x)] == 0.0));
                    } else {
                        assert!(
                            (got - direct).abs() < 1e-12,
                            "{causal:?} row {i}: {got} vs {direct}"
                        );
                        assert!((base as f64 - direct).abs() < 1e-5, "{causal:?} row {i}");
                    }
                }
            }
        }
        // Bottom-right with 7 queries and 4 keys: rows 0..3 keep nothing, row 6 keeps all 4.
        assert_eq!(kept(&sh, Causal::BottomRight, 2), 0);
        assert_eq!(kept(&sh, Causal::BottomRight, 3), 1);
        assert_eq!(kept(&sh, Causal::BottomRight, 6), 4);
        assert_eq!(kept(&sh, Causal::TopLeft, 6), 4);
        assert_eq!(kept(&sh, Causal::TopLeft, 1), 2);
    }
}
