//! Global memory: tile loads (asynchronous into LDS, or into registers) and stores.
//!
//! Addressing. A buffer instruction's offsets are 32-bit, so one resource at a tensor's start cannot
//! reach past 4 GiB (and the out-of-range marker must stay past the bound). Each load therefore builds
//! its resource at its tile's origin: the 64-bit byte address `g + origin·e`, uniform, in scalar
//! registers, with the bytes left in the tensor as the bound, capped at 2^31 − 1 (the prelude's
//! `tile_rsrc`). Lanes address elements relative to the origin in 32 bits — a tile spans under 2 GiB,
//! which [`super::check_launch`] verifies for given parameters — and an element or chunk outside the
//! tensor gets `OUT_OF_RANGE` (2^31), at or past every such bound, so it reads 0. Stores index the
//! tensor pointer with 64-bit element offsets.
//!
//! Ragged edges. Rows outside the tensor are masked whole. Along the contiguous dimension each lane
//! moves a chunk of 4, 8 or 16 bytes: a chunk entirely inside is one buffer load, one entirely outside
//! loads `OUT_OF_RANGE` (no branch, the fast path). A chunk that crosses the tensor's last column is
//! masked whole by that fast path; then a uniform branch, taken only by a tile that crosses the last
//! column between chunk boundaries (one K step of a GEMM whose K is not a multiple of 8), loads that
//! chunk's in-range elements one by one and zeros the rest — into registers, or, for an asynchronous
//! load, over the zeros it wrote to LDS once it has landed.

use super::layout::Affine;
use super::lower::{reg_type, Emitter};
use super::ops::{is_involution, keeps_granule_pub as keeps_granule, swizzle_c_pub as swizzle_c};
use super::LowerError;
use crate::cexpr::ident;
use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_ir::{Env, GlobalView, Kernel, Op, RegId, Rounding, Scope, SharedView};
use kittens_tile::Layout;

/// How one element of a global view is addressed from the view's rebased resource (C strings).
pub(super) struct ViewAddr {
    /// Byte offset of the view's origin in its tensor: 64-bit, uniform.
    pub(super) origin_bytes: String,
    /// Element offset of view element `(row, col)` from the origin: 32-bit.
    pub(super) rel: String,
    /// View row `row` lies inside the tensor.
    row_in: String,
    /// Tensor column of view column `col`.
    col: String,
    /// The view's first column and the tensor's column count (uniform).
    col0: String,
    cols: String,
}

impl ViewAddr {
    /// A run of `w` elements from `(row, col)` lies inside the tensor.
    pub(super) fn inside(&self, w: u32) -> String {
        // `&`, not `&&`: no short-circuit, so the compiler evaluates both bounds without an
        // exec-masked region.
        format!("({} & ({} + {w} <= {}))", self.row_in, self.col, self.cols)
    }

    /// A run of `w` elements from `(row, col)` crosses the tensor's last column.
    fn crosses(&self, w: u32) -> String {
        format!(
            "({} & ({c} < {n}) & ({c} + {w} > {n}))",
            self.row_in,
            c = self.col,
            n = self.cols
        )
    }

    /// Uniform: some chunk of `w` elements of a `width`-column view crosses the last column, i.e. the
    /// view straddles it at a column that is not a chunk boundary.
    fn ragged(&self, width: u32, w: u32) -> String {
        format!(
            "(({c0} < {n}) & ({c0} + {width} > {n}) & (({n} - {c0}) % {w} != 0))",
            c0 = self.col0,
            n = self.cols
        )
    }
}

/// Largest byte offset a lane may take from its tile's rebased resource: under the 2^31 − 1 cap of
/// `rebased_bound`, less one 16-byte chunk.
pub const MAX_TILE_SPAN_BYTES: u64 = 0x7fff_fff0;

