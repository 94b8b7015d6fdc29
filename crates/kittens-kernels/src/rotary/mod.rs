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
//! Memory-bound: each wave holds `rows` positions of one head in strip tiles (`BaseShape::STRIP`).
//! In place is the caller's choice (the same buffer as input and output: every element is read
//! before it is written, by the same lane).

pub mod problem;

use crate::attn_fwd::{strides, AttnLayout};
use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RotaryConfig {
    /// Head dimension (a multiple of 16 from 16 to 512).
    pub dim: u32,
    pub layout: AttnLayout,
    /// GPT-J pairs `(2i, 2i + 1)` instead of GPT-NeoX's `(i, i + dim/2)`.
    pub interleaved: bool,
    /// Positions per wave.
    pub rows: u32,
    pub waves: u32,
}

/// Head dimensions the kernel takes.
pub const DIMS: std::ops::RangeInclusive<u32> = 16..=512;

impl RotaryConfig {
    /// About 256 values of each half per wave (8 per lane on 32 lanes: one 16-byte chunk of each
    /// operand), four waves per block. Measured on the H100 (bench/results/h100-2026-11-22-memk, run 2's
    /// sweep at B16 H16 N4096 D128 BSHD): 8 per lane 0.75 of the copy bandwidth, 16 per lane 0.56, 4
    /// per lane 0.51 (run 1, 16 per lane with the heads outermost in the grid: 0.66).
    pub fn new(dim: u32, layout: AttnLayout, interleaved: bool) -> Self {
        RotaryConfig {
            dim,
            layout,
            interleaved,
            rows: (512 / dim.max(1)).clamp(1, 64),
            waves: 4,
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
        if self.rows == 0 || self.waves == 0 {
            return Err(KernelError::Config(
                "rotary: rows and waves must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// The tensors, in launch order: `x` (bf16, read), `cos`, `sin` (bf16 `[seq, dim/2]`), `out` (bf16, the
/// layout of `x`); parameters `batch, heads, seq`.
pub fn build(cfg: &RotaryConfig) -> Result<Kernel, KernelError> {
    cfg.check()?;
    let (dim, half, rows) = (cfg.dim, cfg.dim / 2, cfg.rows);
    let form = if cfg.interleaved { "gptj" } else { "neox" };
    let name = format!("rotary_{form}_{:?}_d{dim}", cfg.layout).to_lowercase();
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
    let x = pairs(&mut k, "x", Access::Read);
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
    let out = pairs(&mut k, "out", Access::Write);
    let per_block = i64::from(rows * cfg.waves);
    // Neighbouring blocks read neighbouring memory: in BSHD the heads of one position are adjacent,
    // so heads run fastest; in BHSD the positions of one head.
    let blocks = seq.ceil_div(per_block);
    let (head, sblk) = match cfg.layout {
        AttnLayout::Bshd => {
            k.grid(
                vec![batch.clone(), blocks, heads.clone()],
                GridOrder::RowMajor,
            );
            (k.block(2), k.block(1))
        }
        AttnLayout::Bhsd => {
            k.grid(
                vec![batch.clone(), heads.clone(), blocks],
                GridOrder::RowMajor,
            );
            (k.block(1), k.block(2))
        }
    };
    let s0 = sblk * per_block + k.wave() * i64::from(rows);
    let strip = |k: &mut KernelBuilder, name: &str, dt| {
        k.tile(name, dt, rows, half, Layout::Row, BaseShape::STRIP)
    };
    let [x0, x1, c, s] = ["x0", "x1", "cos", "sin"].map(|n| strip(&mut k, n, Bf16));
    let [o0, o1, t] = ["out0", "out1", "t"].map(|n| strip(&mut k, n, F32));
    let member = |k: &KernelBuilder, g, m: i64| {
        let mut origin = vec![k.block(0), head.clone(), s0.clone(), Expr::c(0), Expr::c(0)];
        origin[member_dim] = Expr::c(m);
        k.gview(g, origin, 2, col_dim as u8, rows, half)
    };
    let tab = |k: &KernelBuilder, g| {
        let origin = vec![k.block(0), head.clone(), s0.clone(), Expr::c(0)];
        k.gview(g, origin, 2, 3, rows, half)
    };
    k.load_global(x0, member(&k, x, 0));
    k.load_global(x1, member(&k, x, 1));
    k.load_global(c, tab(&k, cos));
    k.load_global(s, tab(&k, sin));
    k.mul(o0, x0, c);
    k.mul(t, x1, s);
    k.sub(o0, o0, t);
    k.mul(o1, x1, c);
    k.mul(t, x0, s);
    k.add(o1, o1, t);
    k.store(member(&k, out, 0), o0);
    k.store(member(&k, out, 1), o1);
    Ok(k.finish()?)
}
