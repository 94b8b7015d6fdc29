//! Variable-length attention forward (FlashAttention's `flash_attn_varlen_func`): the batch's sequences
//! packed one after another, `q [total_q, heads, d]`, `k, v [total_k, heads_kv, d]`, sequence `b`'s
//! queries at rows `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]` and its keys at `cu_seqlens_k[b] ..
//! cu_seqlens_k[b + 1]` (`i32` tensors of `batch + 1` offsets). Each block reads its sequence's
//! offsets from device memory ([`kittens_ir::Expr::Elem`]) and clips the packed tensors at its
//! sequence's end ([`kittens_ir::Clip`]), so the next sequence's rows are neither read into its
//! softmax nor written; the grid and the key loop are sized from `max_seqlen_q` / `max_seqlen_k`
//! (parameters, as FlashAttention's `max_seqlen_*`: no host read of the device lengths), blocks past
//! their sequence's end store nothing and key blocks past it are masked whole.
//!
//! The program is the online softmax of FlashAttention-2 §3.1 on one wave (S = Q·Kᵀ in f32, the scale
//! inside the `exp2`, P rounded to bf16 for P·V), causal aligned bottom-right per sequence
//! (FlashAttention's convention), grouped-query heads (query head `h` reads KV head
//! `h / (heads / heads_kv)`). It runs on the CPU interpreter (one wave, over the register budget of
//! a GPU); sm_90a runs the warp-specialised program of the same tensors and meaning,
//! [`crate::attn_varlen_hopper`]; gfx942 and gfx950 lower this program (V staged through LDS,
//! [`crate::attn::Staged`]; crates/kittens-runtime/tests/amd_index_reads.rs).

use crate::attn::key_step::{KeyMasks, WaveStep};
use crate::attn::score::Alibi;
use crate::attn::{HeadLogits, Logits, Softmax, Staged};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32, I32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Rounding, Schedule,
};
use kittens_tile::{BaseShape, Layout};

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
    /// The softmax scale (`None`: `1/√d`); a soft cap is refused (not built for varlen yet).
    pub logits: Logits,
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

