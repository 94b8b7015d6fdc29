//! f64 references every backend is checked against, and the error measures reported for them.

use crate::attn_fwd::AttnLayout;

/// `C = A·Bᵀ` in f64: A is M×K, B is N×K, both row-major; C is M×N row-major.
pub fn gemm_abt(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        let ar = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let br = &b[j * k..(j + 1) * k];
            c[i * n + j] = ar.iter().zip(br).map(|(&x, &y)| x as f64 * y as f64).sum();
        }
    }
    c
}

/// Sizes of an attention problem; Q/O have `heads` heads, K/V `heads_kv` (GQA when fewer).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AttnShape {
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub seq: usize,
    pub dim: usize,
    pub layout: AttnLayout,
}

impl AttnShape {
    /// Element offset of `[b, h, s, d]` in a tensor with `nh` heads.
    pub fn offset(&self, nh: usize, b: usize, h: usize, s: usize, d: usize) -> usize {
        match self.layout {
            AttnLayout::Bshd => ((b * self.seq + s) * nh + h) * self.dim + d,
            AttnLayout::Bhsd => ((b * nh + h) * self.seq + s) * self.dim + d,
        }
    }
    pub fn len(&self, nh: usize) -> usize {
        self.batch * nh * self.seq * self.dim
    }
    pub fn is_empty(&self) -> bool {
        self.len(self.heads) == 0
    }
}

/// `softmax(Q·Kᵀ/√d)·V` in f64 per (batch, head), query head `h` using KV head `h / (heads/heads_kv)`;
/// `causal` keeps key `j ≤` query `i` (PyTorch's top-left `is_causal`). Output in Q's layout.
pub fn attention(q: &[f32], k: &[f32], v: &[f32], sh: &AttnShape, causal: bool) -> Vec<f64> {
    let (s, dd) = (sh.seq, sh.dim);
    let group = sh.heads / sh.heads_kv.max(1);
    let scale = 1.0 / (dd as f64).sqrt();
    let mut o = vec![0.0; sh.len(sh.heads)];
    let mut p = vec![0.0; s];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let hk = h / group.max(1);
            for i in 0..s {
                let keys = if causal { i + 1 } else { s };
                for (j, pj) in p.iter_mut().enumerate().take(keys) {
                    *pj = (0..dd)
                        .map(|x| {
                            q[sh.offset(sh.heads, b, h, i, x)] as f64
                                * k[sh.offset(sh.heads_kv, b, hk, j, x)] as f64
                        })
                        .sum::<f64>()
                        * scale;
                }
                let mx = p[..keys].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for pj in &mut p[..keys] {
                    *pj = (*pj - mx).exp();
                    sum += *pj;
                }
                for x in 0..dd {
                    let acc: f64 = (0..keys)
                        .map(|j| p[j] * v[sh.offset(sh.heads_kv, b, hk, j, x)] as f64)
                        .sum();
                    o[sh.offset(sh.heads, b, h, i, x)] = acc / sum;
                }
            }
        }
    }
    o
}

/// Error of `out` against `reference`: `rel_err = ‖out − ref‖_F / ‖ref‖_F`; `max_rel = max|out − ref| /
/// max|ref|`; `mean_rel = mean|out − ref| / mean|ref|` (normalised by the reference's scale rather than per
/// element, which would blow up at entries near zero).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ErrorReport {
    pub rel_err: f64,
    pub max_rel: f64,
    pub mean_rel: f64,
}

pub fn compare(out: &[f32], reference: &[f64]) -> ErrorReport {
    let (mut d2, mut r2, mut dmax, mut rmax, mut dsum, mut rsum) =
        (0.0, 0.0, 0.0f64, 0.0f64, 0.0, 0.0);
    for (&o, &r) in out.iter().zip(reference) {
        let d = (o as f64 - r).abs();
        d2 += d * d;
        r2 += r * r;
        dmax = dmax.max(if d.is_nan() { f64::INFINITY } else { d });
        rmax = rmax.max(r.abs());
        dsum += d;
        rsum += r.abs();
    }
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { a };
    ErrorReport {
        rel_err: div(d2.sqrt(), r2.sqrt()),
        max_rel: div(dmax, rmax),
        mean_rel: div(dsum, rsum),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With one key the softmax is 1, so the output is that key's value row.
    #[test]
    fn attention_single_key_returns_value() {
        let sh = AttnShape {
            batch: 1,
            heads: 2,
            heads_kv: 1,
            seq: 1,
            dim: 3,
            layout: AttnLayout::Bhsd,
        };
        let q = [0.3, -1.0, 2.0, 1.0, 1.0, 1.0];
        let (k, v) = ([0.5, 0.5, 0.5], [1.0, -2.0, 4.0]);
        let o = attention(&q, &k, &v, &sh, false);
        assert_eq!(o, vec![1.0, -2.0, 4.0, 1.0, -2.0, 4.0]);
    }

    #[test]
    fn gemm_matches_hand_product() {
        // [1 2; 3 4] · [5 6; 7 8]ᵀ = [17 23; 39 53]
        let c = gemm_abt(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2, 2, 2);
        assert_eq!(c, vec![17.0, 23.0, 39.0, 53.0]);
    }
}
