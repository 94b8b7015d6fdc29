//! The two strip passes around FlashAttention-3's backward on Hopper (FlashAttention-3 §3.3 and its
//! backward's preprocessing and dQ conversion kernels; FlashAttention-2 §3.2 for D), shared by the
//! dense backward (`crate::attn_bwd`'s atomic form) and the packed one (`crate::attn_varlen_bwd`,
//! over the packed rows as one sequence): the key blocks of either with `atomic_dq` add every step's
//! `dS·K` into an f32 accumulator of Q's shape,
//! so that no query-block launch recomputes `S` and `dP`; these two memory-bound programs go before
//! and after them:
//!
//! - [`build_pre`]: `D = rowsum(dO∘O)` per query (f32 products of the bf16 values, f32 sum: what the
//!   query blocks of the two-launch form compute) and the accumulator zeroed;
//! - [`build_dq`]: dQ = the accumulator times `1/√d` (the scale the scores carry), rounded to bf16.
//!
//! Both are strip programs (`BaseShape::STRIP` tiles: plain schedule, any target's strip lowering),
//! `ROWS` queries per wave, `WAVES` waves per block, one query head per block; grid
//! `[batch, heads, ⌈seq_q / (ROWS·WAVES)⌉]`. Rows past `seq_q` read nothing and write nothing.

use super::strides::tensor_strides;
use super::{AttnLayout, Logits};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{
    Access, Axis, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, ReduceOp, Schedule,
};
use kittens_tile::{BaseShape, Layout};

/// What the strip passes are built for: head dimension `dim`, Q-shaped tensors in `layout` (caller
/// strides when `strided`), the logits' scale, and whether the lse's gradient enters D (`dlse`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StripConfig {
    pub dim: u32,
    pub layout: AttnLayout,
    pub strided: bool,
    pub logits: Logits,
    pub dlse: bool,
}

/// Queries per wave: at head dimension 128, 4 × 128 bf16 are two 16-byte chunks per lane.
const ROWS: u32 = 4;
const WAVES: u32 = 4;

/// The shared frame of both passes: the parameters (those of every Hopper launch, so that one
/// argument list serves all three), the grid, and a helper for `ROWS × dim` views of Q-shaped tensors
/// at this wave's queries.
struct Strip {
    k: KernelBuilder,
    batch: Expr,
    heads: Expr,
    seq_q: Expr,
    dim: Expr,
    /// This wave's first query.
    q0: Expr,
}

impl Strip {
    fn new(cfg: &StripConfig, name: &str) -> Result<Self, KernelError> {
        if !matches!(cfg.dim, 32 | 64 | 96 | 128 | 192 | 256) {
            return Err(KernelError::Config(format!(
                "attn_bwd (hopper-atomic): dim {} must be 32, 64, 96, 128, 192 or 256",
                cfg.dim
            )));
        }
        let mut k = KernelBuilder::new(name, Schedule::Plain { waves: WAVES });
        let [batch, heads, _heads_kv, seq_q, _seq_kv] =
            ["batch", "heads", "heads_kv", "seq_q", "seq_kv"].map(|n| k.param(n));
        let per_block = i64::from(ROWS * WAVES);
        k.grid(
            vec![batch.clone(), heads.clone(), seq_q.ceil_div(per_block)],
            GridOrder::RowMajor,
        );
        let q0 = (k.block(2) * i64::from(WAVES) + k.wave()) * i64::from(ROWS);
        Ok(Strip {
            k,
            batch,
            heads,
            seq_q,
            dim: Expr::c(i64::from(cfg.dim)),
            q0,
        })
    }

    /// A tensor of Q's shape in `cfg`'s layout.
    fn tensor(
        &mut self,
        cfg: &StripConfig,
        name: &str,
        dt: kittens_hw::dtype::DType,
        a: Access,
    ) -> GlobalId {
        let dims = [
            ("b", self.batch.clone()),
            ("h", self.heads.clone()),
            ("s", self.seq_q.clone()),
            ("d", self.dim.clone()),
        ];
        // dQ's f32 accumulator is the call's scratch: dense whatever the caller's strides.
        let own = cfg.strided && name != "dq_acc";
        let shape = (&self.heads, &self.seq_q, &self.dim);
        let st = tensor_strides(&mut self.k, own, cfg.layout, name, shape);
        self.k.global_strided(name, dt, &dims, st, a)
    }

