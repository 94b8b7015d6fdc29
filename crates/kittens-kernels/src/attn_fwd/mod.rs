//! Attention forward `O = softmax(Q·Kᵀ·scale)·V` (any scale, `1/√d` by default; optionally soft-capped
//! logits, [`crate::attn::score`]) with online softmax (HipKittens E.3, MI300X-attn §3), causal or
//! not, grouped-query heads (GQA: query head `h` reads KV head `h / (heads / heads_kv)`), BSHD or BHSD
//! tensors (same logical `[b, h, s, d]` view, different strides — no copies), or each tensor in its own
//! strides given as kernel parameters ([`AttnConfig::strided`], `crate::attn::strides`). One kernel with a schedule
//! per target:
//!
//! - [`AttnSchedule::PingPong8`] ([`ping_pong`]): the 8-wave ping-pong of HipKittens Appendix E.3, the
//!   AMD schedule;
//! - [`AttnSchedule::ProducerConsumer`] ([`producer_consumer`]): warp-specialised for Hopper (TMA ring,
//!   `wgmma` from shared memory and with P from registers);
//! - [`AttnSchedule::Mi300x`] ([`mi300x`]): MI300X-attn's gfx942 kernel (8 waves in two groups, K in
//!   LDS, V from global memory straight into registers, three 16-query tiles per wave, the last in
//!   LDS), the registry's `seed001` variant.
//!
//! All three keep the softmax scale out of the bf16 operands (see [`ping_pong`]): the scores are f32 and the
//! scale enters inside the `exp2` argument.
//!
//! With [`AttnConfig::kv_splits`] `G > 1` every schedule cuts each query block's key walk into `G`
//! parts, one block per part, and writes partial outputs that [`split::build_merge`] combines
//! (Flash-Decoding; MI300X-attn §5.2's tail split applied to every block): [`split`] says how.

mod mi300x;
mod ping_pong;
pub mod problem;
pub(crate) mod producer_consumer;
pub mod split;
mod tile_pairs;

pub use crate::attn::hopper::padded_dim;

use crate::attn::hopper;
use crate::attn::score::{min_offset, Alibi, Logits, Window};
use crate::attn::strides::tensor_strides;
use crate::attn::AttnLayout;
use crate::attn::HeadLogits;
use crate::KernelError;
use kittens_hw::dtype::DType::{self, Bf16};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, MaskRule, RegId, Rounding,
};

