//! The backward of the fused dropout + residual + layernorm (`super::build`):
//!
//! ```text
//! h    = residual + keep·x,   keep = [u ≥ p] / (1 − p)   (u: the forward's Philox uniform)
//! x̂    = (h − mean(h)) · rstd,   g = dy · weight
//! dh   = rstd · (g − mean(g) − x̂ · mean(g · x̂)) + dh_out     (dh_out: the new residual's gradient)
//! dresidual = dh,   dx = keep · dh
//! dweight = Σ_rows dy · x̂,   dbias = Σ_rows dy
//! ```
//!
//! Nothing of the forward is stored: `h`, `mean` and `rstd` are recomputed in f32 from `x` and
//! `residual` (the row is in registers anyway), and the dropout mask is drawn again from the same
//! Philox stream (`kittens_ir::philox`, keyed by `seed` and `offset`, index `row·D + col`), as
//! FlashAttention's dropout backward regenerates its mask. The layout and the two launches are
//! rmsnorm's backward's (`crate::rmsnorm`): each wave holds its share of a row in strips, visits
//! [`ROW_STEPS`] rows and writes its f32 partials of `dweight` and `dbias` to transposed scratches
//! (`[D, parts]`), which the second launch ([`build_dweight`]) sums by rows (FlashAttention-2 §3.2's
//! split reduction).

use super::LayerNormConfig;
use crate::rmsnorm::{sum_partials, Frame, ROW_STEPS};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, MaskRule, RegId, Schedule};
use kittens_tile::{BaseShape, Layout};

/// The longest row on 32-lane waves (NVIDIA): past it a lane holds 16 values of each strip, and the
/// five row-long values the backward needs at once (x̂, dy, a product, the two partial sums) do not
/// fit the 128 registers a 512-thread block leaves a thread (NVRTC spilled at D = 5128). Longer rows
/// need the partial sums out of registers (shared memory), which is not done yet.
pub const MAX_DIM_32_LANES: u32 = 4096;

/// Rows of the scratches `dw_partial` and `db_partial` for `rows` rows (one per row group of a block of
/// the first launch).
pub fn parts_at(cfg: &LayerNormConfig, rows: usize) -> Option<usize> {
    let rpb = cfg.rows_per_block() as usize;
    rows.div_ceil(rpb.checked_mul(ROW_STEPS as usize)?)
        .checked_mul(rpb)
}

