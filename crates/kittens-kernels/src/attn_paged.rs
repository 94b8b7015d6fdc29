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
//! `i` keeps keys `j ≤ i + len − seq_q`), GQA reads KV head `h / (heads / heads_kv)`. A soft cap
//! (`cap·tanh(x·scale/cap)`, [`Logits::cap`]) applies to the raw scores first; ALiBi
//! ([`PagedConfig::alibi`]) adds `−slope·|i + len − seq_q − j|` after it and before the masks, the
//! slopes an f32 device tensor read once per block ([`crate::attn::score::Alibi`]) — the order of the
//! dense forward (`crate::attn_fwd`). A sliding window ([`PagedConfig::window`]) is aligned the same
//! way (FlashAttention's `window_size` with a KV cache: query `i` at position `len − seq_q + i`).
//!
//! The trip count reads no device memory (written when the analyses could not read one; they now
//! can, `kittens_ir::analysis`'s element size, as `crate::attn_varlen_hopper`'s walk does), so the walk
//! covers the table's capacity `max_blocks · page_size` and masks keys at or past the sequence's length;
//! a step past the sequence's last page re-reads that page (entry clamped to the length's last page,
//! and the page index to `0 .. num_blocks`), so no table entry past the sequence, and no page outside
//! the cache, is ever read — stale or out-of-range entries cannot fault. V rows past the length are
//! zeroed before P·V, so stale cache rows (NaN in an uninitialised cache) cannot leak through `0 · NaN`.
//!
//! Split-KV (Flash-Decoding): with `splits > 1` each query block's walk is cut into parts, one block
//! each, writing the key split's partials (`crate::attn::split`), which its merge (`build_merge`) combines.
//!
//! GQA packing ([`PagedConfig::pack_gqa`], FlashAttention-3's `pack_gqa`): decoding's one query per
//! sequence would fill one row of a block per query head, each block streaming its group's K and V
//! again; packed, a block's rows are the group's query heads, so the group's keys are read once.
//!
//! Targets: the CPU interpreter, gfx942 and gfx950 (V staged through LDS, [`crate::attn::Staged`];
//! the 16-key P·V on the 16×16×16 bf16 MFMA, which CDNA4 keeps from CDNA3;
//! crates/kittens-runtime/tests/amd_index_reads.rs). Not sm_90a: the plain CUDA lowering refuses index
//! reads (sm_90a runs `attn_paged_hopper`). The registry names why.

use crate::attn::key_step::{KeyMasks, WaveStep};
use crate::attn::score::{min_offset, Alibi, Window};
use crate::attn::split::{declare_partials, MAX_KV_SPLITS};
use crate::attn::{HeadLogits, Logits, Softmax, Staged};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32, I32};
use kittens_hw::Target;
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, RegId, Rounding,
    Schedule,
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
    /// The softmax scale (`None`: `1/√d`) and soft cap (`cap·tanh(x·scale/cap)` on the raw scores
    /// before ALiBi and the masks, [`Logits::cap`]).
    pub logits: Logits,
    /// Keys per step: 16, 32, 64 or 128; the page size must be a multiple of it ([`kv_block_for`]).
    pub kv_block: u32,
    /// Parts of each query block's key walk (1: no split, `o` and `lse` written directly).
    pub splits: u32,
    /// ALiBi ([`crate::attn::score::Alibi`]): an f32 input `alibi [batch, heads]` of slopes after
    /// `cache_seqlens`; query `i` and key `j` of sequence `b` get `−slope·|i + len − seq_q − j|` on
    /// their scaled logit (aligned bottom-right, FlashAttention's `alibi_slopes`).
    pub alibi: bool,
    /// A sliding window (FlashAttention's `window_size`, [`Window`]), aligned bottom-right per
    /// sequence: query `i` sits at key position `i + len − seq_q`, keeping keys `j` with
    /// `i + len − seq_q − left ≤ j ≤ i + len − seq_q + right`. With both sides bounded (or the left
    /// side and `causal`) a block walks only the key steps its rows' windows reach ([`Walk`]).
    pub window: Option<Window>,
    /// GQA packing (FlashAttention-3's `pack_gqa`) for one query per sequence (`seq_q = 1`, the
    /// caller's to hold): a block takes one KV head and its group's `heads / heads_kv` query heads
    /// as its rows, so the group's K and V are read once, not once per query head. The rows are
    /// heads, not queries, so the masks' row index is a head: exact only where every row's keep
    /// rule is the same (`seq_q = 1`, no window, no ALiBi, refused here; causal bottom-right keeps
    /// keys `j ≤ r + len − 1` for row `r ≥ 0`, all of the length's, as the one query does).
    pub pack_gqa: bool,
}

