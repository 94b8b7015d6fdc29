//! A key block's tiles and the steps of one query step, which the three key-block loops put in
//! their own order: the plain loop ([`super::schedule`]), the 4-wave interleave ([`super::interleave4`])
//! and the 8-wave ping-pong ([`super::ping_pong`]). A step reads the queries' Q and dO from the
//! shared rings twice, in row layout for `Sᵀ = K·Qᵀ`, `dPᵀ = V·dOᵀ` and in column layout for
//! `dVᵀ += dOᵀ·P`, `dKᵀ += Qᵀ·dS` (HipKittens §3's row and column loads of one shared tile).
//!
//! With `grad_base` 32×32 the gradient products run as `32x32x16` MFMAs (K = 16 queries) while the
//! score products stay `16x16x32` (K = 32 of the head dimension): the column-layout operands then
//! have 16×32 base tiles (the transposed 32×16 A operand of the 32-row MFMA) and P, dS are remapped
//! into 32×16 row tiles instead of 16×32 ones (HipKittens §4: "multiple MFMA instruction shapes
//! (16 × 16 × 32 and 32 × 32 × 16)").

use super::ctx::{Ctx, D_CHUNK, LSE_ROWS};
use kittens_hw::dtype::DType::{self, Bf16, F32};
use kittens_ir::{Axis, Expr, KernelBuilder, MaskRule, ReduceOp, RegId, SharedId, SharedView};
use kittens_tile::{BaseShape, Layout, RegFile, RegTile};

/// The tiles of a key block and where it sits.
pub(super) struct KeyBlock<'a> {
    pub x: &'a Ctx,
    /// This wave's first key.
    pub k0: Expr,
    /// The first query step that keeps any key of the block, steps per query head, the mask's offset.
    first: Expr,
    /// The query step after the last that keeps any key of the block (a window's left side), and
    /// that side's offset (key `j` kept for query `i` when `j ≥ i + start`).
    end: Expr,
    start: Option<Expr>,
    per_head: Expr,
    offset: Option<Expr>,
    k_r: RegId,
    k_t: RegId,
    v_r: RegId,
    v_t: RegId,
    pub dk_t: RegId,
    pub dv_t: RegId,
    dk_r: RegId,
    dv_r: RegId,
    q_r: RegId,
    q_t: RegId,
    q_c: RegId,
    do_r: RegId,
    do_t: RegId,
    do_c: RegId,
    s_t: RegId,
    /// Whether the scores are capped (`crate::attn::score::Logits::cap_t_with_grad`).
    capped: bool,
    dp_t: RegId,
    p_b: RegId,
    p_c: RegId,
    ds_b: RegId,
    ds_c: RegId,
    lse_t: RegId,
    lse_c: RegId,
    d_c: RegId,
    /// The lse's gradient of a step's queries ([`BwdConfig::dlse`]).
    dl_c: Option<RegId>,
    do_ch: RegId,
    o_ch: RegId,
    prod: RegId,
    prod_ch: RegId,
    d_r: RegId,
    /// ALiBi's slope of the step's query head (a column vector of `s_t`).
    slope: Option<RegId>,
}

/// Registers handed out to pinned tiles, in order, from the start of the AGPR file.
struct Pins {
    on: bool,
    next: u32,
}

impl Pins {
    fn tile(&mut self, t: RegTile) -> Result<RegTile, kittens_tile::TileError> {
        if !self.on {
            return Ok(t);
        }
        let n = t.regs_per_lane(64);
        let first = self.next;
        self.next += n;
        t.pinned(RegFile::Agpr, first, first + n - 1, 64)
    }
}