/// The backward's first launch. Parameters `rows, seed_lo, seed_hi, offset_lo, offset_hi` (the
/// forward's); tensors in launch order: `dy` (the normalised rows' gradient), `dh` (the new
/// residual's), `x`, `residual` (bf16 `[rows, D]`), `weight` (bf16 `[D]`), then the outputs `dx`,
/// `dresidual` (bf16 `[rows, D]`), `dw_partial` and `db_partial` (f32 `[D, parts]`, [`parts_at`]).
pub fn build_bwd(cfg: &LayerNormConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    let dim = cfg.dim;
    let mut k = KernelBuilder::new(
        &format!("layernorm_bwd_d{dim}"),
        Schedule::Plain { waves: cfg.waves },
    );
    let rows = k.param("rows");
    let seed = [k.param_word("seed_lo"), k.param_word("seed_hi")];
    let offset = [k.param_word("offset_lo"), k.param_word("offset_hi")];
    let d = Expr::c(i64::from(dim));
    let m = [("row", rows.clone()), ("col", d.clone())];
    let dy = k.global("dy", Bf16, &m, Access::Read);
    let dh_out = k.global("dh", Bf16, &m, Access::Read);
    let x = k.global("x", Bf16, &m, Access::Read);
    let res = k.global("residual", Bf16, &m, Access::Read);
    // One row read by every row, through a zero row stride.
    let w = k.global_strided(
        "weight",
        Bf16,
        &m,
        vec![Expr::c(0), Expr::c(1)],
        Access::Read,
    );
    let dx = k.global("dx", Bf16, &m, Access::Write);
    let dres = k.global("dresidual", Bf16, &m, Access::Write);
    let rpb = i64::from(cfg.rows_per_block());
    let steps = i64::from(ROW_STEPS);
    let parts = rows.ceil_div(rpb * steps) * rpb;
    let scratch = |k: &mut KernelBuilder, name: &str| {
        k.global_strided(
            name,
            F32,
            &[("part", parts.clone()), ("col", d.clone())],
            vec![Expr::c(1), parts.clone()],
            Access::Write,
        )
    };
    let dw = scratch(&mut k, "dw_partial");
    let db = scratch(&mut k, "db_partial");
    k.grid(vec![rows.ceil_div(rpb * steps)], GridOrder::RowMajor);
    let f = Frame::split(
        &mut k,
        cfg.waves_per_row,
        cfg.rows_per_block(),
        cfg.slice(),
        4,
    );

    let strip = |k: &mut KernelBuilder, n: &str| {
        k.tile(n, F32, 1, cfg.slice(), Layout::Row, BaseShape::STRIP)
    };
    // Four strips, as rmsnorm's backward holds: at 16 values per lane (D > 4096 on NVIDIA) a fifth
    // and sixth (a temporary, the mask) made NVRTC spill. So the mask is drawn twice rather than
    // held, `dy` is read twice (the second time from cache), and the sums reuse the strips.
    let [h, g, acc_w, acc_b] = ["x_hat", "g", "dw", "db"].map(|n| strip(&mut k, n));
    let wv = k.col_vec("weight", h, Bf16);
    let [mean, inv, c1, c2] = ["mean", "rstd", "mean_g", "mean_gx"].map(|n| k.row_vec(n, h, F32));
    let inv_d = 1.0 / dim as f32;
    // keep = [uniform ≥ p] / (1 − p), the forward's draw at stream index row·D + col.
    let draw_keep = |k: &mut KernelBuilder, dst: RegId, row: &Expr| {
        let at = row.clone() * d.clone() + f.col0.clone();
        k.random(dst, seed.clone(), offset.clone(), at, d.clone());
        k.ge(dst, dst, cfg.p);
        k.mul(dst, dst, 1.0 / (1.0 - cfg.p));
    };
    let dropout = cfg.p > 0.0;
    k.zero(acc_w);
    k.zero(acc_b);
    k.for_range("step", 0, steps, |k, s| {
        // Rows past the end read zero: dy = 0 there, so they add nothing to the partials.
        let row = (k.block(0) * steps + s) * rpb + f.local.clone();
        // h = residual + keep·x, the forward's sum.
        k.load_global(h, f.view(k, x, &row));
        if dropout {
            draw_keep(k, g, &row);
            k.mul(h, h, g);
        }
        k.load_global(g, f.view(k, res, &row));
        k.add(h, h, g);
        // x̂ = (h − mean) · rstd; columns past D (the strip rounded up) must not count once centred.
        k.row_sum(mean, h);
        f.total(k, mean, 0);
        k.mul(mean, mean, inv_d);
        k.sub_row(h, h, mean);
        k.mask(
            h,
            MaskRule::ColsBelow(d.clone()),
            row.clone(),
            f.col0.clone(),
            0.0,
        );
        k.mul(g, h, h);
        k.row_sum(inv, g);
        f.total(k, inv, 1);
        k.mul(inv, inv, inv_d);
        k.add(inv, inv, cfg.eps);
        k.rsqrt(inv, inv);
        k.mul_row(h, h, inv);
        // The partials of dbias and dweight, and mean(g·x̂) = mean(w · dy·x̂). The weight is read
        // again for every row (from L2), as rmsnorm's backward does, rather than held across the loop.
        k.load_global(g, f.view(k, dy, &row));
        k.add(acc_b, acc_b, g);
        k.mul(g, g, h);
        k.add(acc_w, acc_w, g);
        k.load_global(wv, f.view(k, w, &row));
        k.mul_col(g, g, wv);
        k.row_sum(c2, g);
        f.total(k, c2, 2);
        k.mul(c2, c2, inv_d);
        // g = dy · w and its mean.
        k.load_global(g, f.view(k, dy, &row));
        k.mul_col(g, g, wv);
        k.row_sum(c1, g);
        f.total(k, c1, 3);
        k.mul(c1, c1, inv_d);
        // dh = rstd · (g − mean(g) − x̂ · mean(g·x̂)) + dh_out.
        k.sub_row(g, g, c1);
        k.mul_row(h, h, c2);
        k.sub(g, g, h);
        k.mul_row(g, g, inv);
        k.load_global(h, f.view(k, dh_out, &row));
        k.add(g, g, h);
        k.store(f.view(k, dres, &row), g);
        if dropout {
            draw_keep(k, h, &row);
            k.mul(g, g, h);
        }
        k.store(f.view(k, dx, &row), g);
    });
    let part_row = k.block(0) * rpb + f.local.clone();
    k.store(f.view(&k, dw, &part_row), acc_w);
    k.store(f.view(&k, db, &part_row), acc_b);
    Ok(k.finish()?)
}

/// The backward's second launch: `dweight[j] = Σ_p dw_partial[j, p]` and `dbias[j] = Σ_p
/// db_partial[j, p]`. Parameter `rows` (the first launch's); tensors `dw_partial`, `db_partial` (f32
/// `[D, parts]`) and the outputs `dweight`, `dbias` (bf16 `[D]`).
pub fn build_dweight(cfg: &LayerNormConfig) -> Result<Kernel, KernelError> {
    check(cfg)?;
    sum_partials(
        &format!("layernorm_dweight_d{}", cfg.dim),
        cfg.dim,
        cfg.lanes,
        cfg.rows_per_block(),
        &[("dw_partial", "dweight"), ("db_partial", "dbias")],
    )
}

/// The forward's checks and [`MAX_DIM_32_LANES`].
pub(crate) fn check(cfg: &LayerNormConfig) -> Result<(), KernelError> {
    cfg.check()?;
    if cfg.lanes == 32 && cfg.dim > MAX_DIM_32_LANES {
        return Err(KernelError::Config(format!(
            "layernorm_bwd: row length D = {} is over {MAX_DIM_32_LANES} on 32-lane waves (sm_90a; \
             AMD's 64-lane waves take up to 8192)",
            cfg.dim
        )));
    }
    Ok(())
}