impl HeadLogits for PagedConfig {
    fn logits(&self) -> Logits {
        self.logits
    }
    fn dim(&self) -> u32 {
        self.dim
    }
}

/// The key step for `page_size` on `target`: a step never crosses a page, so it divides the page
/// size. The interpreter's one-wave program takes 16 (its K and V tiles of one warp); the sm_90a
/// program the largest of 128, 64, 32, 16 that divides the page (64 at most past head dim 128, as
/// the dense Hopper forward: the score tile beside 3-4 output accumulators). Pages that 16 does not
/// divide are refused, naming the page size.
pub fn kv_block_for(page_size: usize, dim: u32, target: Target) -> Result<u32, KernelError> {
    if page_size == 0 || !page_size.is_multiple_of(16) {
        return Err(KernelError::Problem(format!(
            "page_size: the paged decode kernel reads pages in steps of 16 keys or more, so the \
             page size must be a positive multiple of 16, got {page_size}"
        )));
    }
    if target != Target::Sm90a {
        return Ok(16);
    }
    let most = if dim > 128 { 64 } else { 128 };
    Ok([128u32, 64, 32, 16]
        .into_iter()
        .find(|&kv| kv <= most && page_size.is_multiple_of(kv as usize))
        .unwrap_or(16))
}

pub(crate) fn check(cfg: &PagedConfig) -> Result<(), KernelError> {
    cfg.logits.check()?;
    cfg.window.map_or(Ok(()), |w| w.check())?;
    if cfg.dim == 0 || !cfg.dim.is_multiple_of(32) || cfg.dim > 256 {
        return Err(KernelError::Config(format!(
            "head dim: the paged decode kernel takes multiples of 32 up to 256, got {}",
            cfg.dim
        )));
    }
    if !matches!(cfg.kv_block, 16 | 32 | 64 | 128) {
        return Err(KernelError::Config(format!(
            "kv_block: 16, 32, 64 or 128 keys per step, got {}",
            cfg.kv_block
        )));
    }
    let max = MAX_KV_SPLITS;
    if !(1..=max).contains(&cfg.splits) {
        return Err(KernelError::Config(format!(
            "num_splits: 1 to {max} parts, got {}",
            cfg.splits
        )));
    }
    if cfg.pack_gqa && (cfg.alibi || cfg.window.is_some()) {
        return Err(KernelError::Config(
            "pack_gqa: a packed block's rows are query heads of one query, so ALiBi (a slope per \
             head) and a window (a span per query row) are not taken with it"
                .into(),
        ));
    }
    Ok(())
}

/// The paged program's parameters and tensors, declared in this order by both programs (the
/// interpreter's and [`crate::attn_paged_hopper`]), so that one launch fits either.
pub(crate) struct PagedIo {
    pub batch: Expr,
    pub heads: Expr,
    pub heads_kv: Expr,
    pub seq_q: Expr,
    pub num_blocks: Expr,
    pub page: Expr,
    pub max_blocks: Expr,
    /// The grid's heads: `heads`, or with [`PagedConfig::pack_gqa`] `heads_kv`.
    pub grid_heads: Expr,
    /// A block's rows: `seq_q` queries, or with [`PagedConfig::pack_gqa`] the group's
    /// `heads / heads_kv` query heads.
    pub rows: Expr,
    /// Packed (`q` and `o` viewed `[batch, heads_kv, group, d]`, the same memory at `seq_q = 1`).
    pub packed: bool,
    pub q: GlobalId,
    pub k_cache: GlobalId,
    pub v_cache: GlobalId,
    pub table: GlobalId,
    pub seqlens: GlobalId,
    /// The slopes with [`PagedConfig::alibi`].
    pub alibi: Option<Alibi>,
    /// `o` (bf16 like `q`) or with a split `o_partial`.
    pub o: GlobalId,
    /// `lse` (f32 `[batch, heads, seq_q]`) or with a split `lse_partial`.
    pub lse: GlobalId,
}

