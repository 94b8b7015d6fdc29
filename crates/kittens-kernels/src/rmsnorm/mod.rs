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
//! `y` alone. The layout is the layernorm's (`crate::layernorm`): each wave holds its share of a row in
//! a strip tile, rows longer than `lanes × PER_LANE` are split over waves
//! ([`layernorm::waves_per_row`]), whose partial sums meet through shared memory
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

use crate::layernorm::{strip_cols, waves_per_row, DIMS};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_hw::{Gpu, Target};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};

/// Rows of `D` one wave of the second launch sums (a `DW_ROWS × lanes·8` strip per step).
pub const DW_ROWS: u32 = 4;

/// The environment variable that overrides [`RowLoop`] for a measurement: `blocks=N` and/or
/// `waves_per_row=W`, comma-separated (e.g. `KITTENS_NORM_BWD=blocks=132,waves_per_row=8`).
pub const ROW_LOOP_VAR: &str = "KITTENS_NORM_BWD";

/// How the first launch of a row-wise backward (`rmsnorm_bwd`, `layernorm_bwd`) walks its rows, as
/// Apex's and Liger-Kernel's layernorm backwards do: a grid of at most `blocks` blocks (a few per SM),
/// block `b` visiting the row groups `b, b + grid, b + 2·grid, …` and keeping its share of the
/// `dweight` partial sums in registers across all of them, so the second launch sums only
/// `grid × rows_per_block` partial rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RowLoop {
    /// The most blocks of the first launch.
    pub blocks: u32,
    /// Waves sharing one row, where a measurement overrides [`waves_per_row`]'s choice.
    pub waves_per_row: Option<u32>,
}

impl RowLoop {
    /// As many blocks as fill the target's SMs / CUs once with 16 waves each (the measured best on an
    /// H200 for the layernorm backward at D = 4096: one 512-thread block per SM, against two or four),
    /// so that blocks of `waves` waves get `16 / waves` per SM; 5 on the CPU interpreter (so that a
    /// test's few dozen rows make every block loop, with a partial last round).
    pub fn for_target(target: Target, waves: u32) -> Self {
        Self::for_gpu(target.gpu(), waves)
    }

    /// [`Self::for_target`] for a GPU (`None`: the CPU interpreter).
    pub fn for_gpu(gpu: Option<&Gpu>, waves: u32) -> Self {
        RowLoop {
            blocks: gpu.map_or(5, |g| g.compute_units * (16 / waves.max(1)).max(1)),
            waves_per_row: None,
        }
    }

    /// [`Self::for_target`] with what [`ROW_LOOP_VAR`] sets; an error naming the variable where it
    /// holds anything else.
    pub fn from_env(target: Target, waves: u32) -> Result<Self, KernelError> {
        match std::env::var(ROW_LOOP_VAR) {
            Ok(v) => Self::parse(target, waves, &v),
            Err(_) => Ok(Self::for_target(target, waves)),
        }
    }

    /// [`Self::for_target`] with the settings `v` (the form of [`ROW_LOOP_VAR`]).
    pub fn parse(target: Target, waves: u32, v: &str) -> Result<Self, KernelError> {
        let mut lp = Self::for_target(target, waves);
        let bad = || {
            KernelError::Config(format!(
                "{ROW_LOOP_VAR} = {v:?}: expected blocks=N (N > 0) and/or waves_per_row=W (1, 2, 4, \
                 8, 16 or 32), comma-separated"
            ))
        };
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = item.split_once('=').ok_or_else(bad)?;
            let n: u32 = val.trim().parse().map_err(|_| bad())?;
            match key.trim() {
                "blocks" if n > 0 => lp.blocks = n,
                "waves_per_row" if matches!(n, 1 | 2 | 4 | 8 | 16 | 32) => {
                    lp.waves_per_row = Some(n)
                }
                _ => return Err(bad()),
            }
        }
        Ok(lp)
    }

    /// Row groups each block visits, for `rows` rows and `rpb` rows per block: as few as spread the
    /// groups over at most `blocks` blocks.
    pub fn steps(&self, rows: &Expr, rpb: u32) -> Expr {
        rows.ceil_div(i64::from(rpb) * i64::from(self.blocks))
    }

    /// Blocks of the first launch (at most `blocks`; no block without a row).
    pub fn grid(&self, rows: &Expr, rpb: u32) -> Expr {
        rows.ceil_div(self.steps(rows, rpb) * i64::from(rpb))
    }

    /// Rows of the scratch of partial sums: one per row group of a block.
    pub fn parts(&self, rows: &Expr, rpb: u32) -> Expr {
        self.grid(rows, rpb) * i64::from(rpb)
    }

    /// [`Self::parts`] at a concrete row count (`None` on overflow).
    pub fn parts_at(&self, rows: usize, rpb: u32) -> Option<usize> {
        let rpb = rpb as usize;
        let steps = rows.div_ceil(rpb.checked_mul(self.blocks as usize)?);
        rows.div_ceil(steps.checked_mul(rpb)?.max(1))
            .checked_mul(rpb)
    }

    /// The row that wave-row `local` of this block holds at step `s`.
    pub(crate) fn row(
        &self,
        k: &KernelBuilder,
        rows: &Expr,
        rpb: u32,
        s: &Expr,
        local: &Expr,
    ) -> Expr {
        (s.clone() * self.grid(rows, rpb) + k.block(0)) * i64::from(rpb) + local.clone()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RmsNormConfig {
    /// Row length D (a multiple of 8 in [`DIMS`]).
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
            waves: 4.max(waves_per_row),
            waves_per_row,
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
        let bad = |m: String| Err(KernelError::Config(format!("rmsnorm: {m}")));
        if !DIMS.contains(&self.dim) || !self.dim.is_multiple_of(8) {
            return bad(format!(
                "row length D = {} must be a multiple of 8 from {} to {}",
                self.dim,
                DIMS.start(),
                DIMS.end()
            ));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad(format!("eps = {} must be positive", self.eps));
        }
        if !matches!(self.lanes, 32 | 64) {
            return bad(format!("{} lanes per wave (32 or 64)", self.lanes));
        }
        if self.waves_per_row == 0 || !self.waves.is_multiple_of(self.waves_per_row) {
            return bad(format!(
                "{} waves per row must divide {} waves per block",
                self.waves_per_row, self.waves
            ));
        }
        Ok(())
    }
}