/// Refuses what the varlen programs do not take, naming the argument.
pub(crate) fn check(cfg: &VarlenConfig) -> Result<(), KernelError> {
    cfg.logits.check()?;
    if cfg.logits.softcap.is_some() {
        return Err(KernelError::Config(
            "softcap: varlen attention does not take a soft cap yet".into(),
        ));
    }
    if cfg.dim == 0 || !cfg.dim.is_multiple_of(32) || cfg.dim > 256 {
        return Err(KernelError::Config(format!(
            "head dim: varlen attention takes multiples of 32 up to 256, got {}",
            cfg.dim
        )));
    }
    Ok(())
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
        let blocks = n.max_q.ceil_div(i64::from(block_q));
        k.grid(
            vec![n.batch.clone(), n.heads.clone(), blocks],
            GridOrder::RowMajor,
        );
        let (b, h, qb) = (k.block(0), k.block(1), k.block(2));
        let hk = &h / (&n.heads / n.heads_kv.clone());
        let seq = Seq::with_used(t.cu_q, t.cu_k, t.used_k, &b);
        for g in [t.q, t.o] {
            k.clip(g, 0, seq.end_q.clone());
        }
        k.clip(t.lse, 1, seq.end_q.clone());
        for g in [t.k, t.v] {
            k.clip(g, 0, seq.end_k.clone());
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

/// Parameter order: `batch, heads, heads_kv, total_q, total_k, max_seqlen_q, max_seqlen_k`; tensors
/// `q, k, v` (bf16, read), `cu_seqlens_q`, `cu_seqlens_k` (i32 `[batch + 1]`), `o` (bf16,
/// `[total_q, heads, d]`), `lse` (f32 `[heads, total_q]`, natural log, FlashAttention's
/// `softmax_lse` layout for varlen; `−∞` for a query that keeps no key).
pub fn build(cfg: &VarlenConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let name = if cfg.causal {
        "attn_varlen_fwd_causal"
    } else {
        "attn_varlen_fwd"
    };
    let mut k = KernelBuilder::new(name, Schedule::Plain { waves: 1 });
    let sizes = Batch::declare(&mut k);
    let t = Tensors::declare(&mut k, &sizes, cfg);
    let blk = QueryBlock::declare(&mut k, &sizes, &t, BLOCK_Q);
    let (h, hk, start_q, start_k) = (&blk.h, &blk.hk, &blk.seq.start_q, &blk.seq.start_k);
    let Tensors {
        q,
        k: kk,
        v,
        o,
        lse,
        ..
    } = &t;
    let (q, kk, v, o, lse) = (*q, *kk, *v, *o, *lse);
    let max_k = sizes.max_k;

    let (bq, bk, dim) = (BLOCK_Q, BLOCK_K, cfg.dim);
    let q_r = k.tile("q", Bf16, bq, dim, Layout::Row, BaseShape::S16X32);
    let k_r = k.tile("k", Bf16, bk, dim, Layout::Row, BaseShape::S16X32);
    let v_r = k.tile("v", Bf16, bk, dim, Layout::Col, BaseShape::S32X16);
    let v_s = Staged::declare(&mut k, "v_s", v_r, Bf16, (bk, dim));
    let s = k.tile("s", F32, bq, bk, Layout::Row, BaseShape::S16X16);
    let p = k.tile("p", Bf16, bq, bk, Layout::Row, BaseShape::S16X32);
    let acc = k.tile("acc", F32, bq, dim, Layout::Row, BaseShape::S16X16);
    let out = k.tile("out", Bf16, bq, dim, Layout::Row, BaseShape::S16X16);
    let mut sm = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    // Bottom-right causal with more queries than keys, an empty key sequence, or query rows past the
    // sequence's end keep no key: their running max stays −∞.
    sm.floor = true;
    let lse_r = k.row_vec("lse", s, F32);

    let q0 = &blk.qb * i64::from(bq);
    let view = |k: &KernelBuilder, g, row: Expr, head: &Expr, rows| {
        k.gview(g, vec![row, head.clone(), Expr::c(0)], 0, 2, rows, dim)
    };
    k.load_global(q_r, view(&k, q, start_q + q0.clone(), h, bq));
    let b = k.block(0);
    let slope = alibi_slope(&mut k, t.alibi.as_ref(), cfg, (&b, h), s);
    k.neg_infty(sm.max);
    k.zero(sm.norm);
    k.zero(acc);
    let step = WaveStep {
        q: q_r,
        k: k_r,
        v: v_r,
        s,
        p,
        acc,
    };
    let masks = KeyMasks {
        end: blk.len_k.clone(),
        causal: cfg.causal.then(|| &blk.len_k - blk.len_q.clone()),
        start: None,
        cap: (cfg.logits, cfg.dim),
        alibi: slope.map(|v| (v, &blk.len_k - blk.len_q.clone())),
    };
    let tiles_k = max_k.ceil_div(i64::from(bk));
    k.for_range("kv", Expr::c(0), tiles_k, |k, j| {
        let k0 = &j * i64::from(bk);
        k.load_global(k_r, view(k, kk, start_k + k0.clone(), hk, bk));
        v_s.load(k, view(k, v, start_k + k0.clone(), hk, bk));
        step.step(k, &sm, &masks, &q0, &k0);
    });
    sm.inv_norm(&mut k, sm.scale);
    k.mul_row(acc, acc, sm.scale);
    k.convert(out, acc, Rounding::Rtne);
    k.store(view(&k, o, start_q + q0.clone(), h, bq), out);
    sm.lse(&mut k, lse_r);
    k.store(
        k.gview(lse, vec![h.clone(), start_q + q0], 1, 0, bq, 1),
        lse_r,
    );
    Ok(k.finish()?)
}