/// Which schedule the attention is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnSchedule {
    /// 8-wave ping-pong (HipKittens Appendix E.3), the AMD schedule.
    PingPong8,
    /// One producer warpgroup streaming K and V by TMA, two consumer warpgroups of 64 queries each
    /// multiplying with `wgmma` (refused on AMD, whose MFMAs read registers only).
    ProducerConsumer,
    /// MI300X-attn's kernel (§3-§5.1): the 8-wave ping-pong with one compute and one memory phase per
    /// key block, K streamed into LDS by one group of four waves, V read from global memory into
    /// MFMA operand registers, `q_rows / 16` query tiles per wave of which the last lives in LDS.
    Mi300x,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnConfig {
    /// Which schedule the program is written for.
    pub schedule: AttnSchedule,
    /// Head dimension (a multiple of 32; 32, 64, 96, 128, 192 or 256 for the producer/consumer
    /// schedule).
    pub dim: u32,
    /// Queries per wave (a multiple of 16); a ping-pong block covers `8 × q_rows`. The producer/consumer
    /// schedule has 16 per consumer wave (one `wgmma m64` per warpgroup) and ignores it.
    pub q_rows: u32,
    /// Keys per pipeline step (a multiple of 32).
    pub kv_block: u32,
    pub causal: bool,
    /// With `causal`: the mask aligned bottom-right (query `i` keeps keys `j ≤ i + seq_kv − seq`,
    /// FlashAttention's convention, what decoding against a cache needs) instead of top-left
    /// (`j ≤ i`, PyTorch's `is_causal`). Queries that keep no key get a zero row and a log-sum-exp
    /// of `−∞`.
    pub bottom_right: bool,
    pub layout: AttnLayout,
    /// V given transposed, `[b, h_kv, d, s]` with the keys contiguous, whatever `layout` is: what
    /// MI300X-attn §4.4's transpose pass writes, so that each lane reads its MFMA operand's run of
    /// keys with one load. [`AttnSchedule::Mi300x`] needs it; the other schedules refuse it.
    pub v_transposed: bool,
    /// Also write the log-sum-exp of every query row (natural log of the softmax's denominator,
    /// what a backward pass and a merge of partial attentions need) to an f32 `lse [b, h, s]`.
    pub lse: bool,
    /// How the output rounds to bf16: RTNE (the default), RTNA or RTZ, the three modes MI300X-attn
    /// §6 measures (AITER rounds RTNA by default).
    pub rounding: Rounding,
    /// Producer/consumer only: the two consumer warpgroups take turns on the tensor cores for Q·Kᵀ
    /// (a compute cluster, lowered to named barriers), so that one's softmax overlaps the other's
    /// multiplies.
    pub pingpong: bool,
    /// Producer/consumer only: the key loop rotated so that each warpgroup's softmax of one key
    /// block runs while its P·V of the previous block is on the tensor cores (V then needs a third
    /// ring slot at head dimension 128).
    pub overlap: bool,
    /// Producer/consumer only: Q in two shared slots used by alternate tiles of a block (the
    /// persistent grid's round, `Expr::Round`), so that the next tile's Q loads while this tile
    /// computes instead of after its last multiply.
    pub q_double: bool,
    pub remap: GridOrder,
    /// Parts each query block's key walk is cut into ([`split`]): 1 is the plain kernel; with `G > 1`
    /// the kernel writes f32 partial outputs and log-sum-exps for [`split::build_merge`] to combine.
    pub kv_splits: u32,
    /// The softmax scale and soft cap ([`Logits`]), constants of the kernel.
    pub logits: Logits,
    /// A sliding window ([`Window`], bottom-right aligned), its sides constants of the kernel.
    pub window: Option<Window>,
    /// Q, K, V and O each in its own strides, given as kernel parameters
    /// ([`crate::attn::strides::tensor_strides`]) instead of `layout`'s: one kernel for any layout a
    /// caller hands over, the head dimension contiguous.
    pub strided: bool,
    /// ALiBi ([`Alibi`]): the f32 slopes `alibi [b, h]` are an input after V, and each score gets
    /// `−slope·|i + seq_kv − seq − j|` on its logit.
    pub alibi: bool,
    /// Producer/consumer only: two consecutive query tiles of a head per block, their key blocks
    /// walked as one stream ([`tile_pairs`]), so that a short walk (a sliding window's) pays the
    /// rotated loop's fill and drain once per pair. Head dims up to 128, 128-key blocks, unsplit.
    pub tile_pairs: bool,
}

impl Default for AttnConfig {
    /// HipKittens E.3: each wave computes a 32 × 128 output tile. Keys come in 32-key blocks: with 64
    /// (MI300X-attn's K block) K, Kᵀ and V in registers next to the 128 × 32 f32 output need about 360
    /// registers per lane by `kittens_ir::validate::reg_estimate`, over the 256 each of 8 waves gets on
    /// CDNA (MI300X-attn keeps V in L1 instead); 32 keys need about 240.
    fn default() -> Self {
        AttnConfig {
            schedule: AttnSchedule::PingPong8,
            pingpong: false,
            overlap: false,
            q_double: false,
            dim: 128,
            q_rows: 32,
            kv_block: 32,
            causal: false,
            bottom_right: false,
            layout: AttnLayout::Bshd,
            v_transposed: false,
            lse: false,
            rounding: Rounding::Rtne,
            remap: GridOrder::HeadFirst { xcds: 8 },
            kv_splits: 1,
            logits: Logits::default(),
            window: None,
            strided: false,
            alibi: false,
            tile_pairs: false,
        }
    }
}

impl AttnConfig {
    /// Query rows one block of this configuration computes.
    pub fn block_rows(&self) -> u32 {
        match self.schedule {
            AttnSchedule::PingPong8 | AttnSchedule::Mi300x => 8 * self.q_rows,
            AttnSchedule::ProducerConsumer => crate::attn::hopper::BLOCK,
        }
    }
}