/// Checks that `k`'s lowered loads can address its tensors at `params`: every loaded tile spans at most
/// [`MAX_TILE_SPAN_BYTES`] from its origin (`(rows − 1)·row stride + cols·col stride` elements), so its
/// lanes' 32-bit offsets from the rebased resource neither wrap nor reach `OUT_OF_RANGE`. Tensors
/// themselves may be as large as the GPU holds.
pub fn check_launch(k: &Kernel, params: &[i64]) -> Result<(), LowerError> {
    let env = Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let mut err = None;
    super::lower::kittens_ir_walk(&k.body, &mut |op| {
        let v = match op {
            Op::LoadAsync { src, .. } | Op::LoadGlobal { src, .. } => src,
            _ => return,
        };
        let g = k.global(v.tensor);
        let stride = |d: u8| {
            g.strides[d as usize]
                .eval(&env)
                .and_then(|s| u64::try_from(s).ok())
        };
        let span = stride(v.row_dim)
            .zip(stride(v.col_dim))
            .and_then(|(sr, sc)| {
                (v.rows as u64 - 1)
                    .checked_mul(sr)?
                    .checked_add((v.cols as u64).checked_mul(sc)?)?
                    .checked_mul(g.dtype.bytes() as u64)
            });
        match span {
            Some(b) if b <= MAX_TILE_SPAN_BYTES => {}
            _ if err.is_some() => {}
            _ => {
                err = Some(LowerError::Launch(format!(
                    "a {}x{} tile of `{}` spans {} bytes from its origin at these parameters; the limit \
                     is {MAX_TILE_SPAN_BYTES} (32-bit offsets from the tile's buffer resource)",
                    v.rows,
                    v.cols,
                    g.name,
                    span.map_or("over 2^64".to_string(), |b| b.to_string())
                )))
            }
        }
    });
    err.map_or(Ok(()), Err)
}

/// The lane index read where a global access is issued (`lane_id_here`, an `asm volatile`), shadowing
/// the kernel's `lane` inside the access, so that the addresses computed from it stay there: tile
/// stores, the cold ragged-edge branch of register loads, and asynchronous loads of many steps. From
/// the kernel's `lane` the compiler shares such addresses between accesses (a prologue's Q load and the
/// epilogue's output store) or hoists them out of the loop around an access, and holds them live
/// across that loop: MI300X-attn's configuration spilled them. Recomputing them costs a few VALU
/// instructions per access.
/// Element `index·extent + base + per_idx·(lane % g) + per_group·(lane / g)` along one axis of a
/// register tile, as C: `index` is the base tile's loop variable (`bi`, `bj`), `extent` its rows or
/// columns, `a` the lane map's slot along that axis.
fn slot_c(index: &str, extent: u32, a: Affine, g: u32) -> String {
    format!(
        "({index} * {extent} + {} + {} * (lane % {g}) + {} * (lane / {g}))",
        a.base, a.per_idx, a.per_group
    )
}

const LANE_HERE: &str = "const int lane = (int)lane_id_here();";

/// Steps per wave above which an asynchronous tile load is issued as a rolled loop (see `load_async`).
const ROLLED_STEPS: u32 = 8;

/// True when `s` keeps every byte of a tile of `bytes` in its row of `row_bytes`.
fn keeps_rows(s: kittens_tile::Swizzle, row_bytes: u32, bytes: u32) -> bool {
    (0..bytes).all(|o| s.apply(o) / row_bytes == o / row_bytes)
}

/// The prelude's element load of `bytes`-wide elements.
fn element_load(bytes: u32) -> Result<&'static str, LowerError> {
    match bytes {
        1 => Ok("buffer_load_b8"),
        2 => Ok("buffer_load_b16"),
        4 => Ok("buffer_load_b32"),
        b => Err(LowerError::Unsupported(format!(
            "element loads of {b}-byte elements"
        ))),
    }
}