impl<'a> KeyBlock<'a> {
    /// Declares the tiles of key block `z` (keys `z·waves·key_rows + wave·key_rows ..`).
    pub fn declare(k: &mut KernelBuilder, x: &'a Ctx, z: &Expr) -> Self {
        let (cfg, io) = (&x.cfg, &x.io);
        let (d, kr, qs) = (cfg.dim, cfg.key_rows, cfg.key_step);
        let block0 = z * i64::from(cfg.waves * kr);
        let k0 = &block0 + k.wave() * i64::from(kr);
        // The gradient products' operand and accumulator bases (module docs).
        let g = cfg.grad_base.rows;
        let (col_op, row_op) = (
            BaseShape::new(32 / g * 16, g),
            BaseShape::new(g, 32 / g * 16),
        );
        let mut pins = Pins {
            on: cfg.pin_agprs,
            next: 0,
        };
        let mut pinned = |k: &mut KernelBuilder, name: &str, dt: DType, r, c, l, b| {
            let t = RegTile::new(dt, r, c, l, b).and_then(|t| pins.tile(t));
            k.reg_tile(name, t)
        };
        // Declared in the plain program's order (the C++ declarations follow it).
        let k_r = k.tile("k_r", Bf16, kr, d, Layout::Row, BaseShape::S16X32);
        let k_t = pinned(k, "k_t", Bf16, d, kr, Layout::Col, BaseShape::S32X16);
        let v_r = k.tile("v_r", Bf16, kr, d, Layout::Row, BaseShape::S16X32);
        let v_t = pinned(k, "v_t", Bf16, d, kr, Layout::Col, BaseShape::S32X16);
        let dk_t = pinned(k, "dk_t", F32, d, kr, Layout::Col, cfg.grad_base);
        let dv_t = pinned(k, "dv_t", F32, d, kr, Layout::Col, cfg.grad_base);
        let q_r = k.tile("q_r", Bf16, qs, d, Layout::Row, BaseShape::S16X32);
        let q_t = k.tile("q_t", Bf16, d, qs, Layout::Col, BaseShape::S32X16);
        let q_c = k.tile("q_c", Bf16, qs, d, Layout::Col, col_op);
        let do_r = k.tile("do_r", Bf16, qs, d, Layout::Row, BaseShape::S16X32);
        let do_t = k.tile("do_t", Bf16, d, qs, Layout::Col, BaseShape::S32X16);
        let do_c = k.tile("do_c", Bf16, qs, d, Layout::Col, col_op);
        let s_t = k.tile("s_t", F32, kr, qs, Layout::Col, BaseShape::S16X16);
        let dp_t = k.tile("dp_t", F32, kr, qs, Layout::Col, BaseShape::S16X16);
        let p_b = k.tile("p_b", Bf16, kr, qs, Layout::Row, row_op);
        let p_c = k.tile("p_c", Bf16, qs, kr, Layout::Col, col_op);
        let ds_b = k.tile("ds_b", Bf16, kr, qs, Layout::Row, row_op);
        let ds_c = k.tile("ds_c", Bf16, qs, kr, Layout::Col, col_op);
        let lse_t = k.tile("lse_t", F32, LSE_ROWS, qs, Layout::Col, BaseShape::S16X16);
        let lse_c = k.col_vec("lse_c", s_t, F32);
        let d_c = k.col_vec("d_c", s_t, F32);
        let dl_c = x.cfg.dlse.then(|| k.col_vec("dl_c", s_t, F32));
        let do_ch = k.tile("do_ch", Bf16, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
        let o_ch = k.tile("o_ch", Bf16, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
        let prod = k.tile("prod", F32, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
        let prod_ch = k.tile("prod_ch", F32, qs, D_CHUNK, Layout::Row, BaseShape::S16X32);
        let d_r = k.row_vec("d_r", prod, F32);
        let slope = cfg.alibi.then(|| k.col_vec("alibi_c", s_t, F32));
        let dk_r = k.tile("dk_r", F32, kr, d, Layout::Row, cfg.grad_base);
        let dv_r = k.tile("dv_r", F32, kr, d, Layout::Row, cfg.grad_base);
        let offset = cfg.last_key_offset(&io.seq_q, &io.seq_kv);
        let start = cfg.first_key_offset(&io.seq_q, &io.seq_kv);
        // Causal (or a window's right side): the first query step that keeps any key of the block
        // (key j ≥ block0 needs i ≥ j − offset).
        let first = match &offset {
            Some(off) => (&block0 - off.clone()).max(0) / i64::from(qs),
            None => Expr::c(0),
        };
        // A window's left side: the step after the last that keeps any (key j needs i ≤ j − start).
        let all = io.seq_q.ceil_div(i64::from(qs));
        let end = match &start {
            Some(st) => {
                let last = &block0 + i64::from(cfg.waves * kr - 1) - st.clone();
                all.min(last / i64::from(qs) + 1).max(0)
            }
            None => all,
        };
        let per_head = (&end - first.clone()).max(1);
        KeyBlock {
            x,
            k0,
            first,
            end,
            start,
            per_head,
            offset,
            k_r,
            k_t,
            v_r,
            v_t,
            dk_t,
            dv_t,
            dk_r,
            dv_r,
            q_r,
            q_t,
            q_c,
            do_r,
            do_t,
            do_c,
            s_t,
            capped: cfg.logits.softcap.is_some(),
            dp_t,
            p_b,
            p_c,
            ds_b,
            ds_c,
            lse_t,
            lse_c,
            d_c,
            dl_c,
            do_ch,
            o_ch,
            prod,
            prod_ch,
            d_r,
            slope,
        }
    }

    /// Pipeline steps: every (query head of the group, query step) pair, the heads one after another.
    pub fn steps(&self) -> Expr {
        let steps = &self.end - self.first.clone();
        self.x.group.clone() * steps.max(0)
    }

    /// Step `t` is query step `first + t % per_head` of the group's head `t / per_head`, so the
    /// prefetch runs on across heads (a loop over heads around a loop over steps kept four more
    /// scalar registers live on gfx942, which clang spilled into vector lanes).
    fn head_of(&self, t: &Expr) -> Expr {
        &self.x.hk * self.x.group.clone() + t / self.per_head.clone()
    }
    fn q0_of(&self, t: &Expr) -> Expr {
        (self.first.clone() + t % self.per_head.clone()) * i64::from(self.x.cfg.key_step)
    }

    /// This wave's K and V, transposed into the operands of the score products; dK, dV zeroed.
    pub fn prologue(&self, k: &mut KernelBuilder) {
        let (x, kr) = (self.x, self.x.cfg.key_rows);
        k.load_global(self.k_r, x.view(k, x.io.k, &x.hk, self.k0.clone(), kr));
        k.load_global(self.v_r, x.view(k, x.io.v, &x.hk, self.k0.clone(), kr));
        k.transpose(self.k_t, self.k_r);
        k.transpose(self.v_t, self.v_r);
        k.zero(self.dk_t);
        k.zero(self.dv_t);
    }

    /// A step's rows of ring `ring`'s slot `slot`: the slot, or its first `key_step` rows when the
    /// key blocks take fewer queries per step than the ring's `step` rows.
    fn slot(&self, k: &KernelBuilder, ring: SharedId, slot: &Expr) -> SharedView {
        let (qs, step, d) = (self.x.cfg.key_step, self.x.cfg.step, self.x.cfg.dim);
        let v = k.smem(ring, slot.clone());
        if qs == step {
            v
        } else {
            v.sub(qs, d, 0, 0)
        }
    }

    /// Step `t`'s Q, dO and O into ring slot `slot`, asynchronously (this wave's share).
    pub fn fill(&self, k: &mut KernelBuilder, slot: Expr, t: Expr) {
        let x = self.x;
        let (h, q0) = (self.head_of(&t), self.q0_of(&t));
        for (ring, g) in [(x.qk_s, x.io.q), (x.dov_s, x.io.d_o), (x.o_s, x.io.o)] {
            let v = x.view(k, g, &h, q0.clone(), x.cfg.key_step);
            k.load_async(self.slot(k, ring, &slot), v);
        }
    }

    /// The row-layout Q and dO of the step in `slot` (the score products' operands).
    pub fn read_rows(&self, k: &mut KernelBuilder, slot: &Expr) {
        k.load(self.q_r, self.slot(k, self.x.qk_s, slot));
        k.load(self.do_r, self.slot(k, self.x.dov_s, slot));
    }

    /// The column-layout Q and dO of the step in `slot` (the gradient products' operands).
    pub fn read_cols(&self, k: &mut KernelBuilder, slot: &Expr) {
        self.read_col_q(k, slot);
        self.read_col_do(k, slot);
    }
    pub fn read_col_q(&self, k: &mut KernelBuilder, slot: &Expr) {
        k.load(self.q_c, self.slot(k, self.x.qk_s, slot));
    }
    pub fn read_col_do(&self, k: &mut KernelBuilder, slot: &Expr) {
        k.load(self.do_c, self.slot(k, self.x.dov_s, slot));
    }

    /// `D = rowsum(dO∘O)` of the step in `slot`, over `D_CHUNK`-column chunks, copied into the score
    /// tile's column vector (the chunks' waits cover every LDS read issued before). The products
    /// are summed elementwise and reduced across lanes once; `lean` reduces each chunk's product
    /// into the sum instead, which holds one product tile fewer (16 registers per lane at 32
    /// queries) for three more cross-lane reductions: the 8-wave ping-pong's 256 registers per lane
    /// need it on gfx942.
    pub fn delta(&self, k: &mut KernelBuilder, slot: &Expr, lean: bool) {
        let (x, qs) = (self.x, self.x.cfg.key_step);
        for ch in 0..x.cfg.dim / D_CHUNK {
            let sub = |k: &KernelBuilder, ring| -> SharedView {
                self.slot(k, ring, slot).sub(qs, D_CHUNK, 0, ch)
            };
            k.load(self.do_ch, sub(k, x.dov_s));
            k.load(self.o_ch, sub(k, x.o_s));
            k.wait_shared(0);
            if lean {
                k.mul(self.prod, self.do_ch, self.o_ch);
                let acc = (ch > 0).then_some(self.d_r);
                k.reduce(Axis::Rows, ReduceOp::Sum, self.d_r, self.prod, acc);
            } else if ch == 0 {
                k.mul(self.prod, self.do_ch, self.o_ch);
            } else {
                k.mul(self.prod_ch, self.do_ch, self.o_ch);
                k.add(self.prod, self.prod, self.prod_ch);
            }
        }
        if !lean {
            k.reduce(Axis::Rows, ReduceOp::Sum, self.d_r, self.prod, None);
        }
        k.copy(self.d_c, self.d_r);
    }

    /// Step `t`'s log-sum-exp (times log2 e) into the score tile's column vector.
    pub fn lse(&self, k: &mut KernelBuilder, t: &Expr) {
        let (h, q0) = (self.head_of(t), self.q0_of(t));
        let qs = self.x.cfg.key_step;
        self.x.load_lse(k, self.lse_t, self.lse_c, &h, &q0, qs);
        // D (from [`Self::delta`], which every loop runs first) less the lse's gradient.
        let dl = (self.lse_t, self.dl_c, self.d_c);
        self.x.fold_dlse(k, dl, &h, &q0, qs);
        // Every schedule calls this where the score tile is dead (before the step's products).
        self.x.load_slope(k, self.s_t, self.slope, &h);
    }

    /// `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` of step `t`, the scores masked past the queries and, when
    /// causal, above the diagonal.
    pub fn scores(&self, k: &mut KernelBuilder, t: &Expr) {
        self.score_products(k);
        self.mask(k, t);
    }

    /// The two score products alone.
    pub fn score_products(&self, k: &mut KernelBuilder) {
        k.transpose(self.q_t, self.q_r);
        k.transpose(self.do_t, self.do_r);
        k.zero(self.s_t);
        k.mma_atb(self.s_t, self.k_t, self.q_t, self.s_t);
        k.zero(self.dp_t);
        k.mma_atb(self.dp_t, self.v_t, self.do_t, self.dp_t);
    }

    /// The scores of step `t` capped (with a soft cap), then masked past the queries and, when
    /// causal, above the diagonal.
    pub fn mask(&self, k: &mut KernelBuilder, t: &Expr) {
        let (io, q0) = (&self.x.io, self.q0_of(t));
        let inf = f32::NEG_INFINITY;
        let s_t = self.s_t;
        let cfg = &self.x.cfg;
        cfg.logits
            .cap_t_with_grad(k, s_t, cfg.dim, self.dp_t, self.d_c);
        self.x.alibi(k, s_t, self.slope, &self.k0, &q0);
        k.mask(
            s_t,
            MaskRule::ColsBelow(io.seq_q.clone()),
            &self.k0,
            &q0,
            inf,
        );
        if let Some(off) = &self.offset {
            let rule = MaskRule::CausalT {
                offset: off.clone(),
            };
            k.mask(s_t, rule, &self.k0, &q0, inf);
        }
        if let Some(st) = &self.start {
            let rule = MaskRule::WindowStartT { offset: st.clone() };
            k.mask(s_t, rule, &self.k0, &q0, inf);
        }
    }

    /// `Pᵀ = exp(logits − lse)` and `dSᵀ = Pᵀ∘(dPᵀ − D)` in place.
    pub fn probs(&self, k: &mut KernelBuilder) {
        let (s, dp) = (self.s_t, self.dp_t);
        self.x
            .probs_and_ds(k, s, dp, self.lse_c, self.d_c, self.capped);
    }

    /// `dVᵀ += dOᵀ·P`, then `dKᵀ += Qᵀ·dS`: P and dS rounded to bf16 and remapped into the
    /// gradient products' operand layout just before their products.
    pub fn grads(&self, k: &mut KernelBuilder) {
        self.grad_v(k);
        self.grad_k(k);
    }

    pub fn grad_v(&self, k: &mut KernelBuilder) {
        k.copy(self.p_b, self.s_t);
        k.transpose(self.p_c, self.p_b);
        k.mma_atb(self.dv_t, self.do_c, self.p_c, self.dv_t);
    }

    pub fn grad_k(&self, k: &mut KernelBuilder) {
        k.copy(self.ds_b, self.dp_t);
        k.transpose(self.ds_c, self.ds_b);
        k.mma_atb(self.dk_t, self.q_c, self.ds_c, self.dk_t);
    }

    /// dK (with its scale) and dV of this wave's keys out.
    pub fn epilogue(&self, k: &mut KernelBuilder) {
        let (x, kr) = (self.x, self.x.cfg.key_rows);
        k.mul(self.dk_t, self.dk_t, x.scale);
        k.transpose(self.dk_r, self.dk_t);
        if let Some(dk) = x.io.dk {
            k.store(x.view(k, dk, &x.hk, self.k0.clone(), kr), self.dk_r);
        }
        k.transpose(self.dv_r, self.dv_t);
        if let Some(dv) = x.io.dv {
            k.store(x.view(k, dv, &x.hk, self.k0.clone(), kr), self.dv_r);
        }
    }
}