impl AttnConfig {
    /// The configuration for one GPU: the 8-wave ping-pong with HipKittens E.3's tiles on CDNA, the
    /// producer/consumer schedule with 128-key blocks on Hopper.
    pub fn for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        if gpu.arch.is_amd() {
            return Self::default().fit_cdna(gpu);
        }
        AttnConfig {
            schedule: AttnSchedule::ProducerConsumer,
            // Measured on the H100 (docs/performance.md, "attn_fwd"): with the `wgmma`s pipelined,
            // the turns around Q·Kᵀ gave 3-15% on every D128 shape (612 vs 571 TFLOP/s at B16 H16
            // N4096; causal 444 vs 429 at N8192).
            pingpong: true,
            // The rotated loop (softmax of block j while P·V of block j-1 runs): every check and
            // timed shape passes the rule, +5-12% over the turns alone at every D128 shape (638 vs
            // 571 TFLOP/s at B16 H16 N4096, causal 499 vs 460 at N8192).
            overlap: true,
            // Q in two slots used by alternate tiles of a block: the next tile's Q loads while this
            // tile computes (docs/performance.md has what it measured).
            q_double: true,
            q_rows: 16,
            kv_block: 128,
            remap: GridOrder::RowMajor,
            ..Self::default()
        }
    }
}

impl AttnConfig {
    /// MI300X-attn's configuration (the registry's `seed001` variant on gfx942): 16×16×16 MFMAs
    /// (§3.3), 64-key blocks whose double buffer is 32 KiB of LDS at head dimension 128 (§4.1), three
    /// 16-query tiles per wave, 384 queries per block (§5.1), V pre-transposed (§4.4), query blocks
    /// of a head on one XCD (§4.1's head-first order). Mask, layout, rounding and the log-sum-exp
    /// are kept from `self`.
    pub fn mi300x(self) -> Self {
        AttnConfig {
            schedule: AttnSchedule::Mi300x,
            q_rows: 48,
            kv_block: 64,
            v_transposed: true,
            remap: GridOrder::HeadFirst { xcds: 8 },
            ..self
        }
    }

    /// The K/V block on CDNA: 64 keys (HipKittens E.3's block) where a ring of three 64-key K and V
    /// slots and the waves' P scratch fit the GPU's shared memory at this head dimension (gfx950's
    /// 160 KiB at head dimension 128), else 32 keys in a ring of two (gfx942's 64 KiB).
    pub fn fit_cdna(self, gpu: &kittens_hw::Gpu) -> Self {
        let (d, qr) = (u64::from(self.dim), u64::from(self.q_rows));
        let bytes = 3 * 2 * 64 * d * 2 + 8 * 64 * qr * 2;
        let kv_block = if bytes <= u64::from(gpu.shared_bytes_per_block) {
            64
        } else {
            32
        };
        AttnConfig { kv_block, ..self }
    }
}

/// The parameters and tensors every attention schedule declares, in this order (the argument list the
/// launchers and the runner follow): `batch, heads, heads_kv, seq, seq_kv`; bf16 `q, o` (`seq`
/// queries) and `k, v` (`seq_kv` keys) as `[b, h, s, d]` with the layout's strides, `q, k, v` read
/// and `o` written; with [`AttnConfig::lse`] then f32 `lse` (written) as `[b, h, seq]`, contiguous
/// whatever the layout. With a key split `o` and `lse` are [`split::O_PARTIAL`] and
/// [`split::LSE_PARTIAL`] instead, with the split as their first dimension.
pub(crate) struct Io {
    pub batch: Expr,
    pub heads: Expr,
    pub heads_kv: Expr,
    pub seq: Expr,
    pub seq_kv: Expr,
    pub q: GlobalId,
    pub k: GlobalId,
    pub v: GlobalId,
    pub o: GlobalId,
    pub lse: Option<GlobalId>,
    /// The ALiBi slopes ([`AttnConfig::alibi`]).
    pub alibi: Option<Alibi>,
    /// With a key split: this block's part (the partial outputs' first coordinate).
    pub split: Option<Expr>,
}

