//! Fused dropout + residual + layernorm, the prenorm Transformer's block entry (HipKittens Fig. 9 and its
//! listing of the same fused kernel):
//!
//! ```text
//! h   = residual + dropout(x)                    (f32; the new residual, stored as bf16)
//! out = (h − mean(h)) / √(var(h) + eps) · weight + bias
//! ```
//!
//! bf16 in and out, f32 statistics over f32 `h`. Dropout keeps an element where its Philox uniform
//! (`kittens_ir::philox`, keyed by `seed` and `offset`, stream index `row·D + col`) is `≥ p` and scales
//! it by `1/(1 − p)`; with `p = 0` the program has no dropout ops at all, so it is exactly residual +
//! layernorm.
//!
//! The tile program is memory-bound: one row is read once and written twice, so each wave holds its
//! share of a row in a strip tile (`BaseShape::STRIP`: 16-byte chunks dealt to lanes) and the statistics
//! are row reductions. Rows up to `lanes × PER_LANE` columns belong to one wave; longer rows are split over
//! `waves_per_row` waves whose partial sums meet in shared memory (one slot per statistic, one barrier
//! each), which keeps a lane's share of a row at `PER_LANE` values up to D = 8192 on NVIDIA.
//!
//! Both outputs are one tensor `out[2, rows, D]`: plane 0 the normalised rows, plane 1 the new residual
//! (one allocation; the caller gets two views).
//!
//! The backward ([`bwd`]) recomputes `h` and the statistics and draws the mask again.

pub mod bwd;
pub mod problem;

use crate::rows::{check_rows, RowStrides};
use crate::KernelError;
// Former paths (before `crate::rows`), for branches written against them; nothing in the tree uses them.
#[doc(hidden)]
pub use crate::rows::{strip_cols, waves_per_row, DIMS, MAX_WAVES_PER_ROW, PER_LANE};
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_hw::Gpu;
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, RegId, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LayerNormConfig {
    /// Row length D (a multiple of 8 in [`crate::rows::DIMS`]).
    pub dim: u32,
    /// Dropout probability in [0, 1); 0 builds no dropout.
    pub p: f32,
    /// Added to the variance.
    pub eps: f32,
    /// Lanes of a wave (32 on NVIDIA, 64 on AMD): a wave's share of a row is a whole number of
    /// `lanes × 8` chunks.
    pub lanes: u32,
    /// Waves per block.
    pub waves: u32,
    /// Waves sharing one row (divides `waves`).
    pub waves_per_row: u32,
    /// The row strides of the `[rows, D]` tensors (by the names [`build`] and [`bwd::build_bwd`]
    /// give them); dense by default.
    pub strides: RowStrides,
    /// The backward only ([`bwd::build_bwd`]): whether it reads the forward's `h` (its second output
    /// plane, which autograd keeps) in place of `x` and `residual`, and at `p = 0` writes only
    /// `dresidual` (`dx` is the same tensor there): four `[rows, D]` tensors moved rather than six,
    /// as `torch.compile`'s backward of the same expression does (docs/performance.md, "layernorm and
    /// rotary").
    pub from_h: bool,
}

impl LayerNormConfig {
    /// The configuration for row length `dim` on waves of `lanes` lanes, split over waves as
    /// [`crate::rows::waves_per_row`] splits it.
    pub fn new(dim: u32, p: f32, lanes: u32) -> Self {
        let waves_per_row = waves_per_row(dim, lanes);
        LayerNormConfig {
            dim,
            p,
            eps: 1e-5,
            lanes,
            waves: crate::rows::block_waves(waves_per_row),
            waves_per_row,
            strides: RowStrides::default(),
            from_h: false,
        }
    }

    /// As configured for `gpu` (its wave width).
    pub fn for_gpu(gpu: &Gpu, dim: u32, p: f32) -> Self {
        Self::new(dim, p, gpu.wave_width)
    }

    /// Columns of one wave's strip: its share of the row rounded up to whole `lanes × 8` chunks.
    pub fn slice(&self) -> u32 {
        strip_cols(self.dim, self.waves_per_row, self.lanes)
    }

    /// Rows one block normalises.
    pub fn rows_per_block(&self) -> u32 {
        self.waves / self.waves_per_row
    }

    pub(crate) fn check(&self) -> Result<(), KernelError> {
        let split = (self.waves, self.waves_per_row);
        check_rows("layernorm", self.dim, self.eps, self.lanes, split)?;
        self.strides.check("layernorm", self.dim)?;
        if !(0.0..1.0).contains(&self.p) {
            return Err(KernelError::Config(format!(
                "layernorm: dropout p = {} must be in [0, 1)",
                self.p
            )));
        }
        Ok(())
    }
}