impl PagedIo {
    /// Parameters `batch, heads, heads_kv, seq_q, num_blocks, page_size, max_blocks`; tensors `q`
    /// (bf16 `[batch, seq_q, heads, d]`), `k_cache`, `v_cache` (bf16 `[num_blocks, page_size,
    /// heads_kv, d]`), `block_table` (i32 `[batch · max_blocks]`, row-major `[batch, max_blocks]`),
    /// `cache_seqlens` (i32 `[batch]`), with ALiBi `alibi` (f32 `[batch, heads]`), then without a split `o` (bf16 like `q`) and `lse` (f32
    /// `[batch, heads, seq_q]`, natural log, `−∞` for a row that keeps no key), with one the
    /// partials `o_partial`, `lse_partial` of [`crate::attn_fwd::split`] (`seq` = `seq_q`).
    pub(crate) fn declare(k: &mut KernelBuilder, cfg: &PagedConfig) -> PagedIo {
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
        let d = Expr::c(i64::from(cfg.dim));
        let (grid_heads, rows) = if cfg.pack_gqa {
            // At least one row: a launch's heads are a multiple of heads_kv, but the schedule
            // analysis also samples parameters where they are not.
            (
                heads_kv.clone(),
                (&heads / heads_kv.clone()).max(Expr::c(1)),
            )
        } else {
            (heads.clone(), seq_q.clone())
        };
        // Unpacked `[b, s, h, d]`; packed `[b, hk, g, d]`: at `seq_q = 1` query head `hk·g + r` is
        // row `r` of KV head `hk`'s block, the caller's `[b, 1, h, d]` memory unchanged.
        let bshd = [
            ("b", batch.clone()),
            ("s", seq_q.clone()),
            ("h", heads.clone()),
            ("d", d.clone()),
        ];
        let bhgd = [
            ("b", batch.clone()),
            ("h", heads_kv.clone()),
            ("g", rows.clone()),
            ("d", d.clone()),
        ];
        let qo_dims = if cfg.pack_gqa { &bhgd } else { &bshd };
        let q = k.global("q", Bf16, qo_dims, Access::Read);
        let cache = [
            ("n", num_blocks.clone()),
            ("p", page.clone()),
            ("h", heads_kv.clone()),
            ("d", d.clone()),
        ];
        let k_cache = k.global("k_cache", Bf16, &cache, Access::Read);
        let v_cache = k.global("v_cache", Bf16, &cache, Access::Read);
        // One dimension of `batch · max_blocks` entries: an index read (`Expr::Elem`) walks dimension 0.
        let entries = [("i", &batch * max_blocks.clone())];
        let table = k.global("block_table", I32, &entries, Access::Read);
        let seqlens = k.global("cache_seqlens", I32, &[("b", batch.clone())], Access::Read);
        let alibi = cfg.alibi.then(|| Alibi::declare(k, &batch, &heads));
        // The partials and `lse` are `[.., b, h, s, ..]`: packed `[.., b, hk, g, ..]`, the same
        // memory at `seq_q = 1`, so the merge is the unpacked one.
        let (o, lse) = if cfg.splits > 1 {
            let rows = [&batch, &grid_heads, &rows];
            declare_partials(k, cfg.splits, rows, &d, Access::Write)
        } else {
            let o = k.global("o", Bf16, qo_dims, Access::Write);
            let dims = [
                ("b", batch.clone()),
                ("h", grid_heads.clone()),
                ("s", rows.clone()),
            ];
            (o, k.global("lse", F32, &dims, Access::Write))
        };
        PagedIo {
            batch,
            heads,
            heads_kv,
            seq_q,
            num_blocks,
            page,
            max_blocks,
            grid_heads,
            rows,
            packed: cfg.pack_gqa,
            q,
            k_cache,
            v_cache,
            table,
            seqlens,
            alibi,
            o,
            lse,
        }
    }