impl Emitter<'_> {
    pub(super) fn view_addr(&self, v: &GlobalView, row: &str, col: &str) -> ViewAddr {
        let g = self.k.global(v.tensor);
        let (rd, cd) = (v.row_dim as usize, v.col_dim as usize);
        let origin: Vec<String> = v
            .origin
            .iter()
            .zip(&g.strides)
            .map(|(o, s)| format!("(u64)({}) * (u64)({})", self.ex(o), self.ex(s)))
            .collect();
        let (r0, c0) = (self.ex(&v.origin[rd]), self.ex(&v.origin[cd]));
        ViewAddr {
            origin_bytes: format!("({}) * {}", origin.join(" + "), g.dtype.bytes()),
            rel: format!(
                "((u32)({row}) * (u32)({}) + (u32)({col}) * (u32)({}))",
                self.ex(&g.strides[rd]),
                self.ex(&g.strides[cd])
            ),
            row_in: match &g.clip {
                // A clip across the view (neither its rows nor its columns) drops it whole.
                Some(c) if c.dim as usize != rd && c.dim as usize != cd => format!(
                    "(({r0} + {row} < {}) & ({} < {}))",
                    self.extent(v.tensor, rd),
                    self.ex(&v.origin[c.dim as usize]),
                    self.ex(&c.end)
                ),
                _ => format!("({r0} + {row} < {})", self.extent(v.tensor, rd)),
            },
            col: format!("({c0} + {col})"),
            col0: c0,
            cols: self.extent(v.tensor, cd),
        }
    }

    /// Dimension `d` of tensor `g` as accesses see it: its size, or for the dimension the tensor is
    /// clipped along (`kittens_ir::Clip`, a packed batch's sequence end read through `Expr::Elem`)
    /// the smaller of its size and the clip's end, evaluated at the access. Loads past it read 0
    /// (their chunks take `OUT_OF_RANGE`), stores past it are dropped, as docs/ir.md says.
    pub(super) fn extent(&self, g: kittens_ir::GlobalId, d: usize) -> String {
        let g = self.k.global(g);
        match &g.clip {
            Some(c) if c.dim as usize == d => format!(
                "kittens::imin({}, {})",
                self.ex(&g.dims[d]),
                self.ex(&c.end)
            ),
            _ => self.ex(&g.dims[d]),
        }
    }

    /// `g_<name>, span_<name>` of a view's tensor: the arguments `tile_rsrc` takes before the origin.
    pub(super) fn tensor_args(&self, v: &GlobalView) -> String {
        let n = ident(&self.k.global(v.tensor).name);
        format!("g_{n}, span_{n}")
    }

    /// 64-bit element index of view element `(row, col)` in its tensor, and the in-bounds test (stores).
    pub(super) fn element_index(
        &self,
        v: &GlobalView,
        row: &str,
        col: &str,
        col_extent: u32,
    ) -> (String, String) {
        let g = self.k.global(v.tensor);
        let (rd, cd) = (v.row_dim as usize, v.col_dim as usize);
        let mut terms = Vec::new();
        for (d, (o, s)) in v.origin.iter().zip(&g.strides).enumerate() {
            let coord = match d {
                _ if d == rd => format!("({} + {row})", self.ex(o)),
                _ if d == cd => format!("({} + {col})", self.ex(o)),
                _ => self.ex(o),
            };
            terms.push(format!("(u64){coord} * (u64)({})", self.ex(s)));
        }
        let a = self.view_addr(v, row, col);
        (terms.join(" + "), a.inside(col_extent))
    }

    pub(super) fn load_async(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
        scope: Scope,
    ) -> Result<(), LowerError> {
        let sd = self.k.shared_decl(dst.buf).clone();
        let (t, e) = (sd.tile, sd.tile.dtype.bytes());
        let region = dst.rows * t.row_bytes();
        if dst.cols != t.cols
            || !region.is_multiple_of(t.swizzle.period_bytes().max(1))
            || !is_involution(t.swizzle, t.bytes())
        {
            return Err(LowerError::Unsupported(format!(
                "load_async into `{}`: needs whole rows spanning whole swizzle periods and an involutive swizzle",
                sd.name
            )));
        }
        if self.k.global(src.tensor).strides[src.col_dim as usize].as_const() != Some(1) {
            return Err(LowerError::Unsupported(
                "load_async from a view whose columns are not contiguous".into(),
            ));
        }
        // The view must start on a swizzle period (true for `sub` views, whose row0 is a multiple of
        // their rows; checked here when row0 is a constant).
        if let Some(r0) = dst.row0.as_const() {
            if !(r0 as u32 * t.row_bytes()).is_multiple_of(t.swizzle.period_bytes().max(1)) {
                return Err(LowerError::Unsupported(format!(
                    "load_async into `{}` at row {r0}: not on a swizzle period",
                    sd.name
                )));
            }
        }
        let waves = scope.waves(self.k.waves);
        let per_wave = region / waves;
        let x4 = self.arch == Arch::Cdna4
            && keeps_granule(t.swizzle, 16, t.bytes())
            && per_wave.is_multiple_of(1024);
        let width = if x4 { 16 } else { 4 };
        if !region.is_multiple_of(waves)
            || !per_wave.is_multiple_of(64 * width)
            || !keeps_granule(t.swizzle, width, t.bytes())
        {
            return Err(LowerError::Unsupported(format!(
                "load_async of {region} bytes over {waves} waves"
            )));
        }
        let n = per_wave / (64 * width);
        let wave_in_scope = match scope {
            Scope::Block => "wave",
            Scope::WarpGroup => "(wave % 4)",
            Scope::Wave => "0",
            Scope::Consumers => {
                return Err(LowerError::Unsupported(
                    "a consumers-scoped load (only barriers take the scope)".into(),
                ))
            }
        };
        let name = ident(&sd.name);
        let (idx, row0) = (self.ex(&dst.index), self.ex(&dst.row0));
        let a = self.view_addr(src, "r", "c");
        let tensor = self.tensor_args(src);
        let w = width / e;
        let wrapper = if x4 {
            "buffer_load_dwordx4_lds"
        } else {
            "buffer_load_dword_lds"
        };
        // Lane `lane` of step `i` fills LDS bytes `p .. p + width` of the tile with the logical element
        // run at tile offset `q` (the swizzle is an involution: its own inverse).
        let (rb, step) = (t.row_bytes(), 64 * width);
        // A load of many steps per wave (MI300X-attn's K block, loaded by four waves: 16 each) issues
        // them in a rolled loop and computes each lane's offsets at issue, from the lane index read
        // there: unrolled, every step's offsets are loop invariants the compiler hoists out of the key
        // loop around the load and holds live across it (32 VGPRs, then 16 SGPRs of scalar offsets:
        // that kernel spilled them). When the swizzle keeps every byte in its row and a step covers
        // whole rows or a part of one, a lane's row is the step's first row (uniform: the scalar
        // offset, advanced by the loop) plus its own `lane·width / row bytes`. Loads of few steps keep
        // the unrolled form, whose hoisted offsets cost less than recomputing them.
        let many = n > ROLLED_STEPS;
        let split_rows = many
            && keeps_rows(t.swizzle, rb, t.bytes())
            && (step.is_multiple_of(rb) || rb.is_multiple_of(step));
        let lane_run = |em: &mut Self| {
            em.line(format!(
                "const u32 p = region + band + (u32)i * {step} + ln * {width};"
            ));
            em.line(format!(
                "const u32 q = {} - region;",
                swizzle_c(t.swizzle, "p")
            ));
            if split_rows {
                em.line(format!(
                    "const int ru = (int)((band + (u32)i * {step}) / {rb}), rl = (int)(ln * {width} / {rb});"
                ));
                em.line(format!("const int r = ru + rl, c = (int)(q % {rb} / {e});"));
            } else {
                em.line(format!(
                    "const int r = (int)(q / {rb}), c = (int)(q % {rb} / {e});"
                ));
            }
        };
        // The lane's offset and the step's scalar offset (bytes from the tile's resource).
        let (lane_rel, soff) = if split_rows {
            (
                self.view_addr(src, "rl", "c").rel,
                // Uniform by construction; `readfirstlane` says so to the compiler (clang 19
                // placed it in a VGPR, which the instruction's scalar operand cannot take).
                format!(
                    "__builtin_amdgcn_readfirstlane({} * {e})",
                    self.view_addr(src, "ru", "0").rel
                ),
            )
        } else {
            (a.rel.clone(), "0".to_string())
        };
        self.block("", |em| {
            em.line(format!(
                "// load_async: {}x{} -> `{name}`, {n} x {wrapper} per wave",
                dst.rows, dst.cols
            ));
            em.line(format!(
                "const i32x4 rs = tile_rsrc({tensor}, {});",
                a.origin_bytes
            ));
            // `region` is the view's first byte inside its tile: the swizzle acts on tile offsets.
            em.line(format!("const u32 tile = (u32)({idx}) * {};", t.bytes()));
            em.line(format!("const u32 region = (u32)({row0}) * {};", t.row_bytes()));
            em.line(format!(
                "const u32 band = (u32){wave_in_scope} * {per_wave};"
            ));
            // The lane index read here, where the load issues: its offsets are a few VALU
            // instructions to recompute, where the compiler would otherwise hoist one per step out
            // of the loop around the load and keep them all live across it.
            em.line(if many {
                "const u32 ln = lane_id_here(); // see LANE_HERE"
            } else {
                "const u32 ln = lane;"
            });
            em.line(if many { "#pragma nounroll" } else { "#pragma unroll" });
            em.block(format!("for (int i = 0; i < {n}; ++i)"), |em| {
                lane_run(em);
                // Out of range: the lane's offset alone is past the bound (the scalar offset is
                // added after the hardware's range check).
                em.line(format!(
                    "const u32 voff = {} ? {lane_rel} * {e} : OUT_OF_RANGE;",
                    a.inside(w),
                ));
                em.line(format!(
                    "{wrapper}<0>(rs, voff, {soff}, lds_{name} + tile + region + band + (u32)i * {step});"
                ));
                Ok(())
            })?;
            if w == 1 {
                return Ok(());
            }
            em.line("// ragged edge: chunks crossing the last column, element by element over the zeros");
            em.block(
                format!("if (__builtin_expect({}, 0))", a.ragged(dst.cols, w)),
                |em| {
                    em.line(format!(
                        "const buffer_rsrc_t es = tile_rsrc_t({tensor}, {});",
                        a.origin_bytes
                    ));
                    em.line("s_waitcnt_vmcnt<0>(); // ragged edge: the masked chunks' zeros have landed");
                    // Rolled loops, one element in flight: this path must not raise the register
                    // pressure of the loop around it.
                    em.line("#pragma nounroll");
                    em.block(format!("for (int i = 0; i < {n}; ++i)"), |em| {
                        lane_run(em);
                        em.line(format!("if ({}) {{", a.crosses(w)));
                        em.line("  #pragma nounroll");
                        em.line(format!(
                            "  for (int s = 0; {} + s < {}; ++s) *({}*)(smem_{name} + tile + p + s * {e}) = {}(es, ({} + (u32)s) * {e});",
                            a.col,
                            a.cols,
                            super::lower::c_elem(t.dtype),
                            element_load(e)?,
                            a.rel
                        ));
                        em.line("}");
                        Ok(())
                    })?;
                    // The consumers read after a barrier that waits for loads only.
                    em.line("s_waitcnt_lgkmcnt<0>();");
                    Ok(())
                },
            )
        })?;
        self.async_issued.push(n);
        Ok(())
    }

    /// Per-lane vector loads of a row-layout tile straight from global memory, through the compiler
    /// (it tracks these loads and waits for them at their first use: the register double buffer of
    /// HipKittens E.1 on MI325X). Chunks past the tensor's edge read as zero.
    pub(super) fn load_global(&mut self, r: RegId, src: &GlobalView) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
        let dst = name.clone();
        let map = self.map(r)?;
        let epl = map.elems_per_lane();
        let ty = reg_type(tile.dtype, epl).unwrap_or("float");
        let g = self.k.global(src.tensor);
        if tile.dtype == DType::F32 && g.dtype == DType::F32 {
            let vector = tile.layout == Layout::Row
                && map.row_contiguous()
                && g.strides[src.col_dim as usize].as_const() == Some(1);
            if !vector {
                return self.load_global_elements(r, src);
            }
        }
        if tile.layout != Layout::Row
            || !map.row_contiguous()
            || self.k.global(src.tensor).strides[src.col_dim as usize].as_const() != Some(1)
        {
            return Err(LowerError::Unsupported(format!(
                "global load into `{}`",
                self.k.reg(r).name
            )));
        }
        let (row, col) = map.slots[0];
        let g = map.group;
        let lane_row = format!(
            "({} + {} * (lane % {g}) + {} * (lane / {g}))",
            row.base, row.per_idx, row.per_group
        );
        let lane_col = format!(
            "({} + {} * (lane % {g}) + {} * (lane / {g}))",
            col.base, col.per_idx, col.per_group
        );
        let (bi, bj) = (
            format!("(bi * {})", tile.base.rows),
            format!("(bj * {})", tile.base.cols),
        );
        let a = self.view_addr(
            src,
            &format!("({bi} + {lane_row})"),
            &format!("({bj} + {lane_col})"),
        );
        // The lane's offset inside its base tile, and the base tile's offset: uniform, the load's
        // scalar offset (one offset register for all the tile's loads).
        let lane_rel = self.view_addr(src, &lane_row, &lane_col).rel;
        let tile_rel = self.view_addr(src, &bi, &bj).rel;
        let tensor = self.tensor_args(src);
        let gdt = self.k.global(src.tensor).dtype;
        // A bf16 tensor into f32 registers (attention's Q, scaled in f32 before its bf16 copy): load the
        // bf16 run, widen each element.
        let widen = tile.dtype == DType::F32 && gdt == DType::Bf16;
        if tile.dtype != gdt && !widen {
            return Err(LowerError::Unsupported(format!(
                "global load of {gdt:?} into {:?} registers",
                tile.dtype
            )));
        }
        let (name, ty) = if widen {
            ("wide", reg_type(gdt, epl).unwrap_or("float"))
        } else {
            (name.as_str(), ty)
        };
        let name = name.to_string();
        let e = gdt.bytes();
        // Whole 4/8/16-byte chunks per lane: a buffer load (HipKittens' `buffer_load_dwordx4`, HipKittens
        // E.1) whose out-of-range chunks read 0 past the resource's bound, with no branch. Otherwise a
        // plain load through a 64-bit pointer, masked to zero out of range.
        let bits = epl * e * 8;
        let load = if matches!(bits, 32 | 64 | 128) {
            format!(
                "const u32 voff = inb ? {lane_rel} * {e} : OUT_OF_RANGE;\n\
                 {name}[bi][bj] = __builtin_bit_cast({ty}, buffer_load_b{bits}(rs, voff, {tile_rel} * {e}));"
            )
        } else {
            format!(
                "const u64 off = inb ? {} + (u64){} * {e} : 0u;\n\
                 const {ty} v = *(const {ty}*)((const unsigned char*)g_{} + off);\n\
                 {name}[bi][bj] = inb ? v : ({ty}){{}};",
                a.origin_bytes,
                a.rel,
                ident(&self.k.global(src.tensor).name)
            )
        };
        let (gr, gc) = tile.base_grid();
        // One in-range element of the ragged fix-up, converted to the register's type.
        let elem = format!("{}(rs, ({} + (u32)s) * {e})", element_load(e)?, a.rel);
        let elem = match (widen, tile.dtype) {
            (true, _) => format!("bf16_to_f32({elem})"),
            (false, DType::F32) => format!("__builtin_bit_cast(float, {elem})"),
            _ => elem,
        };
        self.block("", |em| {
            em.line(format!(
                "const buffer_rsrc_t rs = tile_rsrc_t({tensor}, {});",
                a.origin_bytes
            ));
            em.line("#pragma unroll");
            em.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
                em.line("#pragma unroll");
                em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                    em.line(format!("const bool inb = {};", a.inside(epl)));
                    if widen {
                        em.line(format!("{ty} wide[1][1];"));
                    }
                    load.lines()
                        .for_each(|l| em.line(l.replace("wide[bi][bj]", "wide[0][0]")));
                    if widen {
                        em.line(format!("for (int s = 0; s < {epl}; ++s) {dst}[bi][bj][s] = bf16_to_f32(wide[0][0][s]);"));
                    }
                    Ok(())
                })
            })?;
            if epl == 1 {
                return Ok(());
            }
            em.line("// ragged edge: chunks crossing the last column, element by element");
            em.block(
                format!("if (__builtin_expect({}, 0))", a.ragged(src.cols, epl)),
                |em| {
                    // This cold branch's addresses computed here, not hoisted out of a loop around
                    // the load and held across it.
                    em.line(LANE_HERE);
                    em.line("#pragma unroll");
                    em.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
                        em.line("#pragma unroll");
                        em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                            // Rolled: one element in flight (see load_async).
                            em.line(format!("if ({}) {{", a.crosses(epl)));
                            em.line("  #pragma nounroll");
                            // Byte elements live four to a 32-bit lane of the register vector
                            // (`fp8x8` is `u32x2`): insert each into its byte of its lane.
                            let put = if e == 1 {
                                format!(
                                    "{{ const u32 w = (u32)s >> 2, sh = ((u32)s & 3u) * 8u; \
                                     {dst}[bi][bj][w] = ({dst}[bi][bj][w] & ~(0xffu << sh)) | ((u32)({elem}) << sh); }}"
                                )
                            } else {
                                format!("{dst}[bi][bj][s] = {elem};")
                            };
                            em.line(format!(
                                "  for (int s = 0; {} + s < {}; ++s) {put}",
                                a.col, a.cols
                            ));
                            em.line("}");
                            Ok(())
                        })
                    })
                },
            )
        })
    }

    /// An f32 tile in any layout, from a tensor with any strides, one 32-bit buffer load per element,
    /// zero outside the tensor: the GEMM's scales, read once after the K loop as tiles shaped like the
    /// accumulator from tensors whose zero strides broadcast one value per tensor, row or column.
    fn load_global_elements(&mut self, r: RegId, src: &GlobalView) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
        let map = self.map(r)?;
        let tensor = self.tensor_args(src);
        let (gr, gc) = tile.base_grid();
        let g = map.group;
        let origin = self.view_addr(src, "0", "0").origin_bytes;
        let gd = self.k.global(src.tensor);
        let zero = |d: u8| gd.strides[d as usize].as_const() == Some(0);
        if zero(src.row_dim) && zero(src.col_dim) {
            // One value for the whole view (a per-tensor scale): one load, broadcast. The view's
            // origin is inside the tensor for every tile a kernel stores, and the read is in bounds
            // wherever the view's first element is.
            let inside = self.view_addr(src, "0", "0").inside(1);
            return self.block("", |em| {
                em.line(format!("const buffer_rsrc_t rs = tile_rsrc_t({tensor}, {origin});"));
                em.line(format!(
                    "const float v = __builtin_bit_cast(float, buffer_load_b32(rs, {inside} ? 0u : OUT_OF_RANGE));"
                ));
                em.line(format!(
                    "for (int bi = 0; bi < {gr}; ++bi) for (int bj = 0; bj < {gc}; ++bj) for (int s = 0; s < {}; ++s) {name}[bi][bj][s] = v;",
                    map.slots.len()
                ));
                Ok(())
            });
        }
        self.block("", |em| {
            em.line(format!("const buffer_rsrc_t rs = tile_rsrc_t({tensor}, {origin});"));
            em.line("#pragma unroll");
            em.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
                em.line("#pragma unroll");
                em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                    for (s, (row, col)) in map.slots.iter().enumerate() {
                        let rexpr = slot_c("bi", tile.base.rows, *row, g);
                        let cexpr = slot_c("bj", tile.base.cols, *col, g);
                        let a = em.view_addr(src, &rexpr, &cexpr);
                        em.line(format!(
                            "{{ const u32 voff = {} ? {} * 4 : OUT_OF_RANGE; {name}[bi][bj][{s}] = __builtin_bit_cast(float, buffer_load_b32(rs, voff)); }}",
                            a.inside(1),
                            a.rel
                        ));
                    }
                    Ok(())
                })
            })
        })
    }

    pub(super) fn store_global(
        &mut self,
        dst: &GlobalView,
        r: RegId,
        rounding: Rounding,
    ) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
        let map = self.map(r)?;
        let out = self.k.global(dst.tensor).dtype;
        let convert = match (tile.dtype, out, rounding) {
            (DType::F32, DType::F32, _) => "v",
            (DType::F32, DType::Bf16, Rounding::Rtne) => "bf16_rtne(v)",
            (DType::F32, DType::Bf16, Rounding::Rtna) => "bf16_rtna(v)",
            (DType::F32, DType::Bf16, Rounding::Rtz) => "bf16_rtz(v)",
            (a, b, _) if a == b && a != DType::F32 => "v",
            (a, b, _) => {
                return Err(LowerError::Unsupported(format!(
                    "store {a:?} registers to a {b:?} tensor"
                )))
            }
        };
        let gname = format!("g_{}", ident(&self.k.global(dst.tensor).name));
        let g = map.group;
        let (gr, gc) = tile.base_grid();
        let slots = map.slots.clone();
        self.block("", |em| {
            em.line(LANE_HERE);
            em.line("#pragma unroll");
            em.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
                em.line("#pragma unroll");
                em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                    for (s, (row, col)) in slots.iter().enumerate() {
                        let re = slot_c("bi", tile.base.rows, *row, g);
                        let ce = slot_c("bj", tile.base.cols, *col, g);
                        let (addr, inb) = em.element_index(dst, &re, &ce, 1);
                        let v = if map.elems_per_lane() == 1 {
                            format!("{name}[bi][bj]")
                        } else {
                            format!("{name}[bi][bj][{s}]")
                        };
                        em.line(format!(
                            "if {inb} {{ const auto v = {v}; {gname}[{addr}] = {convert}; }}"
                        ));
                    }
                    Ok(())
                })
            })
        })
    }
}
