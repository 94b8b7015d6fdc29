//! MI300X-attn's gfx942 attention as a schedule of the attention's tile program (the registry's
//! `seed001` variant).
//!
//! - **Two groups of four waves** (MI300X-attn §3.1-§3.2): the 8-wave ping-pong with one compute and
//!   one memory cluster per key block, so two barriers per block. Each group runs the whole
//!   sequence on its own queries, one phase behind the other: while one group multiplies, the other
//!   runs its softmax and loads.
//! - **The loop rotated** (§3.2's table): a block's compute phase is `P·V` of the block before and
//!   `K·Qᵀ` of this one; its memory phase is this block's softmax. P, the correction and the running
//!   sums carry from one phase to the next, and the last `P·V` runs after the loop.
//! - **K in LDS, double buffered** (§4.1-§4.2): 64-key blocks, 32 KiB at head dimension 128. Only the
//!   leading group (warpgroup 0) loads the next block, during its memory phase: the other group is
//!   then multiplying the current block from the other slot, and the new block has landed (its wait
//!   and the phase-end barrier) before either group's next compute phase. The bank solver picks K's
//!   XOR swizzle (`kittens check attn_fwd --gpu mi300x --banks`).
//! - **V from global memory straight into registers** (§4.3-§4.4): each chunk of V is loaded by the
//!   waves themselves as the A operand of `Oᵀ += Vᵀ·P` (all eight waves read the same lines, which
//!   the L1 serves). V is given transposed ([`AttnConfig::v_transposed`], §4.4's `V_t`, which the paper
//!   makes by a transpose launch before the attention), so a lane's four keys are one 8-byte load.
//! - **Three query tiles per wave** (§5.1): `q_rows / 16` tiles of 16 queries, each with its own
//!   scores, P, output and softmax, sharing every K and V chunk. The first [`TILES_IN_REGS`] live in
//!   registers; the others in LDS (32 KiB for the third tile of all eight waves, beside K's 32 KiB),
//!   read chunk by chunk beside K.
//! - **16×16×16 MFMAs** (§3.3): the score accumulator of `Sᵀ = K·Qᵀ` holds four consecutive keys of one
//!   query per lane, which is exactly the B operand `P` of the 16×16×16 `P·V`, so P is converted in
//!   place (no LDS remap), and the per-query max and sum reduce within a lane and across four lanes.
//!
//! The softmax is [`Softmax`] (the scale inside `exp2`, as in [`super::ping_pong`]); masks, layouts,
//! output rounding and the log-sum-exp are the attention's own, and so is the key split (§5.2's tail
//! split applied to every block, [`super::split`]): the grid, the key blocks a block walks
//! ([`split::KeyRange`]) and the partial outputs the merge combines. The loop runs over the blocks'
//! own indices, `first .. end`, slot `j % 2` holding block `j`: with a counter from 0 and
//! `first + j` for the block, the split kernels kept one more scalar across the loop and spilled 2
//! to 5 SGPRs (clang 22 and 19); this way none does.

use super::{declare_io, split, AttnConfig};
use crate::attn::Softmax;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Axis, Expr, GlobalId, GlobalView, Kernel, KernelBuilder, MaskRule, MmaForm, MmaOperand::Reg,
    RegId, Rounding, Schedule, Scope, SharedId,
};
use kittens_tile::{BaseShape, Layout, SharedTile};

/// Queries per tile: the M of a 16×16×16 MFMA (MI300X-attn §3.3).
const TILE_Q: u32 = 16;
/// Query tiles a wave keeps in registers; the others live in LDS (MI300X-attn §5.1: two tiles in
/// VGPRs, the third in the LDS that V's move to the L1 left free).
pub const TILES_IN_REGS: u32 = 2;
/// Head-dimension columns per step of `K·Qᵀ` and of `P·V`: K and V reach registers a 32-column chunk
/// at a time, so neither 64-key block is ever whole in registers.
const CHUNK: u32 = 32;

/// Where a query tile's `Qᵀ` lives.
enum QSource {
    /// In registers, by head-dimension chunks (`CHUNK × 16`).
    Regs(Vec<RegId>),
    /// In slot `slot` of the LDS buffer `q_s` (this wave's 16-row band), read a chunk at a time into
    /// `c` (double buffered) and transposed into `ct`.
    Lds {
        slot: u32,
        c: [RegId; 2],
        ct: [RegId; 2],
    },
}

