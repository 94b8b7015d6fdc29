//! The checks of the memory-bound kernels' calls: `layernorm` (rows of D values, weight and bias of D,
//! both outputs in one `(2, …, D)` array) and `rotary` (logical (B, H, N, D) in one of attention's two
//! dense layouts, `[N, D/2]` tables). Layouts are read in place or refused, as for the other kernels.

use kittens_kernels::attn::AttnLayout;

use crate::view::{attn_strides, disjoint, ndim, same_device, ApiError, Device, View};

/// A checked layernorm call: `x`, `residual` hold `rows × dim` dense row-major values, `weight` and
/// `bias` `dim`, `out` is `(2, rows…, dim)` (plane 0 the output, plane 1 the new residual).
#[derive(Debug, Clone, Copy)]
pub struct LayerNorm {
    pub device: Device,
    pub x: u64,
    pub residual: u64,
    pub weight: u64,
    pub bias: u64,
    pub out: u64,
    pub rows: usize,
    pub dim: usize,
}

fn dense(v: &View) -> Result<(), ApiError> {
    let mut want = vec![0usize; v.shape.len()];
    let mut s = 1usize;
    for i in (0..v.shape.len()).rev() {
        want[i] = s;
        s = s.saturating_mul(v.shape[i]);
    }
    if v.strides_are(&want) {
        Ok(())
    } else {
        Err(ApiError::Value(format!(
            "{} must be contiguous (strides {want:?}), got strides {:?}; the kernel reads it in place \
             and kittens makes no hidden copies",
            v.name, v.strides
        )))
    }
}

pub fn layernorm(
    x: &View,
    residual: &View,
    weight: &View,
    bias: &View,
    out: &View,
) -> Result<LayerNorm, ApiError> {
    let Some((&dim, lead)) = x.shape.split_last() else {
        return Err(ApiError::Value(
            "x must have at least one dimension (…, D)".into(),
        ));
    };
    if residual.shape != x.shape {
        return Err(ApiError::Value(format!(
            "residual has shape {}, x has shape {}",
            residual.dims(),
            x.dims()
        )));
    }
    for v in [weight, bias] {
        ndim(v, 1, &format!("({dim},)"))?;
        if v.shape[0] != dim {
            return Err(ApiError::Value(format!(
                "{} has shape {}, x's rows have {dim} values",
                v.name,
                v.dims()
            )));
        }
    }
    let mut want = vec![2];
    want.extend_from_slice(&x.shape);
    if out.shape != want {
        return Err(ApiError::Value(format!(
            "out has shape {}, the two outputs of x {} are {want:?}",
            out.dims(),
            x.dims()
        )));
    }
    let device = same_device(&[x, residual, weight, bias, out])?;
    for v in [x, residual, weight, bias, out] {
        dense(v)?;
    }
    disjoint(out, &[x, residual, weight, bias])?;
    let rows = lead
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| ApiError::Value(format!("x of shape {} is too large", x.dims())))?;
    Ok(LayerNorm {
        device,
        x: x.ptr,
        residual: residual.ptr,
        weight: weight.ptr,
        bias: bias.ptr,
        out: out.ptr,
        rows,
        dim,
    })
}

/// A checked rotary call: `q` and `out` logical (B, H, N, D) in one dense layout, `cos`, `sin` (N, D/2)
/// contiguous; `out` may be `q` itself (in place) but must not partly overlap it.
#[derive(Debug, Clone, Copy)]
pub struct Rotary {
    pub device: Device,
    pub q: u64,
    pub cos: u64,
    pub sin: u64,
    pub out: u64,
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub dim: usize,
    pub layout: AttnLayout,
}

pub fn rotary(q: &View, cos: &View, sin: &View, out: &View) -> Result<Rotary, ApiError> {
    ndim(q, 4, "(B, H, N, D)")?;
    let s = &q.shape;
    let (batch, heads, seq, dim) = (s[0], s[1], s[2], s[3]);
    let layout = [AttnLayout::Bhsd, AttnLayout::Bshd]
        .into_iter()
        .find(|&l| q.strides_are(&attn_strides(l, s)))
        .ok_or_else(|| {
            ApiError::Value(format!(
                "q must be dense (B, H, N, D), or (B, N, H, D) seen through .transpose(1, 2); got \
                 strides {:?} for shape {}",
                q.strides,
                q.dims()
            ))
        })?;
    if out.shape != q.shape || !out.strides_are(&attn_strides(layout, s)) {
        return Err(ApiError::Value(format!(
            "out must have q's shape {} and memory order, got shape {} strides {:?}",
            q.dims(),
            out.dims(),
            out.strides
        )));
    }
    for t in [cos, sin] {
        ndim(t, 2, "(N, D/2)")?;
        if t.shape != [seq, dim / 2] {
            return Err(ApiError::Value(format!(
                "{} has shape {}, the tables of q {} are [{seq}, {}]",
                t.name,
                t.dims(),
                q.dims(),
                dim / 2
            )));
        }
        dense(t)?;
    }
    let device = same_device(&[q, cos, sin, out])?;
    disjoint(out, &[cos, sin])?;
    if out.ptr != q.ptr {
        disjoint(out, &[q])?;
    }
    Ok(Rotary {
        device,
        q: q.ptr,
        cos: cos.ptr,
        sin: sin.ptr,
        out: out.ptr,
        batch,
        heads,
        seq,
        dim,
        layout,
    })
}