impl Io {
    /// With ALiBi: this block's slope (batch `b`, query head `h`) in a new vector of the f32 score
    /// tile `s` (along `axis`: the one its layout keeps per lane, the softmax's), read through `s`
    /// itself (call it where `s` holds nothing: before the key loop), ready for [`Self::alibi`].
    pub fn alibi_slope(
        &self,
        k: &mut KernelBuilder,
        cfg: &AttnConfig,
        (b, h): (&Expr, &Expr),
        (s, axis): (RegId, Axis),
    ) -> Option<RegId> {
        let a = self.alibi.as_ref()?;
        let v = match axis {
            Axis::Rows => k.row_vec("alibi_slope", s, DType::F32),
            Axis::Cols => k.col_vec("alibi_slope", s, DType::F32),
        };
        a.load(k, (b, h), s, (v, axis), &cfg.logits, cfg.dim);
        Some(v)
    }

    /// With ALiBi: the bias on the scores `s` whose rows are the queries from `q0` and columns the
    /// keys from `kv0` (`transposed`: rows the keys, columns the queries), after any cap.
    pub fn alibi(
        &self,
        k: &mut KernelBuilder,
        slope: Option<RegId>,
        s: RegId,
        (q0, kv0): (&Expr, &Expr),
        transposed: bool,
    ) {
        let Some(v) = slope else { return };
        let q = q0 + (&self.seq_kv - self.seq.clone());
        if transposed {
            Alibi::add(k, s, v, kv0, &q);
        } else {
            Alibi::add(k, s, v, &q, kv0);
        }
    }

    /// The Hopper forwards' scores `s` of key block `j` of `keys` (`cfg.kv_block` keys) against the
    /// 128-query block from `q_blk`, this wave's rows from `q0`: the soft cap, ALiBi (`slope`), and
    /// masks only where the block reaches past the key sequence, the diagonal or the window's left
    /// edge (whole-block conditions, the same for every wave). The online softmax step follows.
    pub(crate) fn score_block(
        &self,
        k: &mut KernelBuilder,
        cfg: &AttnConfig,
        (s, slope): (RegId, Option<RegId>),
        keys: &split::KeyRange,
        (q_blk, q0): (&Expr, &Expr),
        j: &Expr,
    ) {
        let kv = cfg.kv_block;
        let (kv0, inf) = (keys.at(j) * kv as i64, f32::NEG_INFINITY);
        let kv_end = (keys.at(j) + 1) * kv as i64;
        cfg.logits.cap(k, s, cfg.dim);
        self.alibi(k, slope, s, (q0, &kv0), false);
        k.if_(keys.limit.lt(&kv_end), |k| {
            k.mask(s, MaskRule::ColsBelow(keys.limit.clone()), q0, &kv0, inf)
        });
        if let Some(off) = cfg.last_key_offset(&self.seq, &self.seq_kv) {
            // The block's first query keeps keys up to `q_blk + off`.
            k.if_((q_blk + off.clone()).lt(&kv_end - 1), |k| {
                let offset = off.clone();
                k.mask(s, MaskRule::Causal { offset }, q0, &kv0, inf)
            });
        }
        if let Some(st) = cfg.first_key_offset(&self.seq, &self.seq_kv) {
            // The block's last query keeps keys from `q_blk + BLOCK − 1 + st`.
            let last = q_blk + (hopper::BLOCK as i64 - 1) + st.clone();
            k.if_(kv0.lt(&last), |k| {
                let offset = st.clone();
                k.mask(s, MaskRule::WindowStart { offset }, q0, &kv0, inf)
            });
        }
    }
}

impl Io {
    /// A view of the output `g` (`o` or `lse`) at `origin` (its `[b, h, s, …]` coordinates), in this
    /// block's plane of the partial output under a key split.
    pub fn out(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        mut origin: Vec<Expr>,
        (row_dim, col_dim): (u8, u8),
        (rows, cols): (u32, u32),
    ) -> kittens_ir::GlobalView {
        let shift = u8::from(self.split.is_some());
        if let Some(s) = &self.split {
            origin.insert(0, s.clone());
        }
        k.gview(g, origin, row_dim + shift, col_dim + shift, rows, cols)
    }
}

