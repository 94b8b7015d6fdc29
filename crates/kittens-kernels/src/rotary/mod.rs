//! Rotary position embedding (RoPE) on a query or key tensor `[batch, heads, seq, dim]` in BSHD or BHSD
//! order, with the cos/sin tables given (`[seq, dim/2]`):
//!
//! ```text
//! out₀[i] = x₀[i]·cos[s, i] − x₁[i]·sin[s, i]
//! out₁[i] = x₁[i]·cos[s, i] + x₀[i]·sin[s, i]          i < dim/2
//! ```
//!
//! where the pair `(x₀[i], x₁[i])` is `(x[i], x[i + dim/2])` in the half-rotation form (GPT-NeoX) and
//! `(x[2i], x[2i + 1])` in the interleaved form (GPT-J). The two forms are one program: a head row is
//! viewed as a `[2, dim/2]` (half rotation) or `[dim/2, 2]` (interleaved) tensor, and the pair's members
//! are component 0 and 1 of that extra dimension. The tables are declared with zero batch and head
//! strides, so one table row serves every head at its position.
//!
//! Memory-bound: each wave holds one strip tile (`BaseShape::STRIP`) of each pair member and writes
//! two, in one of two arrangements ([`RotaryRows`]):
//!
//! * **heads along the rows**: one position, `rows` heads. The cos/sin row of the position is a
//!   column vector, loaded once and broadcast to every head; in BSHD order the wave's tile is one
//!   contiguous run of `rows · dim` elements.
//! * **positions along the rows**: one head, `rows` positions; the tables are tiles of the same
//!   shape, read again for every head (from L2).
//!
//! In the interleaved form the two members of a pair are adjacent, and the two loads (stores) of the
//! members follow each other, so the lowering moves them as one contiguous access per chunk.
//! In place is the caller's choice (the same buffer as input and output: every element is read
//! before it is written, by the same lane).

pub mod problem;

use crate::attn::layout::{strides, AttnLayout};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

/// What the rows of a wave's tile are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RotaryRows {
    /// Heads of one position: the table row is loaded once per wave and broadcast.
    Heads,
    /// Positions of one head: the table rows are a tile.
    Positions,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RotaryConfig {
    /// Head dimension (a multiple of 16 from 16 to 512).
    pub dim: u32,
    pub layout: AttnLayout,
    /// GPT-J pairs `(2i, 2i + 1)` instead of GPT-NeoX's `(i, i + dim/2)`.
    pub interleaved: bool,
    /// What a wave's rows are.
    pub along: RotaryRows,
    /// Rows (heads or positions) per wave.
    pub rows: u32,
    pub waves: u32,
    /// The backward: rotate by −θ (the transpose of the rotation, i.e. the forward with `sin`
    /// negated), reading `dy` and writing `dx`.
    pub inverse: bool,
}

/// Head dimensions the kernel takes.
pub const DIMS: std::ops::RangeInclusive<u32> = 16..=512;

impl RotaryConfig {
    /// Heads along the rows where a table row's chunks (`dim/16` of 8 values) divide a wave's lanes
    /// (a power-of-two `dim`: the broadcast needs every lane to hold one chunk of the row), else
    /// positions along the rows; one 16-byte chunk of each member per lane (256 values of each
    /// member per wave: 4 rows at D128, 8 at D64), four waves per block. Measured on the H100
    /// (docs/performance.md, "layernorm and rotary"; B16 H16 N4096 D128 / B16 H32 N4096 D64,
    /// heads along the rows): half rotation BSHD 0.95 / 0.92 of the copy bandwidth, BHSD 0.95 / 0.93;
    /// interleaved BSHD 0.92 / 0.94, BHSD 0.94 / 0.94. Twice the rows: 0.90-0.94; four times: 0.77-0.92;
    /// half (D64, half the lanes idle): 0.63-0.67.
    pub fn new(dim: u32, layout: AttnLayout, interleaved: bool) -> Self {
        let heads = dim.is_power_of_two();
        RotaryConfig {
            dim,
            layout,
            interleaved,
            along: if heads {
                RotaryRows::Heads
            } else {
                RotaryRows::Positions
            },
            rows: 512u32.checked_div(dim).unwrap_or(1).clamp(1, 64),
            waves: 4,
            inverse: false,
        }
    }