/// A wave's place in a row-wise program: its row within the block, its part of the row, the first
/// column of its strip; and the block's ring of partial sums when rows are split. The layernorm's
/// backward (`crate::layernorm::bwd`) shares it.
pub(crate) struct Frame {
    pub(crate) local: Expr,
    part: Expr,
    pub(crate) col0: Expr,
    cols: u32,
    parts: u32,
    partials: Option<kittens_ir::SharedId>,
}

impl Frame {
    fn new(k: &mut KernelBuilder, cfg: &RmsNormConfig, slots: u32) -> Self {
        let (w_row, rows) = (cfg.waves_per_row, cfg.rows_per_block());
        Self::split(k, w_row, rows, cfg.slice(), slots)
    }

    /// Rows of `cols`-column strips split over `w_row` waves, `rows` rows per block, `slots` ring
    /// slots of partial sums.
    pub(crate) fn split(
        k: &mut KernelBuilder,
        w_row: u32,
        rows: u32,
        cols: u32,
        slots: u32,
    ) -> Self {
        let part = k.wave() % i64::from(w_row);
        let partials =
            (w_row > 1).then(|| k.shared("partials", F32, rows, w_row, Swizzle::None, slots));
        Frame {
            local: k.wave() / i64::from(w_row),
            col0: part.clone() * i64::from(cols),
            part,
            cols,
            parts: w_row,
            partials,
        }
    }

    /// The `1 × cols` strip of row `row` this wave holds, of tensor `g`.
    pub(crate) fn view(
        &self,
        k: &KernelBuilder,
        g: GlobalId,
        row: &Expr,
    ) -> kittens_ir::GlobalView {
        k.gview(g, vec![row.clone(), self.col0.clone()], 0, 1, 1, self.cols)
    }

    /// `v` (this wave's partial sum of its row) becomes the row's total, through ring slot `slot`.
    pub(crate) fn total(&self, k: &mut KernelBuilder, v: RegId, slot: i64) {
        if let Some(buf) = self.partials {
            k.row_sum_across_waves(
                v,
                buf,
                slot,
                self.local.clone(),
                self.part.clone(),
                self.parts,
            );
        }
    }

    /// [`Self::total`] of several values at one barrier, each through its own ring slot.
    pub(crate) fn totals(&self, k: &mut KernelBuilder, vs: &[(RegId, i64)]) {
        if let Some(buf) = self.partials {
            let vs: Vec<(RegId, Expr)> = vs.iter().map(|&(v, s)| (v, Expr::c(s))).collect();
            k.row_sums_across_waves(&vs, buf, self.local.clone(), self.part.clone(), self.parts);
        }
    }

    /// `inv = 1 / √(Σ sq / D + eps)` from this wave's squares `sq` (the block-wide sum in slot 0).
    fn rstd(&self, k: &mut KernelBuilder, inv: RegId, sq: RegId, cfg: &RmsNormConfig) {
        k.row_sum(inv, sq);
        self.total(k, inv, 0);
        k.mul(inv, inv, 1.0 / cfg.dim as f32);
        k.add(inv, inv, cfg.eps);
        k.rsqrt(inv, inv);
    }
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
    let m = matrix(&rows, dim);
    let x = k.global("x", Bf16, &m, Access::Read);
    let res = cfg
        .residual
        .then(|| k.global("residual", Bf16, &m, Access::Read));
    let w = weight(&mut k, &rows, dim);
    let y = k.global("y", Bf16, &m, Access::Write);
    let res_out = cfg
        .residual
        .then(|| k.global("residual_out", Bf16, &m, Access::Write));
    let rpb = i64::from(cfg.rows_per_block());
    k.grid(vec![rows.ceil_div(rpb)], GridOrder::RowMajor);
    let f = Frame::new(&mut k, cfg, 1);
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
    f.rstd(&mut k, inv, sq, cfg);
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
    let m = matrix(&rows, dim);
    let dy = k.global("dy", Bf16, &m, Access::Read);
    let r = k.global("r", Bf16, &m, Access::Read);
    let w = weight(&mut k, &rows, dim);
    let dres = cfg
        .residual
        .then(|| k.global("dresidual_out", Bf16, &m, Access::Read));
    let dx = k.global("dx", Bf16, &m, Access::Write);
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
    let f = Frame::new(&mut k, cfg, 2);

