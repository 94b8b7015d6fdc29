//! What the variable-length attention programs share (`crate::attn_varlen` and its Hopper form, the
//! backward `crate::attn_varlen_bwd` and its Hopper form): the configuration, the packed batch's
//! parameters and offsets (`cu_seqlens_*` read on the device), a sequence's rows and a query block's
//! view of them, and the ALiBi slopes. `crate::attn_varlen`'s module docs give the layout.

use super::score::{min_offset, Alibi, Window};
use super::{HeadLogits, Logits};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32, I32};
use kittens_ir::{Access, Axis, Expr, GlobalId, GridOrder, KernelBuilder, RegId};

/// Queries per block (one wave).
pub const BLOCK_Q: u32 = 32;
/// Keys per step of the key loop.
pub const BLOCK_K: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VarlenConfig {
    /// Head dimension (a multiple of 32).
    pub dim: u32,
    /// Causal, aligned bottom-right in each sequence (query `i` keeps keys `j ≤ i + len_k − len_q`).
    pub causal: bool,
    /// The softmax scale (`None`: `1/√d`) and soft cap ([`Logits`]).
    pub logits: Logits,
    /// A sliding window ([`Window`], aligned bottom-right in each sequence).
    pub window: Option<Window>,
    /// FlashAttention's `seqused_k`: sequence `b` keeps only the first `seqused_k[b]` of its key rows
    /// `cu_seqlens_k[b] ..` (an i32 `[batch]` tensor read on the device; the forward only). A KV cache
    /// of fixed capacity per sequence is this form: `cu_seqlens_k = b · capacity`, `seqused_k` the
    /// cache's lengths (`flash_attn_with_kvcache`).
    pub seqused_k: bool,
    /// ALiBi (`crate::attn::score::Alibi`): an f32 input `alibi [batch, heads]` of slopes after the
    /// offsets (and `seqused_k`); query `i` and key `j` of a sequence get `−slope·|i + len_k − len_q
    /// − j|` on their scaled logit.
    pub alibi: bool,
}

impl HeadLogits for VarlenConfig {
    fn logits(&self) -> Logits {
        self.logits
    }
    fn dim(&self) -> u32 {
        self.dim
    }
}

/// Refuses what the varlen forward programs do not take, naming the argument.
pub(crate) fn check(cfg: &VarlenConfig) -> Result<(), KernelError> {
    cfg.logits.check()?;
    if let Some(w) = cfg.window {
        w.check()?;
    }
    if cfg.dim == 0 || !cfg.dim.is_multiple_of(32) || cfg.dim > 256 {
        return Err(KernelError::Config(format!(
            "head dim: varlen attention takes multiples of 32 up to 256, got {}",
            cfg.dim
        )));
    }
    Ok(())
}

impl VarlenConfig {
    /// The kernel's name: `base`, then `_causal`, `_softcap`, `_window` for what the program has.
    pub(crate) fn name(&self, base: &str) -> String {
        let mut n = base.to_string();
        for (on, s) in [
            (self.causal, "_causal"),
            (self.logits.softcap.is_some(), "_softcap"),
            (self.window.is_some(), "_window"),
        ] {
            if on {
                n.push_str(s);
            }
        }
        n
    }

    /// The last key a query of a sequence keeps (`j ≤ i + offset`): the bottom-right causal
    /// diagonal `len_k − len_q`, the window's right side, or the tighter of both; `None` without.
    /// Under the causal mask a window's right side (`right ≥ 0` past the same diagonal) keeps no key
    /// less, so the diagonal alone bounds it: one offset held by the program, not two and their
    /// minimum (gfx950's one-wave backward spilled SGPRs with both).
    pub(crate) fn last_key_offset(&self, len_q: &Expr, len_k: &Expr) -> Option<Expr> {
        let causal = self.causal.then(|| len_k - len_q.clone());
        let end = match self.causal {
            true => None,
            false => self.window.and_then(|w| w.end_expr(len_q, len_k)),
        };
        min_offset(causal, end)
    }

