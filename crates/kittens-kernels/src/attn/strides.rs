//! Attention tensors in any strides: each of Q, K, V, O (and the backward's dO, dQ, dK, dV) with its
//! own batch, head and sequence strides, the head dimension contiguous — FlashAttention's rule, what a
//! model hands over without a copy (a Hugging Face Llama's transposed Q beside dense K and V; Q, K, V
//! sliced out of one fused projection, whose row stride is `3·H·D`).
//!
//! A strided program ([`crate::attn_fwd::AttnConfig::strided`], [`crate::attn_bwd::BwdConfig::strided`])
//! declares each such tensor's strides as three kernel parameters, `{name}_sb`, `{name}_sh`,
//! `{name}_ss` (elements), after the shape parameters and in the order it declares the tensors
//! ([`tensor_strides`]); so one compiled kernel serves every layout, and a launch checks the caller's
//! strides against the declaration like any other (the prepared calls of `kittens_runtime::cuda::
//! dispatch`, whose tensor maps take the evaluated strides: TMA needs them in multiples of 16 bytes).
//! A problem carries the values ([`AttnStrides`]); a stage's launch takes them by name
//! ([`named_params`]). The log-sum-exp and the backward's D stay contiguous `[b, h, s]` f32.

use crate::attn::layout::{strides, AttnLayout};
use crate::KernelError;
use kittens_ir::{Expr, Kernel, KernelBuilder};

/// The `[b, h, s]` strides (elements) of every attention tensor of a call, by the name the programs
/// give it; the head dimension's stride is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct AttnStrides {
    pub q: [usize; 3],
    pub k: [usize; 3],
    pub v: [usize; 3],
    pub o: [usize; 3],
    /// The backward's output gradient (the programs' `do`).
    pub d_o: [usize; 3],
    pub dq: [usize; 3],
    pub dk: [usize; 3],
    pub dv: [usize; 3],
}

/// The tensors whose strides a strided program takes as parameters, as the programs name them.
pub const TENSORS: [&str; 8] = ["q", "k", "v", "o", "do", "dq", "dk", "dv"];

/// The parameter names of tensor `name`'s batch, head and sequence strides.
fn names(name: &str) -> [String; 3] {
    ["sb", "sh", "ss"].map(|s| format!("{name}_{s}"))
}

impl AttnStrides {
    /// Tensor `name`'s strides (`None`: not one of [`TENSORS`]).
    pub fn of(&self, name: &str) -> Option<[usize; 3]> {
        Some(match name {
            "q" => self.q,
            "k" => self.k,
            "v" => self.v,
            "o" => self.o,
            "do" => self.d_o,
            "dq" => self.dq,
            "dk" => self.dk,
            "dv" => self.dv,
            _ => return None,
        })
    }

    /// The strides a problem's arguments name: `{tensor}_strides` (three sizes: batch, head, sequence
    /// strides in elements) for any of [`TENSORS`]; `None` when none is named (dense tensors).
    pub fn from_args(a: &crate::problem::NamedArgs) -> Result<Option<AttnStrides>, KernelError> {
        let mut st = AttnStrides::default();
        let mut any = false;
        for t in TENSORS {
            if let Some(v) = a.sizes::<3>(&format!("{t}_strides"))? {
                any = true;
                let slot = match t {
                    "q" => &mut st.q,
                    "k" => &mut st.k,
                    "v" => &mut st.v,
                    "o" => &mut st.o,
                    "do" => &mut st.d_o,
                    "dq" => &mut st.dq,
                    "dk" => &mut st.dk,
                    _ => &mut st.dv,
                };
                *slot = v;
            }
        }
        Ok(any.then_some(st))
    }

    /// Every stride parameter and its value, for [`named_params`].
    pub fn params(&self) -> Result<Vec<(String, i64)>, KernelError> {
        let mut out = Vec::new();
        for t in TENSORS {
            let st = self.of(t).unwrap_or_default();
            for (n, s) in names(t).into_iter().zip(st) {
                let v = i64::try_from(s)
                    .map_err(|_| KernelError::Problem(format!("{n} = {s} exceeds 2^63 - 1")))?;
                out.push((n, v));
            }
        }
        Ok(out)
    }

    /// The dense strides of `layout` for every tensor at these sizes (Q, O, dO, dQ with `heads` heads
    /// and `seq` rows; K, V, dK, dV with `heads_kv` and `seq_kv`).
    pub fn dense(
        layout: AttnLayout,
        heads: usize,
        heads_kv: usize,
        seq: usize,
        seq_kv: usize,
        dim: usize,
    ) -> Self {
        let at = |h: usize, s: usize| match layout {
            AttnLayout::Bshd => [s * h * dim, dim, h * dim],
            AttnLayout::Bhsd => [h * s * dim, s * dim, dim],
        };
        let (q, kv) = (at(heads, seq), at(heads_kv, seq_kv));
        AttnStrides {
            q,
            k: kv,
            v: kv,
            o: q,
            d_o: q,
            dq: q,
            dk: kv,
            dv: kv,
        }
    }
}

