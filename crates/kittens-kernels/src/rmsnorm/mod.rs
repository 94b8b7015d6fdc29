//! Fused residual add + RMSNorm (Zhang & Sennrich 2019, the norm of Llama-family models), forward and
//! backward:
//!
//! ```text
//! r    = x + residual                          (the new residual, stored as bf16)
//! rstd = 1 / √(mean(r²) + eps),   r̂ = r · rstd
//! y    = r̂ · weight
//!
//! dr      = rstd · (w·dy − r̂ · mean(w·dy·r̂)) + dr_out      (dr_out: the gradient of the new residual)
//! dweight = Σ_rows dy · r̂
//! ```
//!
//! bf16 in and out, f32 inside. Without a residual the program reads `x` alone (`r = x`) and writes
//! `y` alone. The layout is the row-wise kernels' ([`crate::rows`]): each wave holds its share of a row in
//! a strip tile, rows longer than `lanes × PER_LANE` are split over waves
//! ([`crate::rows::waves_per_row`]), whose partial sums meet through shared memory
//! (`KernelBuilder::row_sum_across_waves`).
//!
//! The backward recomputes `rstd` from `r`: the row is in registers anyway, so it costs one row sum
//! and no memory traffic, and the forward writes no statistics. `dweight` sums over every row, across
//! blocks, in two launches (as FlashAttention-2's backward splits its reduction, §3.2): the first
//! ([`build_bwd`]) has each wave accumulate `dy · r̂` over every row it visits (a grid of a few blocks
//! per SM looping over the rows, [`RowLoop`]) and write its f32 partial to a scratch tensor
//! `dw_partial`, stored transposed (`[D, parts]`); the second
//! ([`build_dweight`]) sums each row of the transposed scratch (a row reduction, which the strip
//! lowering has) and rounds it to bf16.

pub mod problem;

use crate::rows::{check_rows, strip_cols, sum_partials, waves_per_row, Frame, RowStrides};
use crate::rows::{Partials, RowLoop, Staged};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_hw::Gpu;
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Schedule};
use kittens_tile::{BaseShape, Layout};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RmsNormConfig {
    /// Row length D (a multiple of 8 in [`crate::rows::DIMS`]).
    pub dim: u32,
    /// Added to the mean square.
    pub eps: f32,
    /// `x + residual` is normalised and written out; `false`: `x` alone.
    pub residual: bool,
    /// Lanes of a wave (32 on NVIDIA, 64 on AMD).
    pub lanes: u32,
    /// Waves per block.
    pub waves: u32,
    /// Waves sharing one row (divides `waves`).
    pub waves_per_row: u32,
    /// The row strides of the `[rows, D]` tensors (by the names [`build`] and [`build_bwd`] give
    /// them); dense by default.
    pub strides: RowStrides,
}

impl RmsNormConfig {
    /// Row length `dim` on waves of `lanes` lanes, split as the layernorm splits its rows.
    pub fn new(dim: u32, residual: bool, lanes: u32) -> Self {
        let waves_per_row = waves_per_row(dim, lanes);
        RmsNormConfig {
            dim,
            eps: 1e-6,
            residual,
            lanes,
            waves: crate::rows::block_waves(waves_per_row),
            waves_per_row,
            strides: RowStrides::default(),
        }
    }

    /// As configured for `gpu` (its wave width).
    pub fn for_gpu(gpu: &Gpu, dim: u32, residual: bool) -> Self {
        Self::new(dim, residual, gpu.wave_width)
    }

    /// Columns of one wave's strip.
    pub fn slice(&self) -> u32 {
        strip_cols(self.dim, self.waves_per_row, self.lanes)
    }

    /// Rows one block holds at a time.
    pub fn rows_per_block(&self) -> u32 {
        self.waves / self.waves_per_row
    }

    pub(crate) fn check(&self) -> Result<(), KernelError> {
        let split = (self.waves, self.waves_per_row);
        check_rows("rmsnorm", self.dim, self.eps, self.lanes, split)?;
        self.strides.check("rmsnorm", self.dim)
    }

    /// This wave's [`Frame`], with `slots` ring slots of partial sums.
    fn frame(&self, k: &mut KernelBuilder, slots: u32) -> Frame {
        let (w_row, rows) = (self.waves_per_row, self.rows_per_block());
        Frame::split(k, w_row, rows, self.slice(), slots)
    }
}