    fn check(&self) -> Result<(), KernelError> {
        if !DIMS.contains(&self.dim) || !self.dim.is_multiple_of(16) {
            return Err(KernelError::Config(format!(
                "rotary: head dimension {} must be a multiple of 16 from {} to {}",
                self.dim,
                DIMS.start(),
                DIMS.end()
            )));
        }
        if self.along == RotaryRows::Heads && !self.dim.is_power_of_two() {
            return Err(KernelError::Config(format!(
                "rotary: heads along the rows need a power-of-two head dimension (not {})",
                self.dim
            )));
        }
        if self.rows == 0 || self.waves == 0 {
            return Err(KernelError::Config(
                "rotary: rows and waves must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// The tensors, in launch order: `x` (bf16, read), `cos`, `sin` (bf16 `[seq, dim/2]`), `out` (bf16, the
/// layout of `x`); parameters `batch, heads, seq`. The inverse (backward) program reads `dy` and writes
/// `dx` in their places: `dx₀ = dy₀·cos + dy₁·sin`, `dx₁ = dy₁·cos − dy₀·sin`.
pub fn build(cfg: &RotaryConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let (dim, half, rows) = (cfg.dim, cfg.dim / 2, cfg.rows);
    let form = if cfg.interleaved { "gptj" } else { "neox" };
    let (kind, input, output) = match cfg.inverse {
        false => ("rotary", "x", "out"),
        true => ("rotary_bwd", "dy", "dx"),
    };
    let name = format!("{kind}_{form}_{:?}_d{dim}", cfg.layout).to_lowercase();
    let mut k = KernelBuilder::new(&name, Schedule::Plain { waves: cfg.waves });
    let [batch, heads, seq] = ["batch", "heads", "seq"].map(|n| k.param(n));
    let (d, h) = (Expr::c(i64::from(dim)), Expr::c(i64::from(half)));
    // A head row as `[2, half]` or `[half, 2]`: (the member's dimension, the column dimension).
    let (member_dim, col_dim) = if cfg.interleaved { (4, 3) } else { (3, 4) };
    let pairs = |k: &mut KernelBuilder, name: &str, access| -> GlobalId {
        let mut st = strides(cfg.layout, &heads, &seq, &d);
        st.pop();
        let (member, col) = if cfg.interleaved {
            (Expr::c(1), Expr::c(2))
        } else {
            (h.clone(), Expr::c(1))
        };
        let mut dims = vec![
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("s", seq.clone()),
        ];
        let mut pair_st = [member, col];
        let mut pair_dims = [("member", Expr::c(2)), ("i", h.clone())];
        if cfg.interleaved {
            pair_st.reverse();
            pair_dims.reverse();
        }
        dims.extend(pair_dims);
        st.extend(pair_st);
        k.global_strided(name, Bf16, &dims, st, access)
    };
    let x = pairs(&mut k, input, Access::Read);
    let table = |k: &mut KernelBuilder, name: &str| {
        let dims = [
            ("b", batch.clone()),
            ("h", heads.clone()),
            ("s", seq.clone()),
            ("i", h.clone()),
        ];
        let st = vec![Expr::c(0), Expr::c(0), h.clone(), Expr::c(1)];
        k.global_strided(name, Bf16, &dims, st, Access::Read)
    };
    let cos = table(&mut k, "cos");
    let sin = table(&mut k, "sin");
    let out = pairs(&mut k, output, Access::Write);
    let strip = |k: &mut KernelBuilder, name: &str, dt| {
        k.tile(name, dt, rows, half, Layout::Row, BaseShape::STRIP)
    };
    let [x0, x1] = ["x0", "x1"].map(|n| strip(&mut k, n, Bf16));
    let [o0, o1, t] = ["out0", "out1", "t"].map(|n| strip(&mut k, n, F32));
    // The wave's (head, position) and the dimension its rows run along.
    let (head, pos, row_dim) = place(&mut k, cfg, [&batch, &heads, &seq]);
    let member = |k: &KernelBuilder, g, m: i64| {
        let mut origin = vec![
            k.block(0),
            head.clone(),
            pos.clone(),
            Expr::c(0),
            Expr::c(0),
        ];
        origin[member_dim] = Expr::c(m);
        k.gview(g, origin, row_dim, col_dim as u8, rows, half)
    };
    let table_rows = match cfg.along {
        RotaryRows::Heads => 1,
        RotaryRows::Positions => rows,
    };
    let tab = |k: &KernelBuilder, g| {
        let origin = vec![k.block(0), head.clone(), pos.clone(), Expr::c(0)];
        k.gview(g, origin, 2, 3, table_rows, half)
    };
    // `o −= t` and `o += t` of the rotation by θ; by −θ the signs of the sine terms swap.
    let minus = |k: &mut KernelBuilder, o, t| match cfg.inverse {
        false => k.sub(o, o, t),
        true => k.add(o, o, t),
    };
    let plus = |k: &mut KernelBuilder, o, t| match cfg.inverse {
        false => k.add(o, o, t),
        true => k.sub(o, o, t),
    };
    k.load_global(x0, member(&k, x, 0));
    k.load_global(x1, member(&k, x, 1));
    match cfg.along {
        RotaryRows::Heads => {
            let [c, s] = ["cos", "sin"].map(|n| k.col_vec(n, x0, Bf16));
            k.load_global(c, tab(&k, cos));
            k.load_global(s, tab(&k, sin));
            k.mul_col(o0, x0, c);
            k.mul_col(t, x1, s);
            minus(&mut k, o0, t);
            k.mul_col(o1, x1, c);
            k.mul_col(t, x0, s);
            plus(&mut k, o1, t);
        }
        RotaryRows::Positions => {
            let [c, s] = ["cos", "sin"].map(|n| strip(&mut k, n, Bf16));
            k.load_global(c, tab(&k, cos));
            k.load_global(s, tab(&k, sin));
            k.mul(o0, x0, c);
            k.mul(t, x1, s);
            minus(&mut k, o0, t);
            k.mul(o1, x1, c);
            k.mul(t, x0, s);
            plus(&mut k, o1, t);
        }
    }
    k.store(member(&k, out, 0), o0);
    k.store(member(&k, out, 1), o1);
    Ok(k.finish()?)
}

/// The grid and each wave's place: `(first head, first position, the dimension of `x` the tile's rows
/// run along)`. Neighbouring blocks read neighbouring memory: in BSHD the heads of one position are
/// adjacent, so heads run fastest in the grid; in BHSD the positions of one head.
fn place(
    k: &mut KernelBuilder,
    cfg: &RotaryConfig,
    [batch, heads, seq]: [&Expr; 3],
) -> (Expr, Expr, u8) {
    let (rows, waves) = (i64::from(cfg.rows), i64::from(cfg.waves));
    // (extent of the head coordinate, extent of the position coordinate) in blocks, and the wave's
    // offsets along each.
    let (head_blocks, pos_blocks, head_step, pos_step, row_dim) = match cfg.along {
        RotaryRows::Heads => (heads.ceil_div(rows), seq.ceil_div(waves), rows, 1, 1),
        RotaryRows::Positions => (heads.clone(), seq.ceil_div(rows * waves), 1, rows, 2),
    };
    let (hb, pb) = match cfg.layout {
        AttnLayout::Bshd => {
            k.grid(
                vec![batch.clone(), pos_blocks, head_blocks],
                GridOrder::RowMajor,
            );
            (k.block(2), k.block(1))
        }
        AttnLayout::Bhsd => {
            k.grid(
                vec![batch.clone(), head_blocks, pos_blocks],
                GridOrder::RowMajor,
            );
            (k.block(1), k.block(2))
        }
    };
    let per_block = match cfg.along {
        RotaryRows::Heads => waves,
        RotaryRows::Positions => rows * waves,
    };
    let head = hb * head_step;
    let pos = pb * per_block + k.wave() * pos_step;
    (head, pos, row_dim)
}
