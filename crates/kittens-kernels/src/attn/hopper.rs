//! What the Hopper (sm_90a) attention programs share: 64-column shared tiles in the 128-byte
//! swizzle (the widest TMA/`wgmma` swizzle), blocks of two consumer warpgroups × 64 rows, the head
//! dimension padded to whole tiles, and the forward's tiles (`crate::attn_fwd`'s producer/consumer
//! program and the varlen and paged forwards) with their schedule and row statistics, the tensor
//! views and the consumer warpgroups' turns on the tensor cores. The backward's are in
//! [`super::hopper_bwd`].

use super::{HeadLogits, Softmax};
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Axis, Expr, GlobalId, GlobalView, KernelBuilder, RegId, Schedule, SharedId};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Rows of a block: two consumer warpgroups × 64 (the forward's queries per block,
/// `crate::attn_fwd::AttnConfig::block_rows`; the backward's queries or keys per block).
pub(crate) const BLOCK: u32 = 128;
/// Columns of one shared tile: 64 bf16 = 128 bytes, the 128-byte swizzle's row.
pub(crate) const COLS: u32 = 64;

/// The head dimension the tiles cover: `dim` rounded up to whole 64-column tiles
/// (`crate::attn_fwd`'s producer/consumer module docs say why).
pub fn padded_dim(dim: u32) -> u32 {
    dim.next_multiple_of(COLS)
}

/// Ring slots for K and for V of a forward block of `BLOCK` queries with `q_slots` Q slots, head dim
/// `dim` (padded) and `kv`-key blocks: as many as fit beside Q in the H100's 227 KiB (2 each at head
/// dim 128 and 128-key blocks: 32 KiB of Q + 2 × 64 KiB). With `overlap` (the rotated key loop),
/// P·V of block j runs in iteration j + 1, so V's slot must outlive one more hand-off: V gets at
/// least 3 slots (32 + 2 × 32 + 3 × 32 KiB at head dim 128).
pub(crate) fn ring_stages(dim: u32, kv: u32, overlap: bool, q_slots: u32) -> (u32, u32) {
    let q = q_slots * BLOCK * dim * 2;
    let per_tensor = kv * dim * 2;
    let budget = 220 * 1024 - q;
    if !overlap {
        let ring = (budget / (2 * per_tensor)).clamp(2, 4);
        return (ring, ring);
    }
    let k_ring = ((budget - per_tensor) / (2 * per_tensor)).clamp(2, 4);
    (k_ring, k_ring.max(3))
}

/// The tiles of the Hopper forward's block, per 64-column half of the head dimension: Q's shared
/// tiles (`q_slots` slots of `BLOCK` rows), the K and V rings (`kv` rows each), and each consumer
/// wave's `16 × kv` scores `s`, their bf16 copy `p` (the next `wgmma`'s register A operand) and its
/// `16 × 64` output accumulators. The varlen and paged forwards (`crate::attn_varlen_hopper`,
/// `crate::attn_paged_hopper`) declare the same.
pub(crate) struct HopperTiles {
    pub q_s: Vec<SharedId>,
    pub k_s: Vec<SharedId>,
    pub v_s: Vec<SharedId>,
    pub s: RegId,
    pub p: RegId,
    pub o_r: Vec<RegId>,
}

impl HopperTiles {
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        dim: u32,
        kv: u32,
        q_slots: u32,
        rings: (u32, u32),
    ) -> HopperTiles {
        HopperTiles::declare_rows(k, dim, kv, BLOCK, q_slots, rings)
    }

    /// [`HopperTiles::declare`] with Q slots of `block_q` rows (64 per consumer warpgroup); key
    /// blocks of 16 keys (`kv` 16) take P in 16-column base tiles.
    pub(crate) fn declare_rows(
        k: &mut KernelBuilder,
        dim: u32,
        kv: u32,
        block_q: u32,
        q_slots: u32,
        (ring_k, ring_v): (u32, u32),
    ) -> HopperTiles {
        let halves = dim / COLS;
        let swz = |rows| SharedTile::with_swizzle(Bf16, rows, COLS, Swizzle::NV_128B);
        let mut shared = |name: &str, rows, slots| -> Vec<SharedId> {
            (0..halves)
                .map(|i| k.shared_tile(&format!("{name}{i}"), swz(rows), slots))
                .collect()
        };
        let (q_s, k_s, v_s) = (
            shared("q_s", block_q, q_slots),
            shared("k_s", kv, ring_k),
            shared("v_s", kv, ring_v),
        );
        let s = k.tile("s", F32, 16, kv, Layout::Row, BaseShape::S16X16);
        let p_base = if kv < 32 {
            BaseShape::S16X16
        } else {
            BaseShape::S16X32
        };
        let p = k.tile("p", Bf16, 16, kv, Layout::Row, p_base);
        let o_r = (0..halves)
            .map(|i| {
                k.tile(
                    &format!("o{i}"),
                    F32,
                    16,
                    COLS,
                    Layout::Row,
                    BaseShape::S16X16,
                )
            })
            .collect();
        HopperTiles {
            q_s,
            k_s,
            v_s,
            s,
            p,
            o_r,
        }
    }
}

/// The forwards' schedule (`crate::attn_fwd`'s programs and the varlen forward): one producer
/// warpgroup issuing the loads on 40 registers a thread, two consumer warpgroups (`wgmma` and the
/// softmax) on 232.
pub(crate) fn forward_schedule() -> Schedule {
    Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 40,
        consumer_regs: 232,
    }
}

/// A consumer wave's row statistics beside its [`HopperTiles`]: the online softmax over the rows of
/// the score tile `s` (`floor`: rows may keep no key, [`Softmax::floor`]), the reciprocal of each
/// row's final sum and, where the program writes the log-sum-exp, its rows.
pub(crate) struct RowStats {
    pub softmax: Softmax,
    pub inv_norm: RegId,
    pub lse_v: Option<RegId>,
}

impl RowStats {
    pub(crate) fn declare(
        k: &mut KernelBuilder,
        s: RegId,
        cfg: &impl HeadLogits,
        floor: bool,
        lse: bool,
    ) -> RowStats {
        let mut softmax = Softmax::declare(k, s, Axis::Rows, cfg);
        softmax.floor = floor;
        let inv_norm = k.row_vec("inv_norm", s, F32);
        let lse_v = lse.then(|| k.row_vec("lse_v", s, F32));
        RowStats {
            softmax,
            inv_norm,
            lse_v,
        }
    }
}

/// `f`'s products as a consumer warpgroup's turn on the tensor cores when `on` (a compute cluster,
/// which the sm_90a lowering passes between the two consumer warpgroups), else as they come.
pub(crate) fn turn(k: &mut KernelBuilder, on: bool, label: &str, f: &dyn Fn(&mut KernelBuilder)) {
    if on {
        k.compute(label, |k| f(k));
    } else {
        f(k);
    }
}

/// `rows × 64` of head `h` of a `[b, h, s, d]` tensor `g` from sequence position `s0`, columns
/// from `col0`.
pub(crate) fn view(
    k: &KernelBuilder,
    g: GlobalId,
    b: &Expr,
    h: &Expr,
    s0: Expr,
    col0: u32,
    rows: u32,
) -> GlobalView {
    k.gview(
        g,
        vec![b.clone(), h.clone(), s0, Expr::c(i64::from(col0))],
        2,
        3,
        rows,
        COLS,
    )
}