/// One 16-query tile of a wave and everything that belongs to it alone.
struct QTile {
    /// Its first query.
    q0: Expr,
    q: QSource,
    /// `Sᵀ = K·Qᵀ`, keys × queries (f32), and P (bf16, the same lanes).
    att: RegId,
    p: RegId,
    /// `Oᵀ` by head-dimension chunks (`CHUNK × 16`, f32).
    o: Vec<RegId>,
    sm: Softmax,
}

/// What the phases share: the configuration, the buffers, the chunk registers and where this
/// block's queries and KV head are.
struct Body<'a> {
    cfg: &'a AttnConfig,
    tiles: Vec<QTile>,
    k_s: SharedId,
    q_s: Option<SharedId>,
    kg: GlobalId,
    vg: GlobalId,
    /// K chunks (keys × `CHUNK`, double buffered) and their transposes.
    k_c: [RegId; 2],
    kt_c: [RegId; 2],
    /// A chunk of `Vᵀ` as loaded (`CHUNK` × keys) and as the MFMA's A operand (keys × `CHUNK`).
    vt_c: RegId,
    v_c: RegId,
    /// The key blocks this block walks (all, or its part under a key split) with the keys it keeps,
    /// the last key's offset (the causal mask's diagonal, top-left or bottom-right, or a window's
    /// right side) and the first key's (a window's left side).
    keys: split::KeyRange,
    offset: Option<Expr>,
    start: Option<Expr>,
    b: Expr,
    hk: Expr,
}

impl Body<'_> {
    fn chunks(&self) -> u32 {
        self.cfg.dim / CHUNK
    }

    /// `rows` keys of K from key `s0`, all head-dimension columns.
    fn k_view(&self, k: &KernelBuilder, s0: Expr) -> GlobalView {
        let (b, hk) = (self.b.clone(), self.hk.clone());
        k.gview(
            self.kg,
            vec![b, hk, s0, Expr::c(0)],
            2,
            3,
            self.cfg.kv_block,
            self.cfg.dim,
        )
    }

    /// Chunk `c` of `Vᵀ` for the block from key `s0`: head-dimension rows, key columns.
    fn vt_view(&self, k: &KernelBuilder, s0: Expr, c: u32) -> GlobalView {
        let (b, hk, d0) = (self.b.clone(), self.hk.clone(), Expr::c((c * CHUNK) as i64));
        k.gview(self.vg, vec![b, hk, s0, d0], 3, 2, CHUNK, self.cfg.kv_block)
    }

    /// K's and the LDS query tiles' chunk `c` of the block in `slot`, into buffer `c % 2`.
    fn load_chunk(&self, k: &mut KernelBuilder, slot: &Expr, c: u32) {
        let (kv, i) = (self.cfg.kv_block, (c % 2) as usize);
        k.load(self.k_c[i], k.smem(self.k_s, slot).sub(kv, CHUNK, 0, c));
        for t in &self.tiles {
            if let (QSource::Lds { slot, c: q_c, .. }, Some(q_s)) = (&t.q, self.q_s) {
                let band = k.smem(q_s, *slot as i64).sub(TILE_Q, CHUNK, k.wave(), c);
                k.load(q_c[i], band);
            }
        }
    }

    /// `Sᵀ = K·Qᵀ` of key block `j` (slot `j % 2`) for every tile, chunk by chunk with the next chunk's
    /// LDS reads in flight, then masked past the keys kept and, when causal, above the diagonal.
    fn scores(&self, k: &mut KernelBuilder, j: &Expr) {
        let slot = j % 2;
        let lds = |t: &&QTile| matches!(t.q, QSource::Lds { .. });
        let per_chunk = 1 + self.tiles.iter().filter(lds).count() as u32;
        self.load_chunk(k, &slot, 0);
        for c in 0..self.chunks() {
            let i = (c % 2) as usize;
            if c + 1 < self.chunks() {
                self.load_chunk(k, &slot, c + 1);
                k.wait_shared(per_chunk);
            } else {
                k.wait_shared(0);
            }
            k.transpose(self.kt_c[i], self.k_c[i]);
            for t in &self.tiles {
                let q = match &t.q {
                    QSource::Regs(q_t) => q_t[c as usize],
                    QSource::Lds { c: q_c, ct, .. } => {
                        k.transpose(ct[i], q_c[i]);
                        ct[i]
                    }
                };
                // The first chunk starts the sum (the MFMA's zero-accumulator form).
                let acc = (c > 0).then_some(t.att);
                k.mma(MmaForm::Atb, t.att, Reg(self.kt_c[i]), Reg(q), acc);
            }
        }
        let kv0 = j * self.cfg.kv_block as i64;
        for t in &self.tiles {
            self.cfg.logits.cap(k, t.att, self.cfg.dim);
            let inf = f32::NEG_INFINITY;
            let past = MaskRule::RowsBelow(self.keys.limit.clone());
            k.mask(t.att, past, &kv0, &t.q0, inf);
            if let Some(offset) = &self.offset {
                let rule = MaskRule::CausalT {
                    offset: offset.clone(),
                };
                k.mask(t.att, rule, &kv0, &t.q0, inf);
            }
            if let Some(offset) = &self.start {
                let rule = MaskRule::WindowStartT {
                    offset: offset.clone(),
                };
                k.mask(t.att, rule, &kv0, &t.q0, inf);
            }
        }
    }

    /// `Oᵀ = Oᵀ·scale + Vᵀ·P` of key block `j` for every tile, V chunk by chunk from global memory.
    fn pv(&self, k: &mut KernelBuilder, j: &Expr) {
        let s0 = j * self.cfg.kv_block as i64;
        for c in 0..self.chunks() {
            k.load_global(self.vt_c, self.vt_view(k, s0.clone(), c));
            k.transpose(self.v_c, self.vt_c);
            for t in &self.tiles {
                let o = t.o[c as usize];
                k.mul_col(o, o, t.sm.scale);
                k.mma_atb(o, self.v_c, t.p, o);
            }
        }
    }

    /// This block's softmax step on every tile, P converted in place (the same lanes, §3.3).
    fn softmax(&self, k: &mut KernelBuilder) {
        for t in &self.tiles {
            t.sm.step(k, t.att);
            k.copy(t.p, t.att);
        }
    }
}

