//! SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; the MLP of Llama-family models), forward
//! and backward, elementwise over `[rows, F]`:
//!
//! ```text
//! out   = silu(gate) · up                              silu(g) = g · σ(g),  σ(g) = 1 / (1 + e^(−g))
//! dup   = dy · silu(gate)
//! dgate = dy · up · silu'(gate)                        silu'(g) = σ(g) · (1 + g − silu(g))
//! ```
//!
//! bf16 in and out, f32 inside. Gate and up are two `[rows, F]` tensors, or (`packed`) the two halves
//! of one `[rows, 2F]` tensor, gate first, as a fused gate-and-up projection writes them; the packed
//! backward writes its two gradients into the halves of one `[rows, 2F]` `dx`. The two forms are one
//! program: only the tensors the views read differ.
//!
//! Memory-bound with no reduction: each wave moves a `1 × lanes·8` strip of one row (one 16-byte
//! chunk of each tensor per lane, as the layernorm measured best), [`SwigluConfig::waves`] strips
//! side by side per block.

pub mod problem;

use crate::rows::RowStrides;
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_hw::Gpu;
use kittens_ir::{Access, Expr, GlobalId, GlobalView, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

/// Widths F the kernel takes (a multiple of 8: whole 16-byte chunks, and the packed halves aligned).
pub const WIDTHS: std::ops::RangeInclusive<u32> = 8..=131_072;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SwigluConfig {
    /// Width F of gate, up and the output.
    pub f: u32,
    /// Gate and up (and, backward, their gradients) as the halves of one `[rows, 2F]` tensor.
    pub packed: bool,
    /// Lanes of a wave (32 on NVIDIA, 64 on AMD): a wave's strip is `lanes × 8` columns.
    pub lanes: u32,
    /// Waves per block, side by side along a row.
    pub waves: u32,
    /// 16-byte chunks of each tensor per lane: a wave's strip is `lanes × 8 × chunks` columns, its
    /// loads all in flight at once.
    pub chunks: u32,
    /// The row strides of the inputs (`gate`, `up`, `dy` of `F`; packed `x` of `2F`), read in place;
    /// dense by default.
    pub strides: RowStrides,
    /// 32-bit offsets (`kittens_ir::Grid::index32`, refused at launch past its span): the strip
    /// lowering's per-chunk address arithmetic in `int` instead of `long long` on sm_90a, where a
    /// chunk's few arithmetic instructions are a large share of this memory-bound kernel's.
    pub index32: bool,
}

/// The environment variable that overrides the block shape for a measurement: `waves=N` (1 to 16)
/// `chunks=C` (1, 2 or 4) and/or `index32=0|1` ([`SwigluConfig::index32`]; `1` only where the
/// problem's span allows it: the launch refuses it past), comma-separated (e.g.
/// `KITTENS_SWIGLU=waves=8,chunks=2`).
pub const TUNE_VAR: &str = "KITTENS_SWIGLU";

impl SwigluConfig {
    pub fn new(f: u32, packed: bool, lanes: u32) -> Self {
        SwigluConfig {
            f,
            packed,
            lanes,
            waves: 4,
            chunks: 1,
            strides: RowStrides::default(),
            index32: false,
        }
    }

    /// This configuration with the settings `v` (the form of [`TUNE_VAR`]).
    pub fn tuned(mut self, v: &str) -> Result<Self, KernelError> {
        let bad = || {
            KernelError::Config(format!(
                "{TUNE_VAR} = {v:?}: expected waves=N (1 to 16), chunks=C (1, 2 or 4) and/or \
                 index32=0|1, comma-separated"
            ))
        };
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = item.split_once('=').ok_or_else(bad)?;
            let n: u32 = val.trim().parse().map_err(|_| bad())?;
            match key.trim() {
                "waves" if (1..=16).contains(&n) => self.waves = n,
                "chunks" if matches!(n, 1 | 2 | 4) => self.chunks = n,
                "index32" if n <= 1 => self.index32 = n == 1,
                _ => return Err(bad()),
            }
        }
        Ok(self)
    }

    /// As configured for `gpu` (its wave width).
    pub fn for_gpu(gpu: &Gpu, f: u32, packed: bool) -> Self {
        Self::new(f, packed, gpu.wave_width)
    }

    /// Columns of one wave's strip.
    pub fn strip(&self) -> u32 {
        self.lanes * 8 * self.chunks
    }

    fn check(&self) -> Result<(), KernelError> {
        let bad = |m: String| Err(KernelError::Config(format!("swiglu: {m}")));
        if !WIDTHS.contains(&self.f) || !self.f.is_multiple_of(8) {
            return bad(format!(
                "width F = {} must be a multiple of 8 from {} to {}",
                self.f,
                WIDTHS.start(),
                WIDTHS.end()
            ));
        }
        if !matches!(self.lanes, 32 | 64) {
            return bad(format!("{} lanes per wave (32 or 64)", self.lanes));
        }
        if self.waves == 0 || self.chunks == 0 {
            return bad("waves per block and chunks per lane must be positive".into());
        }
        let f = self.f;
        self.strides
            .check_rows_of("swiglu", |t| if t == "x" { 2 * f } else { f })
    }
}