/// The tensors, in launch order: `x`, `residual`, `weight`, `bias` (bf16 inputs) and `out[2, rows, D]`.
pub fn build(cfg: &LayerNormConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let (dim, c, w_row) = (cfg.dim, cfg.slice(), cfg.waves_per_row);
    let mut k = KernelBuilder::new(
        &format!("layernorm_d{dim}"),
        Schedule::Plain { waves: cfg.waves },
    );
    let rows = k.param("rows");
    let seed = [k.param_word("seed_lo"), k.param_word("seed_hi")];
    let offset = [k.param_word("offset_lo"), k.param_word("offset_hi")];
    let d = Expr::c(i64::from(dim));
    let x = cfg.strides.global(&mut k, "x", &rows, dim, Access::Read);
    let res = cfg
        .strides
        .global(&mut k, "residual", &rows, dim, Access::Read);
    // Weight and bias are one row, read by every row: a zero row stride broadcasts them.
    let along = |k: &mut KernelBuilder, name: &str| {
        k.global_strided(
            name,
            Bf16,
            &[("row", rows.clone()), ("col", d.clone())],
            vec![Expr::c(0), Expr::c(1)],
            Access::Read,
        )
    };
    let weight = along(&mut k, "weight");
    let bias = along(&mut k, "bias");
    let out = k.global(
        "out",
        Bf16,
        &[
            ("plane", Expr::c(2)),
            ("row", rows.clone()),
            ("col", d.clone()),
        ],
        Access::Write,
    );
    let rpb = i64::from(cfg.rows_per_block());
    k.grid(vec![rows.ceil_div(rpb)], GridOrder::RowMajor);

    let row = k.block(0) * rpb + k.wave() / i64::from(w_row);
    let part = k.wave() % i64::from(w_row);
    let col0 = part.clone() * i64::from(c);
    let strip = |k: &mut KernelBuilder, name: &str, dt| {
        k.tile(name, dt, 1, c, Layout::Row, BaseShape::STRIP)
    };
    let xt = strip(&mut k, "x", Bf16);
    let rt = strip(&mut k, "residual", Bf16);
    let h = strip(&mut k, "h", F32);
    let sq = strip(&mut k, "sq", F32);
    let wv = k.col_vec("weight", h, Bf16);
    let bv = k.col_vec("bias", h, Bf16);
    let mean = k.row_vec("mean", h, F32);
    let inv_std = k.row_vec("inv_std", h, F32);
    let view = |k: &KernelBuilder, g, plane: Option<i64>| {
        let mut origin = vec![row.clone(), col0.clone()];
        let mut dims = (0, 1);
        if let Some(p) = plane {
            origin.insert(0, Expr::c(p));
            dims = (1, 2);
        }
        k.gview(g, origin, dims.0, dims.1, 1, c)
    };

    k.load_global(xt, view(&k, x, None));
    k.load_global(rt, view(&k, res, None));
    if cfg.p > 0.0 {
        // keep = (uniform ≥ p) / (1 − p), drawn at stream index row·D + col.
        let keep = strip(&mut k, "keep", F32);
        k.random(
            keep,
            seed,
            offset,
            row.clone() * d.clone() + col0.clone(),
            d.clone(),
        );
        k.ge(keep, keep, cfg.p);
        k.mul(keep, keep, 1.0 / (1.0 - cfg.p));
        k.mul(h, xt, keep);
        k.add(h, h, rt);
    } else {
        k.add(h, xt, rt);
    }
    k.store(view(&k, out, Some(1)), h);

    let partials = (w_row > 1).then(|| {
        k.shared(
            "partials",
            F32,
            cfg.rows_per_block(),
            w_row,
            Swizzle::None,
            2,
        )
    });
    let local = k.wave() / i64::from(w_row);
    let total = |k: &mut KernelBuilder, v: RegId, slot: i64| {
        if let Some(buf) = partials {
            k.row_sum_across_waves(v, buf, slot, local.clone(), part.clone(), w_row);
        }
    };
    let inv_d = 1.0 / dim as f32;
    k.row_sum(mean, h);
    total(&mut k, mean, 0);
    k.mul(mean, mean, inv_d);
    k.sub_row(h, h, mean);
    // Columns past D (the strip rounded up) read zero; after centring they must not count.
    k.mask(
        h,
        MaskRule::ColsBelow(d.clone()),
        row.clone(),
        col0.clone(),
        0.0,
    );
    k.mul(sq, h, h);
    k.row_sum(inv_std, sq);
    total(&mut k, inv_std, 1);
    k.mul(inv_std, inv_std, inv_d);
    k.add(inv_std, inv_std, cfg.eps);
    k.rsqrt(inv_std, inv_std);
    k.mul_row(h, h, inv_std);
    k.load_global(
        wv,
        k.gview(weight, vec![row.clone(), col0.clone()], 0, 1, 1, c),
    );
    k.load_global(
        bv,
        k.gview(bias, vec![row.clone(), col0.clone()], 0, 1, 1, c),
    );
    k.mul_col(h, h, wv);
    k.add_col(h, h, bv);
    k.store(view(&k, out, Some(0)), h);
    Ok(k.finish()?)
}