/// MI300X-attn's program; parameters and tensors as [`super::build`].
pub(super) fn build(cfg: &AttnConfig) -> Result<Kernel, KernelError> {
    if cfg.alibi {
        return Err(KernelError::Config(
            "attn_fwd (mi300x): alibi_slopes are not in MI300X-attn's schedule; the ping-pong \
             (the default on gfx942 and gfx950) takes them"
                .into(),
        ));
    }
    let (d, qr, kv) = (cfg.dim, cfg.q_rows, cfg.kv_block);
    if d % CHUNK != 0 || qr == 0 || qr % TILE_Q != 0 || kv == 0 || kv % 32 != 0 {
        return Err(KernelError::Config(format!(
            "attn_fwd (mi300x): dim {d} must be a multiple of {CHUNK}, q_rows {qr} of {TILE_Q} and \
             kv_block {kv} of 32"
        )));
    }
    if !cfg.v_transposed {
        // The MFMA operand wants four consecutive keys of one head-dimension column per lane: from V
        // stored with the head dimension contiguous that is one load per element (§4.4's reason
        // for the transpose pass), which the HIP lowering does not emit.
        return Err(KernelError::Config(
            "attn_fwd (mi300x): V must be given transposed, [b, h_kv, d, s] (v_transposed)".into(),
        ));
    }
    let mut k = KernelBuilder::new(&super::name(cfg), Schedule::PingPong8);
    let mut io = declare_io(&mut k, cfg);
    let [b, h, qb, hk] = super::query_grid(&mut k, &mut io, cfg, cfg.remap);
    let block_q = 8 * qr as i64;
    let wave_q0 = &qb * block_q + k.wave() * qr as i64;
    let n_tiles = qr / TILE_Q;
    let lds_tiles = n_tiles.saturating_sub(TILES_IN_REGS);
    let k_s = k.shared_tile("k_s", SharedTile::new(Bf16, kv, d), 2);
    // One 16-row band per wave in each LDS slot.
    let q_s = (lds_tiles > 0)
        .then(|| k.shared_tile("q_s", SharedTile::new(Bf16, 8 * TILE_Q, d), lds_tiles));
    let tiles: Vec<QTile> = (0..n_tiles)
        .map(|t| declare_tile(&mut k, cfg, t, &wave_q0))
        .collect();
    let chunk = |k: &mut KernelBuilder, name: &str, i: usize| {
        k.tile(
            &format!("{name}{i}"),
            Bf16,
            kv,
            CHUNK,
            Layout::Row,
            BaseShape::S16X32,
        )
    };
    let k_c = [0, 1].map(|i| chunk(&mut k, "k_c", i));
    let kt_c = [0, 1].map(|i| {
        k.tile(
            &format!("kt_c{i}"),
            Bf16,
            CHUNK,
            kv,
            Layout::Col,
            BaseShape::S32X16,
        )
    });
    // Vᵀ's lanes hold four consecutive keys of one column: the 16×16×16 A operand (§3.3).
    let vt_c = k.tile("vt_c", Bf16, CHUNK, kv, Layout::Row, BaseShape::S16X16);
    let v_c = k.tile("v_c", Bf16, kv, CHUNK, Layout::Col, BaseShape::S16X16);
    let offset = cfg.last_key_offset(&io.seq, &io.seq_kv);
    let start = cfg.first_key_offset(&io.seq, &io.seq_kv);
    // This block's key blocks: all its queries need, or its part of them (`super::split`).
    let q_rows = (&qb * block_q, (&qb + 1) * block_q - 1);
    let keys = split::KeyRange::new(&io, cfg, &q_rows.0, &q_rows.1);
    let body = Body {
        cfg,
        tiles,
        k_s,
        q_s,
        kg: io.k,
        vg: io.v,
        k_c,
        kt_c,
        vt_c,
        v_c,
        keys,
        offset,
        start,
        b: b.clone(),
        hk,
    };
    // 16 queries of `q` from query `q0`, `cols` columns from `c0`.
    let rows = |k: &KernelBuilder, g: GlobalId, q0: &Expr, c0: u32, cols: u32| {
        let origin = vec![b.clone(), h.clone(), q0.clone(), Expr::c(c0 as i64)];
        k.gview(g, origin, 2, 3, TILE_Q, cols)
    };

    // Prologue: the first key block into its slot (every wave), the LDS query tiles into this wave's
    // bands, the register tiles' Qᵀ chunk by chunk (through f32, as `ping_pong` does, so that the
    // prologue consumes these loads and no step in the loop waits for them), and the state of an
    // empty block before the first: P = 0, correction 1 (so the first step's `P·V`, of block
    // `max(first − 1, 0)`, adds nothing).
    let (first, end) = (body.keys.first.clone(), body.keys.end());
    k.load_async(k.smem(k_s, &first % 2), body.k_view(&k, &first * kv as i64));
    let q_f = k.tile("q_f", F32, TILE_Q, CHUNK, Layout::Row, BaseShape::S16X32);
    let q_r = k.tile("q_r", Bf16, TILE_Q, CHUNK, Layout::Row, BaseShape::S16X32);
    for t in &body.tiles {
        match (&t.q, q_s) {
            (QSource::Regs(q_t), _) => {
                for (c, &qt) in q_t.iter().enumerate() {
                    k.load_global(q_f, rows(&k, io.q, &t.q0, c as u32 * CHUNK, CHUNK));
                    k.copy(q_r, q_f);
                    k.transpose(qt, q_r);
                }
            }
            (QSource::Lds { slot, .. }, Some(q_s)) => {
                let band = k.smem(q_s, *slot as i64).sub(TILE_Q, d, k.wave(), 0);
                k.load_async_by(Scope::Wave, band, rows(&k, io.q, &t.q0, 0, d));
            }
            (QSource::Lds { .. }, None) => unreachable!("LDS tiles are declared with their buffer"),
        }
        t.o.iter().for_each(|&o| k.zero(o));
        k.zero(t.sm.norm);
        k.neg_infty(t.sm.max);
        k.fill(t.sm.scale, 1.0);
        k.zero(t.p);
    }
    k.wait_async(0);
    k.barrier();
    k.staggered(|k| {
        k.for_range("j", first, end.clone(), |k, j| {
            k.compute("P·V of j-1, K·Qᵀ of j", |k| {
                body.pv(k, &(&j - 1).max(0));
                body.scores(k, &j);
            });
            k.memory("softmax of j, K of j+1 into LDS", |k| {
                k.if_(k.warpgroup().eq(0), |k| {
                    let next = &j + 1;
                    let dst = k.smem(body.k_s, &next % 2);
                    let src = body.k_view(k, next * kv as i64);
                    k.load_async_by(Scope::WarpGroup, dst, src);
                });
                body.softmax(k);
                k.wait_async(0);
            });
        });
    });
    body.pv(&mut k, &(&end - 1).max(0));

    // Normalise and store each tile (the output's rounding), then its log-sum-exp.
    let o_q = k.tile("o_q", F32, TILE_Q, CHUNK, Layout::Row, BaseShape::S16X16);
    let lse_v = io.lse.map(|_| k.col_vec("lse_v", body.tiles[0].att, F32));
    let inv = k.col_vec("inv_norm", body.tiles[0].att, F32);
    for t in &body.tiles {
        t.sm.inv_norm(&mut k, inv);
        for (c, &oc) in t.o.iter().enumerate() {
            k.mul_col(oc, oc, inv);
            k.transpose(o_q, oc);
            k.rounding = cfg.rounding;
            let at = vec![
                b.clone(),
                h.clone(),
                t.q0.clone(),
                Expr::c((c as u32 * CHUNK) as i64),
            ];
            k.store(io.out(&k, io.o, at, (2, 3), (TILE_Q, CHUNK)), o_q);
            k.rounding = Rounding::Rtne;
        }
        if let (Some(g), Some(lv)) = (io.lse, lse_v) {
            t.sm.lse(&mut k, lv);
            let at = vec![b.clone(), h.clone(), t.q0.clone()];
            k.store(io.out(&k, g, at, (1, 2), (1, TILE_Q)), lv);
        }
    }
    Ok(k.finish()?)
}

