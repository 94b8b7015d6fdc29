//! Decoding attention against a paged KV cache (FlashAttention's `flash_attn_with_kvcache` with a
//! `block_table`; vLLM's PagedAttention layout), read in place: `k_cache, v_cache [num_blocks,
//! page_size, heads_kv, d]` hold fixed-size pages of keys, `block_table [batch, max_blocks]` (i32)
//! lists sequence `b`'s pages in order, `cache_seqlens [batch]` (i32) its length. Key `j` of sequence
//! `b` is row `j % page_size` of page `block_table[b, j / page_size]`.
//!
//! Each block takes `BLOCK_Q` query rows of one head of one sequence (`q [batch, seq_q, heads, d]`,
//! decoding's few new tokens) and walks the sequence's keys `kv_block` at a time: the step's page is
//! read from the block table in device memory ([`kittens_ir::Expr::Elem`], no gather, no host read),
//! so a step never crosses a page (the page size is a multiple of `kv_block`). The online softmax is
//! FlashAttention-2 §3.1 (S = Q·Kᵀ in f32, P rounded to bf16 for P·V); causal is bottom-right (query
//! `i` keeps keys `j ≤ i + len − seq_q`), GQA reads KV head `h / (heads / heads_kv)`.
//!
//! The trip count cannot read device memory (the analyses size loops from parameters), so the walk
//! covers the table's capacity `max_blocks · page_size` and masks keys at or past the sequence's length;
//! a step past the sequence's last page re-reads that page (entry clamped to the length's last page,
//! and the page index to `0 .. num_blocks`), so no table entry past the sequence, and no page outside
//! the cache, is ever read — stale or out-of-range entries cannot fault. V rows past the length are
//! zeroed before P·V, so stale cache rows (NaN in an uninitialised cache) cannot leak through `0 · NaN`.
//!
//! Split-KV (Flash-Decoding): with `splits > 1` each query block's walk is cut into parts, one block
//! each, writing [`crate::attn_fwd::split`]'s partials, which its merge (`build_merge`) combines.
//!
//! Targets: the CPU interpreter. Not yet sm_90a: the plain CUDA lowering refuses index reads, and its
//! row broadcasts need rows a wave of chunks wide (this program's score rows are 16 keys); the AMD
//! lowerings refuse index reads. The registry marks them not-yet, naming why.

use crate::attn::{HeadLogits, Logits, Softmax};
use crate::attn_fwd::split::declare_partials;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32, I32};
use kittens_ir::{
    Access, Axis, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, Rounding, Schedule,
};
use kittens_tile::{BaseShape, Layout};

/// Queries per block (one wave).
pub const BLOCK_Q: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagedConfig {
    /// Head dimension (a multiple of 32, up to 256).
    pub dim: u32,
    /// Causal, aligned bottom-right (decoding's convention).
    pub causal: bool,
    /// The softmax scale (`None`: `1/√d`); a soft cap is refused (not built here yet).
    pub logits: Logits,
    /// Keys per step: 16 or 32; the page size must be a multiple of it ([`kv_block_for`]).
    pub kv_block: u32,
    /// Parts of each query block's key walk (1: no split, `o` and `lse` written directly).
    pub splits: u32,
}

impl HeadLogits for PagedConfig {
    fn logits(&self) -> Logits {
        self.logits
    }
    fn dim(&self) -> u32 {
        self.dim
    }
}

/// The key step for `page_size`: 16 (the step's K and V tiles of one warp stay within sm_90a's
/// register budget at head dim 128 beside Q and the accumulator); pages that 16 does not divide are
/// refused, naming the page size.
pub fn kv_block_for(page_size: usize) -> Result<u32, KernelError> {
    match page_size {
        p if p > 0 && p % 16 == 0 => Ok(16),
        p => Err(KernelError::Problem(format!(
            "page_size: the paged decode kernel reads pages in steps of 16 keys, so the page size \
             must be a positive multiple of 16, got {p}"
        ))),
    }
}