    /// The first key a query keeps (`j ≥ i + offset`): the window's left side; `None` without.
    pub(crate) fn first_key_offset(&self, len_q: &Expr, len_k: &Expr) -> Option<Expr> {
        self.window.and_then(|w| w.start_expr(len_q, len_k))
    }
}

/// A key block's walk in the sm_90a backwards (`crate::attn_varlen_bwd_hopper`): every pair of (query
/// head of the KV head's group, query step of the sequence) that can keep a key of the block, in one
/// loop of `total` pairs. The bounds are read on the device (the sequence's lengths): the query steps
/// of the sequence only (`⌈len_q / step⌉`, not `max_seqlen_q`'s), from the first that reaches the
/// block's first key under the causal diagonal or the window's right side to the last that reaches
/// its last key under the window's left side, none for a block past the key sequence's end. Every
/// step walked is still masked in full, so a bound that walks a step too many costs time only.
pub(crate) struct KeyWalk {
    first: Expr,
    per_head: Expr,
    /// The pairs in all.
    pub total: Expr,
    head0: Expr,
    step: i64,
}

impl KeyWalk {
    /// The walk of the block of `block` keys from `block0` (in the key sequence) of KV head `hk`
    /// with `group` query heads per KV head, in `step`-query steps, at the sequence's lengths.
    pub(crate) fn new(
        cfg: &VarlenConfig,
        (len_q, len_k): (&Expr, &Expr),
        (block0, block): (&Expr, u32),
        (hk, group): (&Expr, &Expr),
        step: i64,
    ) -> KeyWalk {
        let n_q = len_q.ceil_div(step);
        // Key j ≥ block0 is kept by queries i ≥ j − offset (offset: `last_key_offset`).
        let first = match cfg.last_key_offset(len_q, len_k) {
            Some(off) => (block0 - off).max(0) / step,
            None => Expr::c(0),
        };
        // Key j ≤ block0 + block − 1 is kept by queries i ≤ j − start (start: `first_key_offset`):
        // the steps up to the one holding that query (none where it is negative).
        let end = match cfg.first_key_offset(len_q, len_k) {
            Some(st) => {
                let last = block0 + (i64::from(block) - 1 + step) - st;
                n_q.min(last.max(0) / step)
            }
            None => n_q,
        };
        // 1 for a block that holds keys of the sequence, 0 past its end.
        let live = (len_k - block0.clone()).max(0).min(1);
        let steps = (&end - first.clone()).max(0) * live;
        KeyWalk {
            first,
            per_head: steps.max(1),
            total: group * steps,
            head0: hk * group.clone(),
            step,
        }
    }

    /// Pair `t`'s query head.
    pub(crate) fn head_of(&self, t: &Expr) -> Expr {
        &self.head0 + t / self.per_head.clone()
    }

    /// Pair `t`'s first query, in the sequence.
    pub(crate) fn q0_of(&self, t: &Expr) -> Expr {
        (self.first.clone() + t % self.per_head.clone()) * self.step
    }
}

/// The parameters every varlen program declares, in this order.
pub(crate) struct Batch {
    pub batch: Expr,
    pub heads: Expr,
    pub heads_kv: Expr,
    pub total_q: Expr,
    pub total_k: Expr,
    pub max_q: Expr,
    pub max_k: Expr,
}

impl Batch {
    pub(crate) fn declare(k: &mut KernelBuilder) -> Batch {
        let [batch, heads, heads_kv, total_q, total_k, max_q, max_k] = [
            "batch",
            "heads",
            "heads_kv",
            "total_q",
            "total_k",
            "max_seqlen_q",
            "max_seqlen_k",
        ]
        .map(|n| k.param(n));
        Batch {
            batch,
            heads,
            heads_kv,
            total_q,
            total_k,
            max_q,
            max_k,
        }
    }
}