/// `inv = 1 / √(Σ sq / D + eps)` from this wave's squares `sq` (the block-wide sum in slot 0).
fn rstd(f: &Frame, k: &mut KernelBuilder, inv: RegId, sq: RegId, cfg: &RmsNormConfig) {
    k.row_sum(inv, sq);
    f.total(k, inv, 0);
    k.mul(inv, inv, 1.0 / cfg.dim as f32);
    k.add(inv, inv, cfg.eps);
    k.rsqrt(inv, inv);
}

/// The `[rows, D]` bf16 tensor `name` in its row stride.
fn tensor(
    k: &mut KernelBuilder,
    cfg: &RmsNormConfig,
    name: &str,
    rows: &Expr,
    access: Access,
) -> GlobalId {
    cfg.strides.global(k, name, rows, cfg.dim, access)
}

fn matrix(rows: &Expr, dim: u32) -> [(&'static str, Expr); 2] {
    [("row", rows.clone()), ("col", Expr::c(i64::from(dim)))]
}

/// `weight` (`[D]`): one row read by every row, through a zero row stride.
fn weight(k: &mut KernelBuilder, rows: &Expr, dim: u32) -> GlobalId {
    k.global_strided(
        "weight",
        Bf16,
        &matrix(rows, dim),
        vec![Expr::c(0), Expr::c(1)],
        Access::Read,
    )
}

fn strip(k: &mut KernelBuilder, name: &str, cfg: &RmsNormConfig) -> RegId {
    k.tile(name, F32, 1, cfg.slice(), Layout::Row, BaseShape::STRIP)
}

/// The forward. Parameter `rows`; tensors in launch order: `x`, `residual` (with a residual; bf16
/// `[rows, D]`), `weight` (bf16 `[D]`), then the outputs `y` and `residual_out` (with a residual; bf16
/// `[rows, D]`).
pub fn build(cfg: &RmsNormConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let dim = cfg.dim;
    let mut k = KernelBuilder::new(
        &format!("rmsnorm_d{dim}"),
        Schedule::Plain { waves: cfg.waves },
    );
    let rows = k.param("rows");
    let x = tensor(&mut k, cfg, "x", &rows, Access::Read);
    let res = cfg
        .residual
        .then(|| tensor(&mut k, cfg, "residual", &rows, Access::Read));
    let w = weight(&mut k, &rows, dim);
    let y = tensor(&mut k, cfg, "y", &rows, Access::Write);
    let res_out = cfg
        .residual
        .then(|| tensor(&mut k, cfg, "residual_out", &rows, Access::Write));
    let rpb = i64::from(cfg.rows_per_block());
    k.grid(vec![rows.ceil_div(rpb)], GridOrder::RowMajor);
    let f = cfg.frame(&mut k, 1);
    let row = k.block(0) * rpb + f.local.clone();

    let h = strip(&mut k, "h", cfg);
    let sq = strip(&mut k, "sq", cfg);
    let wv = k.col_vec("weight", h, Bf16);
    let inv = k.row_vec("rstd", h, F32);
    k.load_global(h, f.view(&k, x, &row));
    if let (Some(res), Some(out)) = (res, res_out) {
        k.load_global(sq, f.view(&k, res, &row));
        k.add(h, h, sq);
        k.store(f.view(&k, out, &row), h);
    }
    // Columns past D (the strip rounded up) read zero and add nothing to the squares.
    k.mul(sq, h, h);
    rstd(&f, &mut k, inv, sq, cfg);
    k.mul_row(h, h, inv);
    k.load_global(wv, f.view(&k, w, &row));
    k.mul_col(h, h, wv);
    k.store(f.view(&k, y, &row), h);
    Ok(k.finish()?)
}

/// The backward's first launch. Parameter `rows`; tensors in launch order: `dy`, `r` (the forward's
/// `residual_out`, or `x` without a residual), `weight`, `dresidual_out` (with a residual: the
/// gradient reaching the new residual), then the outputs `dx` (bf16 `[rows, D]`: the gradient of `x`
/// and of `residual` alike) and `dw_partial` (f32, [`RowLoop::parts`] rows of `D`, stored transposed
/// for [`build_dweight`]). The rows are walked as `lp` says.
pub fn build_bwd(cfg: &RmsNormConfig, lp: &RowLoop) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let dim = cfg.dim;
    let mut k = KernelBuilder::new(
        &format!("rmsnorm_bwd_d{dim}"),
        Schedule::Plain { waves: cfg.waves },
    );
    let rows = k.param("rows");
    let dy = tensor(&mut k, cfg, "dy", &rows, Access::Read);
    let r = tensor(&mut k, cfg, "r", &rows, Access::Read);
    let w = weight(&mut k, &rows, dim);
    let dres = cfg
        .residual
        .then(|| tensor(&mut k, cfg, "dresidual_out", &rows, Access::Read));
    let dx = tensor(&mut k, cfg, "dx", &rows, Access::Write);
    let rpb = cfg.rows_per_block();
    let parts = lp.parts(&rows, rpb);
    let dw = k.global_strided(
        "dw_partial",
        F32,
        &[("part", parts.clone()), ("col", Expr::c(i64::from(dim)))],
        vec![Expr::c(1), parts],
        Access::Write,
    );
    k.grid(vec![lp.grid(&rows, rpb)], GridOrder::RowMajor);
    k.resident_blocks(lp.resident);
    if lp.index32 {
        k.index32();
    }
    let f = cfg.frame(&mut k, if lp.one_sum { 4 } else { 2 });

    let [h, g, t] = ["r_hat", "g", "t"].map(|n| strip(&mut k, n, cfg));
    let shared_acc = lp.acc_in_shared(cfg.waves * cfg.slice() * 4);
    let acc = Partials::new(&mut k, "dw", (1, cfg.slice()), cfg.waves, shared_acc);
    let raw = |k: &mut KernelBuilder, n: &str| {
        k.tile(n, Bf16, 1, cfg.slice(), Layout::Row, BaseShape::STRIP)
    };
    // With `lp.prefetch` (`RowLoop::ahead`): r (level 1) or every input (level 2) of the next row
    // loaded into raw bf16 words while this row is worked on; dresidual_out stays bf16 (read as f32
    // where used).
    let ahead = lp.ahead(cfg.slice(), cfg.lanes);
    let d_out = cfg.residual.then(|| {
        if ahead > 0 {
            raw(&mut k, "dr_out")
        } else {
            strip(&mut k, "dr_out", cfg)
        }
    });
    // (destination this step, source tensor) of each input; the first `n_ahead` through `next`.
    let mut inputs = vec![(h, r), (g, dy)];
    if let (Some(t), Some(src)) = (d_out, dres) {
        inputs.push((t, src));
    }
    let n_ahead = match ahead {
        0 => 0,
        1 => 1,
        _ => inputs.len(),
    };
    let next: Vec<RegId> = ["next_r", "next_dy", "next_dr_out"][..n_ahead]
        .iter()
        .map(|n| raw(&mut k, n))
        .collect();
    let wv = k.col_vec("weight", h, Bf16);
    let inv = k.row_vec("rstd", h, F32);
    let dot = k.row_vec("dot", h, F32);
    // With `lp.stage` (`RowLoop::stage`): every input of the rows `depth` steps ahead copied into
    // shared memory asynchronously, the weight loaded once.
    let strip_of = (cfg.slice(), cfg.waves);
    let depth = lp.stage_depth(Staged::bytes(inputs.len() as u32, strip_of, 1));
    let strip_of = (cfg.slice(), cfg.waves, cfg.slice());
    let staged = (depth > 0).then(|| {
        let names = ["r", "dy", "dr_out"];
        let srcs: Vec<(&str, GlobalId)> = names
            .iter()
            .zip(&inputs)
            .map(|(&n, &(_, g))| (n, g))
            .collect();
        Staged::new(&mut k, &srcs, strip_of, depth)
    });
    let dsts: Vec<RegId> = inputs.iter().map(|&(t, _)| t).collect();
    acc.zero(&mut k);
    if let Some(st) = &staged {
        st.prologue(&mut k, &f, lp, (&rows, rpb));
        let row0 = lp.row(&k, &rows, rpb, &Expr::c(0), &f.local);
        k.load_global(wv, f.view(&k, w, &row0));
    }
    if n_ahead > 0 {
        // The weight is every row's: loaded once.
        let row0 = lp.row(&k, &rows, rpb, &Expr::c(0), &f.local);
        for (&t, &(_, src)) in next.iter().zip(&inputs) {
            k.load_global(t, f.view(&k, src, &row0));
        }
        k.load_global(wv, f.view(&k, w, &row0));
    }
    k.for_range("step", 0, lp.steps(&rows, rpb), |k, s| {
        // Rows past the end read zero: r̂ = 0 and dy = 0 there, so they add nothing to `dw`.
        let row = lp.row(k, &rows, rpb, &s, &f.local);
        // Every input of the row in one run of loads (all in flight at once), or some of them from
        // the previous step.
        for (&n, &(t, _)) in next.iter().zip(&inputs) {
            k.copy(t, n);
        }
        if let Some(st) = &staged {
            st.take(k, &f, lp, (&rows, rpb), &s, &dsts);
        } else {
            for &(t, src) in &inputs[n_ahead..] {
                k.load_global(t, f.view(k, src, &row));
            }
        }
        if n_ahead > 0 {
            let after = lp.row(k, &rows, rpb, &(s.clone() + 1), &f.local);
            for (&t, &(_, src)) in next.iter().zip(&inputs) {
                k.load_global(t, f.view(k, src, &after));
            }
        } else if staged.is_none() {
            k.load_global(wv, f.view(k, w, &row));
        }
        k.mul(t, h, h);
        if lp.one_sum {
            // Σ r² and Σ (w·dy)·r at one barrier (`RowLoop::one_sum`), in slots 0-1 or 2-3 by the
            // row's parity: mean(w·dy·r̂) = rstd · mean(w·dy·r).
            k.row_sum(inv, t);
            k.mul_col(t, g, wv);
            k.mul(t, t, h);
            k.row_sum(dot, t);
            let base = (s.clone() % 2) * 2;
            f.totals_at(k, &[(inv, base.clone()), (dot, base + 1)]);
            k.mul(inv, inv, 1.0 / dim as f32);
            k.add(inv, inv, cfg.eps);
            k.rsqrt(inv, inv);
            k.mul(dot, dot, inv);
            k.mul(dot, dot, 1.0 / dim as f32);
            k.mul_row(h, h, inv);
            k.mul(t, g, h);
            acc.add(k, 0, t);
            k.mul_col(g, g, wv);
        } else {
            rstd(&f, k, inv, t, cfg);
            k.mul_row(h, h, inv);
            k.mul(t, g, h);
            acc.add(k, 0, t);
            // dr = rstd · (w·dy − r̂ · mean(w·dy·r̂)); the mean's block-wide sum in slot 1.
            k.mul_col(g, g, wv);
            k.mul(t, g, h);
            k.row_sum(dot, t);
            f.total(k, dot, 1);
            k.mul(dot, dot, 1.0 / dim as f32);
        }
        k.mul_row(t, h, dot);
        k.sub(g, g, t);
        k.mul_row(g, g, inv);
        if let Some(d_out) = d_out {
            k.add(g, g, d_out);
        }
        k.store(f.view(k, dx, &row), g);
    });
    if let Some(st) = &staged {
        st.drain(&mut k);
    }
    let part_row = k.block(0) * i64::from(rpb) + f.local.clone();
    let out = f.view(&k, dw, &part_row);
    acc.store(&mut k, 0, out);
    Ok(k.finish()?)
}

/// The backward's second launch: `dweight[j] = Σ_p dw_partial[j, p]`. Parameter `rows` (the first
/// launch's: the scratch's width follows from it); tensors `dw_partial` (f32 `[D, parts]`) and the
/// output `dweight` (bf16 `[D]`).
pub fn build_dweight(cfg: &RmsNormConfig, lp: &RowLoop) -> Result<Kernel, KernelError> {
    cfg.check()?;
    sum_partials(
        &format!("rmsnorm_dweight_d{}", cfg.dim),
        cfg.dim,
        cfg.lanes,
        cfg.rows_per_block(),
        lp,
        &[("dw_partial", "dweight")],
    )
}
