//! The sizes of an attention call: [`AttnShape`] (queries and keys of one length, the forward's and
//! rotary's), [`BwdShape`] (query and key lengths apart, the backward's and the references'), and the
//! causal mask's alignment ([`Causal`]).

use super::layout::AttnLayout;
use super::score::{AttnArgs, AttnOptions};
use crate::problem::NamedArgs;
use crate::KernelError;
use kittens_ir::Expr;

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

impl Default for AttnShape {
    /// 1 × 4 query heads (2 key/value heads) × 256 × 64, BSHD.
    fn default() -> Self {
        AttnShape {
            batch: 1,
            heads: 4,
            heads_kv: 2,
            seq: 256,
            dim: 64,
            layout: AttnLayout::Bshd,
        }
    }
}

impl AttnShape {
    /// The shape `a` names (`batch`, `heads`, `seq`, `dim`, `layout` = `"bshd"` or `"bhsd"`),
    /// `default`'s sizes for the others and for `heads_kv`, which only the attentions read
    /// ([`AttnArgs::from_args`]: rotary has no key heads).
    pub fn from_args(a: &NamedArgs, default: AttnShape) -> Result<AttnShape, KernelError> {
        let layout = match a.text_or("layout", None)?.as_deref() {
            None => default.layout,
            Some("bshd") => AttnLayout::Bshd,
            Some("bhsd") => AttnLayout::Bhsd,
            Some(other) => {
                return Err(KernelError::Problem(format!(
                    "`layout` {other:?}: \"bshd\" or \"bhsd\""
                )))
            }
        };
        Ok(AttnShape {
            batch: a.size_or("batch", default.batch)?,
            heads: a.size_or("heads", default.heads)?,
            heads_kv: default.heads_kv,
            seq: a.size_or("seq", default.seq)?,
            dim: a.size_or("dim", default.dim)?,
            layout,
        })
    }

    /// Element offset of `[b, h, s, d]` in a tensor with `nh` heads.
    pub fn offset(&self, nh: usize, b: usize, h: usize, s: usize, d: usize) -> usize {
        self.layout.offset((nh, self.seq, self.dim), (b, h, s, d))
    }
    pub fn len(&self, nh: usize) -> usize {
        self.batch * nh * self.seq * self.dim
    }
    pub fn is_empty(&self) -> bool {
        self.len(self.heads) == 0
    }
}

/// Which (query, key) pairs a causal backward keeps: key `j` is kept for query `i` when
/// `j ≤ i + offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Causal {
    /// Every key.
    No,
    /// `offset = 0`: PyTorch's `is_causal` (the mask's top-left corner on the diagonal).
    TopLeft,
    /// `offset = seq_kv − seq_q`: the last query sees every key (FlashAttention's convention for
    /// decoding with a cache).
    BottomRight,
}

impl Causal {
    /// The offset at the given lengths; `None` without a mask.
    pub fn offset(self, seq_q: usize, seq_kv: usize) -> Option<i64> {
        match self {
            Causal::No => None,
            Causal::TopLeft => Some(0),
            Causal::BottomRight => Some(seq_kv as i64 - seq_q as i64),
        }
    }

    /// The offset as an expression over the kernel's parameters.
    pub(crate) fn offset_expr(self, seq_q: &Expr, seq_kv: &Expr) -> Option<Expr> {
        match self {
            Causal::No => None,
            Causal::TopLeft => Some(Expr::c(0)),
            Causal::BottomRight => Some(seq_kv - seq_q.clone()),
        }
    }
}

/// Sizes of a backward problem: Q, O, dO, dQ have `heads` heads of `seq_q` rows; K, V, dK, dV have
/// `heads_kv` heads of `seq_kv` rows; the log-sum-exp is f32 `[batch, heads, seq_q]`, contiguous.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BwdShape {
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub dim: usize,
    pub layout: AttnLayout,
}

impl BwdShape {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        (self.heads / self.heads_kv.max(1)).max(1)
    }
    /// The KV head query head `h` reads.
    pub fn kv_head(&self, h: usize) -> usize {
        h / self.group()
    }
    fn at(&self, nh: usize, seq: usize, (b, h, s, x): (usize, usize, usize, usize)) -> usize {
        self.layout.offset((nh, seq, self.dim), (b, h, s, x))
    }
    /// Offset of `[b, h, s, x]` in a query-side tensor (Q, O, dO, dQ).
    pub fn q_at(&self, b: usize, h: usize, s: usize, x: usize) -> usize {
        self.at(self.heads, self.seq_q, (b, h, s, x))
    }
    /// Offset of `[b, h, s, x]` in a key-side tensor (K, V, dK, dV).
    pub fn kv_at(&self, b: usize, h: usize, s: usize, x: usize) -> usize {
        self.at(self.heads_kv, self.seq_kv, (b, h, s, x))
    }
    /// Offset of `[b, h, s]` in the log-sum-exp.
    pub fn lse_at(&self, b: usize, h: usize, s: usize) -> usize {
        (b * self.heads + h) * self.seq_q + s
    }
    pub fn q_len(&self) -> usize {
        self.batch * self.heads * self.seq_q * self.dim
    }
    pub fn kv_len(&self) -> usize {
        self.batch * self.heads_kv * self.seq_kv * self.dim
    }
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads * self.seq_q
    }
}

/// The lengths and mask every attention problem derives from its [`AttnArgs`] (the arguments
/// themselves are read in `super::score`, beside the logits and window they carry).
impl AttnArgs {
    /// The arguments of a call at `sh` with the mask `mask` and the logits and window of `opts`
    /// (what [`Self::bwd_shape`], [`Self::mask`] and [`Self::options`] give back).
    pub fn of(sh: &BwdShape, mask: Causal, opts: AttnOptions) -> AttnArgs {
        AttnArgs {
            attn: AttnShape {
                batch: sh.batch,
                heads: sh.heads,
                heads_kv: sh.heads_kv,
                seq: sh.seq_q,
                dim: sh.dim,
                layout: sh.layout,
            },
            seq_kv: Some(sh.seq_kv),
            causal: mask != Causal::No,
            bottom_right: mask == Causal::BottomRight,
            logits: opts.logits,
            window: opts.window,
        }
    }

    /// Keys per sequence: `seq_kv`, or as many as queries.
    pub fn keys(&self) -> usize {
        self.seq_kv.unwrap_or(self.attn.seq)
    }

    /// The lengths as the general (backward-shaped) references take them: `seq_q` queries and
    /// [`Self::keys`] keys.
    pub fn bwd_shape(&self) -> BwdShape {
        let a = self.attn;
        BwdShape {
            batch: a.batch,
            heads: a.heads,
            heads_kv: a.heads_kv,
            seq_q: a.seq,
            seq_kv: self.keys(),
            dim: a.dim,
            layout: a.layout,
        }
    }

    /// The mask asked for.
    pub fn mask(&self) -> Causal {
        match (self.causal, self.bottom_right) {
            (false, _) => Causal::No,
            (true, false) => Causal::TopLeft,
            (true, true) => Causal::BottomRight,
        }
    }

    /// The logits and window, as the references take them.
    pub fn options(&self) -> AttnOptions {
        AttnOptions {
            logits: self.logits,
            window: self.window,
        }
    }
}