    let [h, g, t, acc] = ["r_hat", "g", "t", "dw"].map(|n| strip(&mut k, n, cfg));
    let d_out = cfg.residual.then(|| strip(&mut k, "dr_out", cfg));
    let wv = k.col_vec("weight", h, Bf16);
    let inv = k.row_vec("rstd", h, F32);
    let dot = k.row_vec("dot", h, F32);
    k.zero(acc);
    k.for_range("step", 0, lp.steps(&rows, rpb), |k, s| {
        // Rows past the end read zero: r̂ = 0 and dy = 0 there, so they add nothing to `dw`.
        let row = lp.row(k, &rows, rpb, &s, &f.local);
        // Every input of the row in one run of loads (all in flight at once).
        k.load_global(h, f.view(k, r, &row));
        k.load_global(g, f.view(k, dy, &row));
        k.load_global(wv, f.view(k, w, &row));
        if let (Some(src), Some(d_out)) = (dres, d_out) {
            k.load_global(d_out, f.view(k, src, &row));
        }
        k.mul(t, h, h);
        f.rstd(k, inv, t, cfg);
        k.mul_row(h, h, inv);
        k.mul(t, g, h);
        k.add(acc, acc, t);
        // dr = rstd · (w·dy − r̂ · mean(w·dy·r̂)); the mean's block-wide sum in slot 1.
        k.mul_col(g, g, wv);
        k.mul(t, g, h);
        k.row_sum(dot, t);
        f.total(k, dot, 1);
        k.mul(dot, dot, 1.0 / dim as f32);
        k.mul_row(t, h, dot);
        k.sub(g, g, t);
        k.mul_row(g, g, inv);
        if let Some(d_out) = d_out {
            k.add(g, g, d_out);
        }
        k.store(f.view(k, dx, &row), g);
    });
    let part_row = k.block(0) * i64::from(rpb) + f.local.clone();
    k.store(f.view(&k, dw, &part_row), acc);
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

/// A kernel summing the rows of transposed partial sums: for each `(scratch, out)` pair,
/// `out[j] = Σ_p scratch[j, p]` (f32 `[dim, parts]` in, bf16 `[dim]` out), `parts` as
/// [`RowLoop::parts`] gives it for blocks of `rows_per_block` rows. Parameter `rows`; tensors
/// the scratches, then the outputs. Each wave sums [`DW_ROWS`] rows of each scratch, `lanes × 8`
/// columns a step.
pub(crate) fn sum_partials(
    name: &str,
    dim: u32,
    lanes: u32,
    rows_per_block: u32,
    lp: &RowLoop,
    pairs: &[(&str, &str)],
) -> Result<Kernel, KernelError> {
    let dim = i64::from(dim);
    let waves = 4;
    let mut k = KernelBuilder::new(name, Schedule::Plain { waves });
    let rows = k.param("rows");
    let parts = lp.parts(&rows, rows_per_block);
    let d = Expr::c(dim);
    let scratch: Vec<GlobalId> = pairs
        .iter()
        .map(|(s, _)| {
            k.global(
                s,
                F32,
                &[("col", d.clone()), ("part", parts.clone())],
                Access::Read,
            )
        })
        .collect();
    let outs: Vec<GlobalId> = pairs
        .iter()
        .map(|(_, o)| {
            k.global(
                o,
                Bf16,
                &[("col", d.clone()), ("one", Expr::c(1))],
                Access::Write,
            )
        })
        .collect();
    let per_block = i64::from(waves * DW_ROWS);
    k.grid(vec![Expr::c(dim).ceil_div(per_block)], GridOrder::RowMajor);
    let step = lanes * 8;
    let t = k.tile(
        "partials",
        F32,
        DW_ROWS,
        step,
        Layout::Row,
        BaseShape::STRIP,
    );
    let acc = k.row_vec("dweight", t, F32);
    let row0 = k.block(0) * per_block + k.wave() * i64::from(DW_ROWS);
    for (&src, &out) in scratch.iter().zip(&outs) {
        k.zero(acc);
        k.for_range("step", 0, parts.ceil_div(i64::from(step)), |k, s| {
            let col = s * i64::from(step);
            k.load_global(
                t,
                k.gview(src, vec![row0.clone(), col], 0, 1, DW_ROWS, step),
            );
            k.row_sum_acc(acc, t, acc);
        });
        k.store(
            k.gview(out, vec![row0.clone(), Expr::c(0)], 0, 1, DW_ROWS, 1),
            acc,
        );
    }
    Ok(k.finish()?)
}