/// Tile `t`'s registers: `Qᵀ` chunks when it lives in registers, scores, P, output chunks and its
/// softmax.
fn declare_tile(k: &mut KernelBuilder, cfg: &AttnConfig, t: u32, wave_q0: &Expr) -> QTile {
    let (d, kv) = (cfg.dim, cfg.kv_block);
    let q = if t < TILES_IN_REGS {
        let chunk = |c| {
            let name = format!("q_t{t}_{c}");
            k.tile(&name, Bf16, CHUNK, TILE_Q, Layout::Col, BaseShape::S32X16)
        };
        QSource::Regs((0..d / CHUNK).map(chunk).collect())
    } else {
        let mut buf = |name: &str, rows, cols, layout, base| {
            [0, 1].map(|i| k.tile(&format!("{name}{t}_{i}"), Bf16, rows, cols, layout, base))
        };
        QSource::Lds {
            slot: t - TILES_IN_REGS,
            c: buf("q_c", TILE_Q, CHUNK, Layout::Row, BaseShape::S16X32),
            ct: buf("q_ct", CHUNK, TILE_Q, Layout::Col, BaseShape::S32X16),
        }
    };
    let att = k.tile(
        &format!("att{t}"),
        F32,
        kv,
        TILE_Q,
        Layout::Col,
        BaseShape::S16X16,
    );
    let p = k.tile(
        &format!("p{t}"),
        Bf16,
        kv,
        TILE_Q,
        Layout::Col,
        BaseShape::S16X16,
    );
    let o = (0..d / CHUNK)
        .map(|c| {
            let name = format!("o{t}_{c}");
            k.tile(&name, F32, CHUNK, TILE_Q, Layout::Col, BaseShape::S16X16)
        })
        .collect();
    let mut sm = Softmax::declare_named(k, att, Axis::Cols, cfg, &format!("_{t}"));
    sm.floor = cfg.empty_rows();
    QTile {
        q0: wave_q0 + (t * TILE_Q) as i64,
        q,
        att,
        p,
        o,
        sm,
    }
}