    /// The `rows × cols` window of `q` or `o` (`g`) at block row `r0` of grid head `h`, column
    /// `col`: rows along the sequence, or packed along the group.
    pub(crate) fn qo_view(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        (b, h, r0, col): (&Expr, &Expr, &Expr, Expr),
        rows: u32,
        cols: u32,
    ) -> kittens_ir::GlobalView {
        let (at, row_dim) = if self.packed {
            (vec![b.clone(), h.clone(), r0.clone(), col], 2)
        } else {
            (vec![b.clone(), r0.clone(), h.clone(), col], 1)
        };
        k.gview(g, at, row_dim, 3, rows, cols)
    }
}

/// One block's walk over its sequence's pages: the grid `[batch, heads, ⌈seq_q / block_q⌉ ·
/// splits]`, the block's sequence `b`, query head `h`, KV head `hk`, query block `qb` and part, the
/// sequence's length, and the part's `count` steps of `kv_block` keys from step `first`.
pub(crate) struct Walk {
    pub b: Expr,
    pub h: Expr,
    pub hk: Expr,
    pub qb: Expr,
    pub part: Expr,
    /// `cache_seqlens[b]`, held to `0 ..= max_blocks · page_size` (a larger value reads no page
    /// outside the table).
    pub len: Expr,
    last_page: Expr,
    /// The part's first step: the block's first step ([`window_steps`]: 0, or with a window's left
    /// side the step of its first row's first key) plus the parts before it.
    first: Expr,
    /// The part's steps, at least one (a part past the end walks one step, all masked: its partial
    /// is the softmax's floor); parameters only.
    pub count: Expr,
    /// Keys at or past this are masked: the length, or the part's end if sooner.
    pub limit: Expr,
    kv: i64,
}