/// The pair of tensors a program reads or writes as gate and up: two `[rows, F]` tensors, or the halves
/// of one `[rows, 2F]`.
enum Pair {
    Split(GlobalId, GlobalId),
    Packed(GlobalId),
}

/// Declarations and the wave's place shared by both directions.
struct Frame {
    rows: Expr,
    f: u32,
    packed: bool,
    strides: RowStrides,
    row: Expr,
    col0: Expr,
    cols: u32,
}

impl Frame {
    /// The program, its parameter `rows` and the grid: one block per `waves` strips of a row.
    fn new(name: &str, cfg: &SwigluConfig) -> Result<(KernelBuilder, Frame), KernelError> {
        cfg.check()?;
        let kind = if cfg.packed { "packed" } else { "split" };
        let mut k = KernelBuilder::new(
            &format!("{name}_{kind}_f{}", cfg.f),
            Schedule::Plain { waves: cfg.waves },
        );
        if cfg.index32 {
            k.index32();
        }
        let rows = k.param("rows");
        let per_block = i64::from(cfg.waves * cfg.strip());
        let across = Expr::c(i64::from(cfg.f)).ceil_div(per_block);
        k.grid(vec![rows.clone() * across.clone()], GridOrder::RowMajor);
        let row = k.block(0) / across.clone();
        let col0 = (k.block(0) % across) * per_block + k.wave() * i64::from(cfg.strip());
        let frame = Frame {
            rows,
            f: cfg.f,
            packed: cfg.packed,
            strides: cfg.strides,
            row,
            col0,
            cols: cfg.strip(),
        };
        Ok((k, frame))
    }