fn check(cfg: &PagedConfig) -> Result<(), KernelError> {
    cfg.logits.check()?;
    if cfg.logits.softcap.is_some() {
        return Err(KernelError::Config(
            "softcap: the paged decode kernel does not take a soft cap yet".into(),
        ));
    }
    if cfg.dim == 0 || !cfg.dim.is_multiple_of(32) || cfg.dim > 256 {
        return Err(KernelError::Config(format!(
            "head dim: the paged decode kernel takes multiples of 32 up to 256, got {}",
            cfg.dim
        )));
    }
    if !matches!(cfg.kv_block, 16 | 32) {
        return Err(KernelError::Config(format!(
            "kv_block: 16 or 32 keys per step, got {}",
            cfg.kv_block
        )));
    }
    let max = crate::attn_fwd::split::MAX_KV_SPLITS;
    if !(1..=max).contains(&cfg.splits) {
        return Err(KernelError::Config(format!(
            "num_splits: 1 to {max} parts, got {}",
            cfg.splits
        )));
    }
    Ok(())
}

/// Parameters `batch, heads, heads_kv, seq_q, num_blocks, page_size, max_blocks`; tensors `q`
/// (bf16 `[batch, seq_q, heads, d]`), `k_cache`, `v_cache` (bf16 `[num_blocks, page_size, heads_kv,
/// d]`), `block_table` (i32 `[batch · max_blocks]`, row-major `[batch, max_blocks]`), `cache_seqlens` (i32 `[batch]`), then without a
/// split `o` (bf16 like `q`) and `lse` (f32 `[batch, heads, seq_q]`, natural log, `−∞` for a row
/// that keeps no key), with one the partials `o_partial`, `lse_partial` of
/// [`crate::attn_fwd::split`] (`seq` = `seq_q`).
pub fn build(cfg: &PagedConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let name = format!(
        "attn_paged_fwd{}_kv{}{}",
        if cfg.causal { "_causal" } else { "" },
        cfg.kv_block,
        if cfg.splits > 1 {
            format!("_split{}", cfg.splits)
        } else {
            String::new()
        }
    );
    let mut k = KernelBuilder::new(&name, Schedule::Plain { waves: 1 });
    let [batch, heads, heads_kv, seq_q, num_blocks, page, max_blocks] = [
        "batch",
        "heads",
        "heads_kv",
        "seq_q",
        "num_blocks",
        "page_size",
        "max_blocks",
    ]
    .map(|n| k.param(n));
    let (dim, bq, bk) = (cfg.dim, BLOCK_Q, cfg.kv_block);
    let d = Expr::c(i64::from(dim));
    let q = k.global(
        "q",
        Bf16,
        &[
            ("b", batch.clone()),
            ("s", seq_q.clone()),
            ("h", heads.clone()),
            ("d", d.clone()),
        ],
        Access::Read,
    );
    let mut cache = |name: &str| {
        let dims = [
            ("n", num_blocks.clone()),
            ("p", page.clone()),
            ("h", heads_kv.clone()),
            ("d", d.clone()),
        ];
        k.global(name, Bf16, &dims, Access::Read)
    };
    let (kc, vc) = (cache("k_cache"), cache("v_cache"));
    // One dimension of `batch · max_blocks` entries: an index read (`Expr::Elem`) walks dimension 0.
    let table = k.global(
        "block_table",
        I32,
        &[("i", &batch * max_blocks.clone())],
        Access::Read,
    );
    let seqlens = k.global("cache_seqlens", I32, &[("b", batch.clone())], Access::Read);
    let outputs = if cfg.splits > 1 {
        let (o, lse) = declare_partials(
            &mut k,
            cfg.splits,
            [&batch, &heads, &seq_q],
            &d,
            Access::Write,
        );
        (o, lse)
    } else {
        let o = k.global(
            "o",
            Bf16,
            &[
                ("b", batch.clone()),
                ("s", seq_q.clone()),
                ("h", heads.clone()),
                ("d", d.clone()),
            ],
            Access::Write,
        );
        let dims = [
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("s", seq_q.clone()),
        ];
        (o, k.global("lse", F32, &dims, Access::Write))
    };
    let g = i64::from(cfg.splits);
    k.grid(
        vec![
            batch.clone(),
            heads.clone(),
            seq_q.ceil_div(i64::from(bq)) * g,
        ],
        GridOrder::RowMajor,
    );
    let (b, h, t) = (k.block(0), k.block(1), k.block(2));
    let (qb, part) = (&t / g, t % g);
    let hk = &h / (&heads / heads_kv);
    let capacity = &max_blocks * page.clone();
    // The sequence's length, held to the table's capacity (a larger cache_seqlens reads no page
    // outside the table).
    let len = Expr::elem(seqlens, b.clone())
        .max(Expr::c(0))
        .min(capacity.clone());
    let last_page = (&len - 1).max(Expr::c(0)) / page.clone();

    // The part's steps: `per` of the `n` steps over the capacity, at least one (a part past the end
    // walks one step, all masked: its partial is the softmax's floor).
    let n = &max_blocks * (&page / i64::from(bk));
    let per = n.ceil_div(g);
    let first = &part * per.clone();
    let end = (&first + per).min(n);
    let count = (&end - first.clone()).max(Expr::c(1));
    let limit = len.clone().min(end * i64::from(bk));

    let q_r = k.tile("q", Bf16, bq, dim, Layout::Row, BaseShape::S16X32);
    let k_r = k.tile("k", Bf16, bk, dim, Layout::Row, BaseShape::S16X32);
    let v_r = k.tile("v", Bf16, bk, dim, Layout::Col, BaseShape::S16X16);
    let s = k.tile("s", F32, bq, bk, Layout::Row, BaseShape::S16X16);
    let p = k.tile("p", Bf16, bq, bk, Layout::Row, BaseShape::S16X16);
    let acc = k.tile("acc", F32, bq, dim, Layout::Row, BaseShape::S16X16);
    let mut sm = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    // Bottom-right causal with more queries than keys, an empty sequence, or a part past the end:
    // rows that keep no key (running max −∞).
    sm.floor = true;
    let lse_r = k.row_vec("lse", s, F32);

    let q0 = &qb * i64::from(bq);
    k.load_global(
        q_r,
        k.gview(
            q,
            vec![b.clone(), q0.clone(), h.clone(), Expr::c(0)],
            1,
            3,
            bq,
            dim,
        ),
    );
    k.neg_infty(sm.max);
    k.zero(sm.norm);
    k.zero(acc);
    k.for_range("kv", Expr::c(0), count, |k, j| {
        let k0 = (&first + j) * i64::from(bk);
        // The step's page: the table's entry (never past the sequence's last page), held inside
        // the cache.
        let entry = (&k0 / page.clone()).min(last_page.clone());
        let block = Expr::elem(table, &b * max_blocks.clone() + entry)
            .max(Expr::c(0))
            .min(&num_blocks - 1);
        let origin = vec![block, &k0 % page.clone(), hk.clone(), Expr::c(0)];
        k.load_global(k_r, k.gview(kc, origin.clone(), 1, 3, bk, dim));
        k.load_global(v_r, k.gview(vc, origin, 1, 3, bk, dim));
        k.mask(v_r, MaskRule::RowsBelow(limit.clone()), &k0, 0, 0.0);
        k.zero(s);
        k.mma_abt(s, q_r, k_r, s);
        let inf = f32::NEG_INFINITY;
        k.mask(s, MaskRule::ColsBelow(limit.clone()), &q0, &k0, inf);
        if cfg.causal {
            let offset = &len - seq_q.clone();
            k.mask(s, MaskRule::Causal { offset }, &q0, &k0, inf);
        }
        sm.step(k, s);
        k.mul_row(acc, acc, sm.scale);
        k.convert(p, s, Rounding::Rtne);
        k.mma_ab(acc, p, v_r, acc);
    });
    sm.inv_norm(&mut k, sm.scale);
    k.mul_row(acc, acc, sm.scale);
    sm.lse(&mut k, lse_r);
    let (o, lse) = outputs;
    if cfg.splits > 1 {
        let at = vec![part.clone(), b.clone(), h.clone(), q0.clone(), Expr::c(0)];
        k.store(k.gview(o, at, 3, 4, bq, dim), acc);
        let at = vec![part, b, h, q0];
        k.store(k.gview(lse, at, 3, 0, bq, 1), lse_r);
    } else {
        let out = k.tile("out", Bf16, bq, dim, Layout::Row, BaseShape::S16X16);
        k.convert(out, acc, Rounding::Rtne);
        let at = vec![b.clone(), q0.clone(), h.clone(), Expr::c(0)];
        k.store(k.gview(o, at, 1, 3, bq, dim), out);
        k.store(k.gview(lse, vec![b, h, q0], 2, 0, bq, 1), lse_r);
    }
    Ok(k.finish()?)
}