impl Walk {
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        io: &PagedIo,
        cfg: &PagedConfig,
        block_q: u32,
    ) -> Walk {
        let g = i64::from(cfg.splits);
        let extents = vec![
            io.batch.clone(),
            io.grid_heads.clone(),
            io.rows.ceil_div(i64::from(block_q)) * g,
        ];
        k.grid(extents, GridOrder::RowMajor);
        let (b, h, t) = (k.block(0), k.block(1), k.block(2));
        let (qb, part) = (&t / g, t % g);
        let hk = if io.packed {
            h.clone()
        } else {
            &h / (&io.heads / io.heads_kv.clone())
        };
        let len = Expr::elem(io.seqlens, b.clone())
            .max(Expr::c(0))
            .min(&io.max_blocks * io.page.clone());
        let last_page = (&len - 1).max(Expr::c(0)) / io.page.clone();
        let kv = i64::from(cfg.kv_block);
        let n = &io.max_blocks * (&io.page / kv);
        let (lo, total) = window_steps(cfg, &n, &len, &io.seq_q, &qb, block_q);
        let per = total.ceil_div(g);
        let first = &lo + &part * per.clone();
        // The part's steps relative to `lo` end here: parameters only (a trip count).
        let end_rel = (&(&part + 1) * per.clone()).min(total);
        let count = (&end_rel - &part * per).max(Expr::c(1));
        let limit = len.clone().min((&lo + end_rel) * kv);
        Walk {
            b,
            h,
            hk,
            qb,
            part,
            len,
            last_page,
            first,
            count,
            limit,
            kv,
        }
    }

    /// Step `j`'s first key in the sequence.
    pub(crate) fn key(&self, j: &Expr) -> Expr {
        (&self.first + j) * self.kv
    }

    /// The cache origin `[page, row, hk, col]` of the step's keys from key `k0`: the table's entry
    /// (never past the sequence's last page) read on the device, held inside the cache, so that no
    /// stale or out-of-range entry is ever followed.
    pub(crate) fn page_origin(&self, io: &PagedIo, k0: &Expr, col: Expr) -> Vec<Expr> {
        let entry = (k0 / io.page.clone()).min(self.last_page.clone());
        let block = Expr::elem(io.table, &self.b * io.max_blocks.clone() + entry)
            .max(Expr::c(0))
            .min(&io.num_blocks - 1);
        vec![block, k0 % io.page.clone(), self.hk.clone(), col]
    }

    /// The bottom-right causal offset (query `i` keeps keys `j ≤ i + offset`), also ALiBi's shift.
    pub(crate) fn causal_offset(&self, io: &PagedIo) -> Expr {
        &self.len - io.seq_q.clone()
    }

    /// The key masks: the limit, causal bottom-right, and with ALiBi the bias from the block's head's
    /// slope, loaded into a row vector of the score tile `s` (whose value is dead here).
    pub(crate) fn masks(
        &self,
        k: &mut KernelBuilder,
        io: &PagedIo,
        cfg: &PagedConfig,
        s: RegId,
    ) -> KeyMasks {
        let alibi = io.alibi.as_ref().map(|a| {
            let v = k.row_vec("alibi_slope", s, F32);
            a.load(
                k,
                (&self.b, &self.h),
                s,
                (v, Axis::Rows),
                &cfg.logits,
                cfg.dim,
            );
            (v, self.causal_offset(io))
        });
        let (seq_q, len) = (&io.seq_q, &self.len);
        let window_end = cfg.window.and_then(|w| w.end_expr(seq_q, len));
        KeyMasks {
            end: self.limit.clone(),
            causal: min_offset(cfg.causal.then(|| self.causal_offset(io)), window_end),
            start: cfg.window.and_then(|w| w.start_expr(seq_q, len)),
            cap: (cfg.logits, cfg.dim),
            alibi,
        }
    }
}

/// The key steps of `kv_block` keys that a block of query rows from `qb · block_q` walks under
/// `cfg`'s window, `(lo, total)`: from the step holding its first row's first key (the window's left
/// side, held to `0 .. n`; step 0 without one), `total` steps: all `n` of the capacity, or with a
/// left side and a right bound (the window's right side, the causal diagonal) the most steps that
/// the block's span of `left + block_q + right` keys can touch — a constant, since a trip count may
/// not read the lengths on the device ([`Walk`]). Steps past the length are masked, as ever.
fn window_steps(
    cfg: &PagedConfig,
    n: &Expr,
    len: &Expr,
    seq_q: &Expr,
    qb: &Expr,
    block_q: u32,
) -> (Expr, Expr) {
    let kv = i64::from(cfg.kv_block);
    let Some(w) = cfg.window.filter(|w| w.left >= 0) else {
        return (Expr::c(0), n.clone());
    };
    // Clamped at 0 before dividing: division is a floor only on non-negative operands.
    let first_key =
        (qb * i64::from(block_q) + len.clone() - seq_q.clone() - w.left).max(Expr::c(0));
    let lo = (first_key / kv).min(n - 1);
    let right = match (w.right >= 0, cfg.causal) {
        (true, true) => Some(w.right.min(0)),
        (true, false) => Some(w.right),
        (false, true) => Some(0),
        (false, false) => None,
    };
    let total = match right {
        // A span of `w` keys from any key touches at most `(w − 1) / kv + 2` steps.
        Some(r) => n
            .clone()
            .min(Expr::c((w.left + i64::from(block_q) + r - 1) / kv + 2)),
        None => n.clone(),
    };
    (lo, total)
}