/// The `cu_seqlens_q` and `cu_seqlens_k` tensors (i32 `[batch + 1]`).
pub(crate) fn offsets(k: &mut KernelBuilder, batch: &Expr) -> (GlobalId, GlobalId) {
    let mut cu = |name: &str| k.global(name, I32, &[("b", batch + 1)], Access::Read);
    (cu("cu_seqlens_q"), cu("cu_seqlens_k"))
}

/// The forward's tensors, declared in this order (inputs before outputs, as the runner takes them):
/// `q, k, v` (bf16), `cu_seqlens_q`, `cu_seqlens_k` (i32 `[batch + 1]`), `o` (bf16), `lse` (f32
/// `[heads, total_q]`).
pub(crate) struct Tensors {
    pub q: GlobalId,
    pub k: GlobalId,
    pub v: GlobalId,
    pub o: GlobalId,
    pub lse: GlobalId,
    pub cu_q: GlobalId,
    pub cu_k: GlobalId,
    /// `seqused_k` (i32 `[batch]`, declared after `cu_seqlens_k`) with [`VarlenConfig::seqused_k`].
    pub used_k: Option<GlobalId>,
    /// The slopes (declared after those) with [`VarlenConfig::alibi`].
    pub alibi: Option<Alibi>,
}

impl Tensors {
    pub(crate) fn declare(k: &mut KernelBuilder, sizes: &Batch, cfg: &VarlenConfig) -> Tensors {
        let dim = cfg.dim;
        let Batch {
            batch,
            heads,
            heads_kv,
            total_q,
            total_k,
            ..
        } = sizes;
        let d = Expr::c(i64::from(dim));
        let mut packed = |name: &str, total: &Expr, h: &Expr, access| {
            let dims = [("s", total.clone()), ("h", h.clone()), ("d", d.clone())];
            k.global(name, Bf16, &dims, access)
        };
        let q = packed("q", total_q, heads, Access::Read);
        let kk = packed("k", total_k, heads_kv, Access::Read);
        let v = packed("v", total_k, heads_kv, Access::Read);
        let (cu_q, cu_k) = offsets(k, batch);
        let used_k = cfg
            .seqused_k
            .then(|| k.global("seqused_k", I32, &[("b", batch.clone())], Access::Read));
        let alibi = cfg.alibi.then(|| Alibi::declare(k, batch, heads));
        let mut packed = |name: &str, total: &Expr, h: &Expr, access| {
            let dims = [("s", total.clone()), ("h", h.clone()), ("d", d.clone())];
            k.global(name, Bf16, &dims, access)
        };
        let o = packed("o", total_q, heads, Access::Write);
        let lse_dims = [("h", heads.clone()), ("s", total_q.clone())];
        let lse = k.global("lse", F32, &lse_dims, Access::Write);
        Tensors {
            q,
            k: kk,
            v,
            o,
            lse,
            cu_q,
            cu_k,
            used_k,
            alibi,
        }
    }
}

/// With ALiBi: the slope of sequence `b`'s head `h` into a row vector of the score tile `s` (loaded
/// through `s`, whose value is dead here), for [`alibi_add`].
pub(crate) fn alibi_slope(
    k: &mut KernelBuilder,
    alibi: Option<&Alibi>,
    cfg: &VarlenConfig,
    (b, h): (&Expr, &Expr),
    s: RegId,
) -> Option<RegId> {
    let a = alibi?;
    let v = k.row_vec("alibi_slope", s, F32);
    a.load(k, (b, h), s, (v, Axis::Rows), &cfg.logits, cfg.dim);
    Some(v)
}

/// With ALiBi: the bias on the score tile `s` whose rows are the sequence's queries from `q0` and
/// columns its keys from `k0` (`transposed`: rows the keys, columns the queries), the distance
/// aligned bottom-right (`len_k − len_q`).
pub(crate) fn alibi_add(
    k: &mut KernelBuilder,
    slope: Option<RegId>,
    s: RegId,
    (q0, k0): (&Expr, &Expr),
    (len_q, len_k): (&Expr, &Expr),
    transposed: bool,
) {
    let Some(v) = slope else { return };
    let q = q0 + (len_k - len_q.clone());
    if transposed {
        Alibi::add(k, s, v, k0, &q);
    } else {
        Alibi::add(k, s, v, &q, k0);
    }
}

