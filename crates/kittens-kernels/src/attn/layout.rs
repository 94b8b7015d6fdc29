//! The memory order of attention tensors: every attention program, reference and launcher views Q, K,
//! V, O (and the gradients) as logical `[batch, heads, seq, dim]` over one of two layouts (no copies),
//! or over the caller's own strides ([`super::strides`]).

use kittens_ir::Expr;

/// Memory order of the `[batch, heads, seq, dim]` tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnLayout {
    /// `[batch, seq, heads, dim]` (PyTorch's usual projection output).
    Bshd,
    /// `[batch, heads, seq, dim]`.
    Bhsd,
}

impl AttnLayout {
    /// Element offset of `[b, h, s, x]` in a dense tensor of `heads` heads, `seq` rows and `dim`
    /// columns in this layout.
    pub fn offset(
        self,
        (heads, seq, dim): (usize, usize, usize),
        (b, h, s, x): (usize, usize, usize, usize),
    ) -> usize {
        match self {
            AttnLayout::Bshd => ((b * seq + s) * heads + h) * dim + x,
            AttnLayout::Bhsd => ((b * heads + h) * seq + s) * dim + x,
        }
    }
}

/// Logical `[b, h, s, d]` strides (elements) of a tensor with `heads` heads in `layout`.
pub fn strides(layout: AttnLayout, heads: &Expr, seq: &Expr, dim: &Expr) -> Vec<Expr> {
    match layout {
        AttnLayout::Bshd => vec![
            seq * heads.clone() * dim.clone(),
            dim.clone(),
            heads * dim.clone(),
            Expr::c(1),
        ],
        AttnLayout::Bhsd => vec![
            heads * seq.clone() * dim.clone(),
            seq * dim.clone(),
            dim.clone(),
            Expr::c(1),
        ],
    }
}