    /// This wave's `ROWS × dim` of `g`.
    fn rows(&self, g: GlobalId, cols: u32) -> kittens_ir::GlobalView {
        let origin = vec![
            self.k.block(0),
            self.k.block(1),
            self.q0.clone(),
            Expr::c(0),
        ];
        self.k.gview(g, origin, 2, 3, ROWS, cols)
    }

    fn tile(&mut self, name: &str, dt: kittens_hw::dtype::DType, cols: u32) -> kittens_ir::RegId {
        self.k
            .tile(name, dt, ROWS, cols, Layout::Row, BaseShape::STRIP)
    }
}

/// `o, do` (bf16, read) → `delta` (f32 `[b, h, s_q]`, contiguous) and `dq_acc` (f32, Q's shape and
/// layout, zeroed).
pub(crate) fn build_pre(cfg: &StripConfig) -> Result<Kernel, KernelError> {
    let mut st = Strip::new(
        cfg,
        &format!("attn_bwd_pre_{:?}", cfg.layout).to_lowercase(),
    )?;
    let o = st.tensor(cfg, "o", Bf16, Access::Read);
    let d_o = st.tensor(cfg, "do", Bf16, Access::Read);
    // The lse's gradient (`dlse`) as `[b, h, s_q, d]` with a zero stride along `d`.
    let dlse = cfg.dlse.then(|| {
        let dims = [
            ("b", st.batch.clone()),
            ("h", st.heads.clone()),
            ("s", st.seq_q.clone()),
            ("d", st.dim.clone()),
        ];
        let strides = vec![
            &st.heads * st.seq_q.clone(),
            st.seq_q.clone(),
            Expr::c(1),
            Expr::c(0),
        ];
        st.k.global_strided("dlse", F32, &dims, strides, Access::Read)
    });
    let dims = [
        ("b", st.batch.clone()),
        ("h", st.heads.clone()),
        ("s", st.seq_q.clone()),
    ];
    let strides = vec![&st.heads * st.seq_q.clone(), st.seq_q.clone(), Expr::c(1)];
    let delta =
        st.k.global_strided("delta", F32, &dims, strides, Access::Write);
    let acc = st.tensor(cfg, "dq_acc", F32, Access::Write);
    let d = cfg.dim;
    let (o_t, do_t, prod, zero) = (
        st.tile("o_t", Bf16, d),
        st.tile("do_t", Bf16, d),
        st.tile("prod", F32, d),
        st.tile("zero", F32, d),
    );
    let d_r = st.k.row_vec("d_r", prod, F32);
    let (ov, dov, accv) = (st.rows(o, d), st.rows(d_o, d), st.rows(acc, d));
    let dl = dlse.map(|g| (st.k.row_vec("dl_r", prod, F32), st.rows(g, d)));
    let k = &mut st.k;
    k.load_global(o_t, ov);
    k.load_global(do_t, dov);
    k.mul(prod, o_t, do_t);
    k.row_sum(d_r, prod);
    if let Some((dl_r, view)) = dl {
        // D − dlse: the lse's gradient folded into the preprocessing.
        k.load_global(prod, view);
        k.reduce(Axis::Rows, ReduceOp::Max, dl_r, prod, None);
        k.sub(d_r, d_r, dl_r);
    }
    let origin = vec![k.block(0), k.block(1), st.q0.clone()];
    let dv = k.gview(delta, origin, 2, 1, ROWS, 1);
    k.store(dv, d_r);
    k.zero(zero);
    k.store(accv, zero);
    Ok(st.k.finish()?)
}

/// `dq_acc` (f32, read) → `dq` (bf16, Q's shape and layout) = `dq_acc · scale` (`1/√d` by default).
pub(crate) fn build_dq(cfg: &StripConfig) -> Result<Kernel, KernelError> {
    let mut st = Strip::new(
        cfg,
        &format!("attn_bwd_dq_convert_{:?}", cfg.layout).to_lowercase(),
    )?;
    let acc = st.tensor(cfg, "dq_acc", F32, Access::Read);
    let dq = st.tensor(cfg, "dq", Bf16, Access::Write);
    let d = cfg.dim;
    let t = st.tile("dq_f", F32, d);
    let (src, dst) = (st.rows(acc, d), st.rows(dq, d));
    let k = &mut st.k;
    k.load_global(t, src);
    k.mul(t, t, cfg.logits.scale(d));
    k.store(dst, t);
    Ok(st.k.finish()?)
}