    fn matrix(&self, cols: u32) -> [(&'static str, Expr); 2] {
        [
            ("row", self.rows.clone()),
            ("col", Expr::c(i64::from(cols))),
        ]
    }

    /// One `[rows, F]` tensor, in its row stride.
    fn single(&self, k: &mut KernelBuilder, name: &str, access: Access) -> GlobalId {
        self.strides.global(k, name, &self.rows, self.f, access)
    }

    /// Gate and up (`names`: the two tensors' names, then the packed tensor's). The packed tensor is
    /// declared `[rows, 2, F]` (strides `S, F, 1`, `S` its row stride, `2F` dense: the same memory as
    /// `[rows, 2F]`), so that each half is bounded on its own and a strip past column F reads zero, not
    /// the other half.
    fn pair(&self, k: &mut KernelBuilder, names: [&str; 3], access: Access) -> Pair {
        if self.packed {
            let [row, col] = self.matrix(self.f);
            let f = i64::from(self.f);
            let s = self.strides.of(names[2], 2 * self.f as usize) as i64;
            let dims = [row, ("half", Expr::c(2)), col];
            let st = vec![Expr::c(s), Expr::c(f), Expr::c(1)];
            Pair::Packed(k.global_strided(names[2], Bf16, &dims, st, access))
        } else {
            Pair::Split(
                self.single(k, names[0], access),
                self.single(k, names[1], access),
            )
        }
    }

    /// This wave's strip of a `[rows, F]` tensor.
    fn at(&self, k: &KernelBuilder, g: GlobalId) -> GlobalView {
        k.gview(
            g,
            vec![self.row.clone(), self.col0.clone()],
            0,
            1,
            1,
            self.cols,
        )
    }

    /// Gate's and up's strips.
    fn halves(&self, k: &KernelBuilder, p: &Pair) -> [GlobalView; 2] {
        match *p {
            Pair::Split(g, u) => [self.at(k, g), self.at(k, u)],
            Pair::Packed(x) => [0, 1].map(|h| {
                let origin = vec![self.row.clone(), Expr::c(h), self.col0.clone()];
                k.gview(x, origin, 0, 2, 1, self.cols)
            }),
        }
    }
}

/// The forward. Parameter `rows`; tensors in launch order: `gate`, `up` (bf16 `[rows, F]`) or, packed,
/// `x` (bf16 `[rows, 2F]`); then the output `out` (bf16 `[rows, F]`).
pub fn build(cfg: &SwigluConfig) -> Result<Kernel, KernelError> {
    let (mut k, f) = Frame::new("swiglu", cfg)?;
    let inputs = f.pair(&mut k, ["gate", "up", "x"], Access::Read);
    let out = f.single(&mut k, "out", Access::Write);
    let strip = |k: &mut KernelBuilder, name: &str| {
        k.tile(name, F32, 1, f.cols, Layout::Row, BaseShape::STRIP)
    };
    let [g, u] = ["gate", "up"].map(|n| strip(&mut k, n));
    let [gv, uv] = f.halves(&k, &inputs);
    k.load_global(g, gv);
    k.load_global(u, uv);
    k.silu(g, g);
    k.mul(g, g, u);
    k.store(f.at(&k, out), g);
    Ok(k.finish()?)
}

/// The backward. Parameter `rows`; tensors in launch order: `dy` (bf16 `[rows, F]`), `gate`, `up` (or,
/// packed, `x`); then the outputs `dgate`, `dup` (bf16 `[rows, F]`) or, packed, `dx` (bf16
/// `[rows, 2F]`, gate's gradient first).
pub fn build_bwd(cfg: &SwigluConfig) -> Result<Kernel, KernelError> {
    let (mut k, f) = Frame::new("swiglu_bwd", cfg)?;
    let dy = f.single(&mut k, "dy", Access::Read);
    let inputs = f.pair(&mut k, ["gate", "up", "x"], Access::Read);
    let grads = f.pair(&mut k, ["dgate", "dup", "dx"], Access::Write);
    let strip = |k: &mut KernelBuilder, name: &str| {
        k.tile(name, F32, 1, f.cols, Layout::Row, BaseShape::STRIP)
    };
    let [g, u, d, s, t] = ["gate", "up", "dy", "sigmoid", "silu"].map(|n| strip(&mut k, n));
    let [gv, uv] = f.halves(&k, &inputs);
    k.load_global(g, gv);
    k.load_global(u, uv);
    k.load_global(d, f.at(&k, dy));
    k.sigmoid(s, g);
    k.mul(t, g, s);
    // silu'(g) = σ(g) · (1 + g − silu(g)), into g.
    k.sub(g, g, t);
    k.add(g, g, 1.0);
    k.mul(g, g, s);
    k.mul(g, g, u);
    k.mul(g, g, d);
    k.mul(t, t, d);
    let [dg, du] = f.halves(&k, &grads);
    k.store(dg, g);
    k.store(du, t);
    Ok(k.finish()?)
}