/// The logical `[b, h, s, d]` strides of tensor `name` (`heads` heads, `seq` rows, `dim` columns):
/// with `strided`, the kernel parameters `{name}_sb`, `{name}_sh`, `{name}_ss` (declared here) and a
/// contiguous head dimension; otherwise `layout`'s dense strides.
pub fn tensor_strides(
    k: &mut KernelBuilder,
    strided: bool,
    layout: AttnLayout,
    name: &str,
    (heads, seq, dim): (&Expr, &Expr, &Expr),
) -> Vec<Expr> {
    if !strided {
        return strides(layout, heads, seq, dim);
    }
    let [b, h, s] = names(name).map(|n| k.param(&n));
    vec![b, h, s, Expr::c(1)]
}

/// `kernel`'s parameter values in its declared order, each found by name in `values`; a parameter not
/// there is an error naming it (a stage built for a problem that does not give it).
pub fn named_params(kernel: &Kernel, values: &[(String, i64)]) -> Result<Vec<i64>, KernelError> {
    kernel
        .params
        .iter()
        .map(|p| {
            values
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|&(_, v)| v)
                .ok_or_else(|| {
                    KernelError::Problem(format!(
                        "{}: no value for parameter `{}`",
                        kernel.name, p.name
                    ))
                })
        })
        .collect()
}

/// Elements from a `[b, h, s, d]` tensor's first element to its last, plus one (0 when empty): the
/// buffer a strided tensor needs.
pub fn span(shape: [usize; 4], st: [usize; 3]) -> Result<usize, KernelError> {
    if shape.contains(&0) {
        return Ok(0);
    }
    let full = [st[0], st[1], st[2], 1];
    shape
        .iter()
        .zip(full)
        .try_fold(1usize, |acc, (&n, s)| {
            (n - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
        })
        .ok_or_else(|| {
            KernelError::Problem(format!(
                "a tensor of shape {shape:?} and strides {st:?} overflows"
            ))
        })
}

/// The element offset of `[b, h, s, d]` in a tensor of strides `st`.
pub fn offset(st: [usize; 3], [b, h, s, d]: [usize; 4]) -> usize {
    b * st[0] + h * st[1] + s * st[2] + d
}

/// `data` (a strided tensor of `shape`) gathered into dense `[b, h, s, d]` order.
pub fn gather(data: &[f32], shape: [usize; 4], st: [usize; 3]) -> Vec<f32> {
    let [nb, nh, ns, nd] = shape;
    let mut out = Vec::with_capacity(nb * nh * ns * nd);
    for b in 0..nb {
        for h in 0..nh {
            for s in 0..ns {
                let at = offset(st, [b, h, s, 0]);
                out.extend_from_slice(&data[at..at + nd]);
            }
        }
    }
    out
}

/// `dense` (`[b, h, s, d]` order) placed at strides `st` in a buffer of the tensor's span; the
/// elements between its rows `T::default()`.
pub fn scatter<T: Copy + Default>(dense: &[T], shape: [usize; 4], st: [usize; 3]) -> Vec<T> {
    let [_, nh, ns, nd] = shape;
    let mut out = vec![T::default(); span(shape, st).unwrap_or(0)];
    for (i, &x) in dense.iter().enumerate() {
        let at = [i / (nd * ns * nh), i / (nd * ns) % nh, i / nd % ns, i % nd];
        out[offset(st, at)] = x;
    }
    out
}

/// Refuses a written tensor whose elements overlap (two indices at one address: a race between the
/// blocks that write them), naming it and its strides.
pub fn check_no_overlap(name: &str, shape: [usize; 4], st: [usize; 3]) -> Result<(), KernelError> {
    let mut dims: Vec<(usize, usize)> = [
        (st[0], shape[0]),
        (st[1], shape[1]),
        (st[2], shape[2]),
        (1, shape[3]),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 1)
    .collect();
    dims.sort_unstable();
    let mut extent = 1usize;
    for (s, n) in dims {
        if s < extent {
            return Err(KernelError::Problem(format!(
                "{name}: strides {:?} (elements, for (B, H, N) with D contiguous) overlap: a written \
                 tensor needs each element at its own address",
                st
            )));
        }
        extent = extent.saturating_add((n - 1).saturating_mul(s));
    }
    Ok(())
}