/// Sequence `b`'s rows in the packed tensors, read from the offsets in device memory.
pub(crate) struct Seq {
    pub start_q: Expr,
    pub end_q: Expr,
    pub start_k: Expr,
    pub end_k: Expr,
}

impl Seq {
    pub(crate) fn of(cu_q: GlobalId, cu_k: GlobalId, b: &Expr) -> Seq {
        Seq::with_used(cu_q, cu_k, None, b)
    }
    /// With `seqused_k`, the keys end `seqused_k[b]` rows after their start.
    pub(crate) fn with_used(
        cu_q: GlobalId,
        cu_k: GlobalId,
        used_k: Option<GlobalId>,
        b: &Expr,
    ) -> Seq {
        let start_k = Expr::elem(cu_k, b.clone());
        Seq {
            start_q: Expr::elem(cu_q, b.clone()),
            end_q: Expr::elem(cu_q, b + 1),
            end_k: match used_k {
                Some(u) => &start_k + Expr::elem(u, b.clone()),
                None => Expr::elem(cu_k, b + 1),
            },
            start_k,
        }
    }
}

/// One block of a forward program: the grid `[batch, heads, ⌈max_seqlen_q / block_q⌉]`, this block's
/// query head `h`, query block `qb` and KV head `hk` (GQA: `heads / heads_kv` query
/// heads per KV head), the sequence's rows, and the packed tensors clipped at its ends so that a
/// tile crossing an end neither reads nor writes the next sequence.
pub(crate) struct QueryBlock {
    pub h: Expr,
    pub qb: Expr,
    pub hk: Expr,
    pub seq: Seq,
    pub len_q: Expr,
    pub len_k: Expr,
}

impl QueryBlock {
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        n: &Batch,
        t: &Tensors,
        block_q: u32,
    ) -> QueryBlock {
        QueryBlock::declare_clipped(k, n, t, block_q, true)
    }

    /// [`Self::declare`], the inputs `q, k, v` clipped at the sequence's ends only with
    /// `clip_inputs` (the outputs always are). Unclipped, a tile crossing an end reads the next
    /// sequence's rows (or zeros past the tensor): a program may do so where every score those rows
    /// meet is masked, so that their `P` is exactly 0 (`crate::attn_varlen_bwd_hopper` does, and
    /// `crate::attn_varlen_hopper` without `seqused_k`), and can then fill its rings by TMA.
    pub(crate) fn declare_clipped(
        k: &mut KernelBuilder,
        n: &Batch,
        t: &Tensors,
        block_q: u32,
        clip_inputs: bool,
    ) -> QueryBlock {
        let blocks = n.max_q.ceil_div(i64::from(block_q));
        k.grid(
            vec![n.batch.clone(), n.heads.clone(), blocks],
            GridOrder::RowMajor,
        );
        let (b, h, qb) = (k.block(0), k.block(1), k.block(2));
        let hk = &h / (&n.heads / n.heads_kv.clone());
        let seq = Seq::with_used(t.cu_q, t.cu_k, t.used_k, &b);
        k.clip(t.o, 0, seq.end_q.clone());
        k.clip(t.lse, 1, seq.end_q.clone());
        if clip_inputs {
            k.clip(t.q, 0, seq.end_q.clone());
            for g in [t.k, t.v] {
                k.clip(g, 0, seq.end_k.clone());
            }
        }
        QueryBlock {
            len_q: &seq.end_q - seq.start_q.clone(),
            len_k: &seq.end_k - seq.start_k.clone(),
            h,
            qb,
            hk,
            seq,
        }
    }
}