/// The kernel's name, from its configuration (`suffix` names a target's program).
pub(crate) fn name(cfg: &PagedConfig, suffix: &str) -> String {
    format!(
        "attn_paged_fwd{}{}{}{}{}_kv{}{}{suffix}",
        if cfg.pack_gqa { "_packgqa" } else { "" },
        if cfg.causal { "_causal" } else { "" },
        if cfg.window.is_some() { "_window" } else { "" },
        if cfg.logits.softcap.is_some() {
            "_softcap"
        } else {
            ""
        },
        if cfg.alibi { "_alibi" } else { "" },
        cfg.kv_block,
        if cfg.splits > 1 {
            format!("_split{}", cfg.splits)
        } else {
            String::new()
        }
    )
}

/// The interpreter's program: [`PagedIo`]'s parameters and tensors, one wave per `BLOCK_Q` queries.
pub fn build(cfg: &PagedConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let mut k = KernelBuilder::new(&name(cfg, ""), Schedule::Plain { waves: 1 });
    let io = PagedIo::declare(&mut k, cfg);
    let w = Walk::declare(&mut k, &io, cfg, BLOCK_Q);
    let (dim, bq, bk) = (cfg.dim, BLOCK_Q, cfg.kv_block);
    let q_r = k.tile("q", Bf16, bq, dim, Layout::Row, BaseShape::S16X32);
    let k_r = k.tile("k", Bf16, bk, dim, Layout::Row, BaseShape::S16X32);
    let v_r = k.tile("v", Bf16, bk, dim, Layout::Col, BaseShape::S16X16);
    let v_s = Staged::declare(&mut k, "v_s", v_r, Bf16, (bk, dim));
    let s = k.tile("s", F32, bq, bk, Layout::Row, BaseShape::S16X16);
    let p = k.tile("p", Bf16, bq, bk, Layout::Row, BaseShape::S16X16);
    let acc = k.tile("acc", F32, bq, dim, Layout::Row, BaseShape::S16X16);
    let mut sm = Softmax::declare(&mut k, s, Axis::Rows, cfg);
    // Bottom-right causal with more queries than keys, an empty sequence, or a part past the end:
    // rows that keep no key (running max −∞).
    sm.floor = true;
    let lse_r = k.row_vec("lse", s, F32);

    let (b, h) = (w.b.clone(), w.h.clone());
    let q0 = &w.qb * i64::from(bq);
    let q_at = (&b, &h, &q0, Expr::c(0));
    k.load_global(q_r, io.qo_view(&k, io.q, q_at.clone(), bq, dim));
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
    let masks = w.masks(&mut k, &io, cfg, s);
    k.for_range("kv", Expr::c(0), w.count.clone(), |k, j| {
        let k0 = w.key(&j);
        let origin = w.page_origin(&io, &k0, Expr::c(0));
        k.load_global(k_r, k.gview(io.k_cache, origin.clone(), 1, 3, bk, dim));
        v_s.load(k, k.gview(io.v_cache, origin, 1, 3, bk, dim));
        // V rows past the length zeroed: stale cache rows (NaN in an uninitialised cache) cannot
        // leak through `0 · NaN`.
        k.mask(v_r, MaskRule::RowsBelow(w.limit.clone()), &k0, 0, 0.0);
        step.step(k, &sm, &masks, &q0, &k0);
    });
    sm.inv_norm(&mut k, sm.scale);
    k.mul_row(acc, acc, sm.scale);
    sm.lse(&mut k, lse_r);
    if cfg.splits > 1 {
        let at = vec![w.part.clone(), b.clone(), h.clone(), q0.clone(), Expr::c(0)];
        k.store(k.gview(io.o, at, 3, 4, bq, dim), acc);
        let at = vec![w.part.clone(), b, h, q0];
        k.store(k.gview(io.lse, at, 3, 0, bq, 1), lse_r);
    } else {
        let out = k.tile("out", Bf16, bq, dim, Layout::Row, BaseShape::S16X16);
        k.convert(out, acc, Rounding::Rtne);
        k.store(io.qo_view(&k, io.o, q_at, bq, dim), out);
        k.store(k.gview(io.lse, vec![b, h, q0], 2, 0, bq, 1), lse_r);
    }
    Ok(k.finish()?)
}