pub(crate) fn declare_io(k: &mut KernelBuilder, cfg: &AttnConfig) -> Io {
    let [batch, heads, heads_kv, seq, seq_kv] =
        ["batch", "heads", "heads_kv", "seq", "seq_kv"].map(|n| k.param(n));
    let dim = Expr::c(i64::from(cfg.dim));
    let tensor = |k: &mut KernelBuilder, name: &str, h: &Expr, s: &Expr, access, strides| {
        let dims = [
            ("b", batch.clone()),
            ("h", h.clone()),
            ("s", s.clone()),
            ("d", dim.clone()),
        ];
        k.global_strided(name, Bf16, &dims, strides, access)
    };
    let st = |k: &mut KernelBuilder, name: &str, h: &Expr, s: &Expr| {
        tensor_strides(k, cfg.strided, cfg.layout, name, (h, s, &dim))
    };
    let q_st = st(k, "q", &heads, &seq);
    let q = tensor(k, "q", &heads, &seq, Access::Read, q_st);
    let k_st = st(k, "k", &heads_kv, &seq_kv);
    let kv_k = tensor(k, "k", &heads_kv, &seq_kv, Access::Read, k_st);
    let v_strides = if cfg.v_transposed {
        // The logical `[b, h, s, d]` view of a `[b, h_kv, d, s]` buffer.
        vec![
            &heads_kv * seq_kv.clone() * dim.clone(),
            &seq_kv * dim.clone(),
            Expr::c(1),
            seq_kv.clone(),
        ]
    } else {
        st(k, "v", &heads_kv, &seq_kv)
    };
    let kv_v = tensor(k, "v", &heads_kv, &seq_kv, Access::Read, v_strides);
    let alibi = cfg.alibi.then(|| Alibi::declare(k, &batch, &heads));
    let (o, lse) = if cfg.kv_splits > 1 {
        let (o, lse) = split::declare_partials(
            k,
            cfg.kv_splits,
            [&batch, &heads, &seq],
            &dim,
            Access::Write,
        );
        (o, Some(lse))
    } else {
        let o_st = st(k, "o", &heads, &seq);
        let o = tensor(k, "o", &heads, &seq, Access::Write, o_st);
        let lse = cfg.lse.then(|| {
            let dims = [
                ("b", batch.clone()),
                ("h", heads.clone()),
                ("s", seq.clone()),
            ];
            let strides = vec![&heads * seq.clone(), seq.clone(), Expr::c(1)];
            k.global_strided("lse", DType::F32, &dims, strides, Access::Write)
        });
        (o, lse)
    };
    Io {
        batch,
        heads,
        heads_kv,
        seq,
        seq_kv,
        q,
        k: kv_k,
        v: kv_v,
        o,
        lse,
        alibi,
        split: None,
    }
}

/// The grid of every schedule, and this block's coordinates in it: one block per
/// [`AttnConfig::block_rows`] queries of a batch and head, times [`AttnConfig::kv_splits`] parts under a
/// key split (the parts of a query block neighbours, [`split::coords`]; the part goes to `io.split`),
/// launched in `order`. Returns batch, query head, query block (in launch order: a schedule may walk
/// them backwards) and KV head (GQA: query head `h` reads KV head `h / (heads / heads_kv)`).
pub(crate) fn query_grid(
    k: &mut KernelBuilder,
    io: &mut Io,
    cfg: &AttnConfig,
    order: GridOrder,
) -> [Expr; 4] {
    let (block_q, g) = (i64::from(cfg.block_rows()), cfg.kv_splits);
    k.grid(
        vec![
            io.batch.clone(),
            io.heads.clone(),
            io.seq.ceil_div(block_q) * i64::from(g),
        ],
        order,
    );
    let (qb, part) = split::coords(k.block(2), g);
    io.split = part;
    let (b, h) = (k.block(0), k.block(1));
    let hk = &h / (&io.heads / io.heads_kv.clone());
    [b, h, qb, hk]
}

/// Parameter order: `batch, heads, heads_kv, seq, seq_kv`; tensors `q, k, v, o` (and `lse`).
pub fn build(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    cfg.logits.check()?;
    if cfg.v_transposed && cfg.strided {
        return Err(KernelError::Config(
            "attn_fwd: the mi300x schedule reads V pre-transposed ([b, h_kv, d, s]); it takes no \
             caller strides (strided Q, K, V, O run the ping-pong or producer/consumer schedules)"
                .into(),
        ));
    }
    if cfg.v_transposed && cfg.schedule != AttnSchedule::Mi300x {
        return Err(KernelError::Config(format!(
            "attn_fwd: V given transposed is read by the mi300x schedule only, not {:?}",
            cfg.schedule
        )));
    }
    match cfg.schedule {
        AttnSchedule::PingPong8 => ping_pong::build(cfg),
        AttnSchedule::ProducerConsumer if cfg.tile_pairs => tile_pairs::build(cfg),
        AttnSchedule::ProducerConsumer => producer_consumer::build(cfg),
        AttnSchedule::Mi300x => mi300x::build(cfg),
    }
}

/// The kernel's name: each mask, the log-sum-exp output and the key split make separate kernels,
/// and MI300X-attn's schedule is named for it (`attn_fwd_mi300x_causal`).
fn name(cfg: &AttnConfig) -> String {
    let base = match cfg.schedule {
        AttnSchedule::Mi300x => "attn_fwd_mi300x",
        _ => "attn_fwd",
    };
    let mask = match (cfg.causal, cfg.bottom_right) {
        (false, _) => "",
        (true, false) => "_causal",
        (true, true) => "_causal_br",
    };
    let mask = match cfg.window {
        Some(_) => format!("{mask}_window"),
        None => mask.to_string(),
    };
    let mask = if cfg.alibi {
        format!("{mask}_alibi")
    } else {
        mask
    };
    // A split kernel always writes its partial log-sum-exps; `lse` is the merge's business.
    let name = match (cfg.kv_splits, cfg.lse) {
        (0 | 1, false) => format!("{base}{mask}"),
        (0 | 1, true) => format!("{base}{mask}_lse"),
        (g, _) => format!("{base}{mask}_split{g}"),
    };
    if cfg.strided {
        format!("{name}_strided")
    } else {
        name
    }
}

impl AttnConfig {
    /// The last key's offset as an expression (key `j` kept for query `i` when `j ≤ i + offset`):
    /// the causal mask's, the window's right side's, or the tighter of both; `None` without either.
    pub(crate) fn last_key_offset(&self, seq: &Expr, seq_kv: &Expr) -> Option<Expr> {
        let causal = match (self.causal, self.bottom_right) {
            (false, _) => None,
            (true, false) => Some(Expr::c(0)),
            (true, true) => Some(seq_kv - seq.clone()),
        };
        min_offset(causal, self.window.and_then(|w| w.end_expr(seq, seq_kv)))
    }

    /// The first key's offset (key `j` kept for query `i` when `j ≥ i + offset`): the window's left
    /// side; `None` without one.
    pub(crate) fn first_key_offset(&self, seq: &Expr, seq_kv: &Expr) -> Option<Expr> {
        self.window.and_then(|w| w.start_expr(seq, seq_kv))
    }

    /// Whether a query row can keep no key of the keys its block walks (bottom-right with more
    /// queries than keys; under a key split, any row whose part lies past its causal limit, and
    /// every row of a part with no key at all; with a window, any row whose window holds no key or
    /// lies outside the blocks walked): its running max stays `−∞` and the softmax needs
    /// [`Softmax::floor`].
    pub(crate) fn empty_rows(&self) -> bool {
        self.causal && self.bottom_right || self.kv_splits > 1 || self.window.is_some()
    }
}

impl HeadLogits for AttnConfig {
    fn logits(&self) -> Logits {
        self.logits
    }
    fn dim(&self) -> u32 {
        self.dim
    }
}
