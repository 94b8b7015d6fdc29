//! Lowering of single IR ops to prelude calls.
//!
//! - `LoadAsync` → `buffer_load_dword[x4] … lds` (seed 000 D.5): LDS receives each instruction's data
//!   contiguously (lane `l` at `M0 + l·width`), so the *global* address is swizzled instead — each lane
//!   fetches the logical element that belongs at its physical LDS byte (seed 000 §3.2.2, "swizzling on
//!   the HBM addresses"). The swizzles here are involutions, so the inverse is the swizzle itself
//!   (checked). 16-byte loads into LDS exist on gfx950 only.
//! - `LoadGlobal` → `buffer_load_dword[x2|x4]` to registers through the LLVM builtins (the compiler
//!   tracks the wait), out-of-range chunks reading zero past the resource's bound.
//! - `LoadShared` / `StoreShared` → `ds_read_b64/b128`, `ds_write_b64/b128` per base tile: a row-layout
//!   lane holds consecutive elements of one row (seed 000 D.1).
//!   A tile whose lanes hold runs of a column (column-layout bf16, the transposed operand of
//!   `mma_atb`): `ds_read_b64_tr_b16` on gfx950 ([`super::lds_tr`]), one element read each on gfx942.
//! - `Mma` → the target's MFMA per (row, col, k) base-tile triple with tied accumulators; every form
//!   runs as `A·Bᵀ` on row views (a transposed operand through its transposed lane map); the
//!   zero-accumulator form starts a chain when `c` is absent.
//! - Register-only ops (maps, reductions, masks, transposes) are in [`super::regops`].
//! - `Wait` → `s_waitcnt vmcnt/lgkmcnt` with the IR's op counts turned into instruction counts.

use super::layout::{mfma_for_abt, LaneMap};
use super::lower::{reg_type, Emitter};
use super::LowerError;
use crate::cexpr::ident;
use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_ir::{
    GlobalView, MmaForm, MmaOperand, Op, RegId, Rounding, SchedHint, Scope, SharedView, WaitCount,
    WaitQueue,
};
use kittens_tile::{Layout, Swizzle};

/// Largest `vmcnt` (6 bits) and `lgkmcnt` (4 bits) on gfx9 (CDNA3 ISA, S_WAITCNT); larger counts are
/// clamped, which only waits more.
const MAX_VMCNT: u32 = 63;
const MAX_LGKMCNT: u32 = 15;

/// `swz(off)` as C for a swizzle (`kittens_tile::Swizzle::apply`).
fn swizzle_c(s: Swizzle, off: &str) -> String {
    match s {
        Swizzle::None => off.to_string(),
        Swizzle::Xor { bits, base, shift } => {
            format!("({off} ^ xor_flips<{bits}, {base}, {shift}>({off}))")
        }
        Swizzle::Xor2 {
            first: a,
            second: b,
        } => format!(
            "({off} ^ xor_flips<{}, {}, {}>({off}) ^ xor_flips<{}, {}, {}>({off}))",
            a.bits, a.base, a.shift, b.bits, b.base, b.shift
        ),
    }
}

/// True when `s` moves `granule`-byte runs whole over a tile of `bytes` (a vector access stays one).
fn keeps_granule(s: Swizzle, granule: u32, bytes: u32) -> bool {
    (0..bytes)
        .step_by(granule as usize)
        .all(|o| (0..granule).all(|i| s.apply(o + i) == s.apply(o) + i))
}

pub(super) fn keeps_granule_pub(s: Swizzle, granule: u32, bytes: u32) -> bool {
    keeps_granule(s, granule, bytes)
}

pub(super) fn swizzle_c_pub(s: Swizzle, off: &str) -> String {
    swizzle_c(s, off)
}

fn is_involution(s: Swizzle, bytes: u32) -> bool {
    (0..bytes).all(|o| s.apply(s.apply(o)) == o)
}

impl Emitter<'_> {
    pub(super) fn op(&mut self, op: &Op) -> Result<(), LowerError> {
        match op {
            Op::LoadAsync { dst, src, scope } => self.load_async(dst, src, *scope),
            Op::LoadShared { dst, src } => self.lds_access(*dst, src, false),
            Op::StoreShared { dst, src, .. } => self.lds_access(*src, dst, true),
            Op::LoadGlobal { dst, src } => self.load_global(*dst, src),
            Op::StoreGlobal { dst, src, rounding } => self.store_global(dst, *src, *rounding),
            Op::Mma { form, d, a, b, c } => self.mma(*form, *d, a, b, *c),
            Op::Fill { dst, value } if self.k.reg(*dst).vec().is_some() => {
                self.fill_vec(*dst, *value)
            }
            Op::Fill { dst, value } => self.fill(*dst, *value),
            Op::Map {
                dst,
                f,
                args,
                rounding,
            } => self.map_op(*dst, *f, args, *rounding),
            Op::Reduce {
                dst,
                src,
                axis,
                op,
                acc,
            } => self.reduce(*dst, *src, *axis, *op, *acc),
            Op::Transpose { dst, src } => self.relayout(*dst, *src, true),
            Op::SwapLayout { dst, src } => self.relayout(*dst, *src, false),
            Op::Mask {
                dst,
                rule,
                row0,
                col0,
                value,
            } => self.mask(*dst, rule, row0, col0, *value),
            Op::Wait { queue, count } => {
                self.wait(*queue, *count);
                Ok(())
            }
            Op::Barrier {
                scope: Scope::Block,
            } => {
                self.line("s_barrier();");
                Ok(())
            }
            Op::Priority(p) => {
                self.line(format!("s_setprio<{}>();", p.min(&3)));
                Ok(())
            }
            Op::Hint(SchedHint::Fence) => {
                self.line("sched_barrier<SCHED_NONE>();");
                Ok(())
            }
            Op::Hint(SchedHint::Pairs { mma, other, groups }) => {
                for _ in 0..*groups {
                    self.line(format!("sched_group_barrier<SCHED_MFMA, {mma}, 0>(); sched_group_barrier<SCHED_VALU, {other}, 0>();"));
                }
                Ok(())
            }
            Op::SetMaxRegs { regs } => {
                self.line(format!(
                    "// setmaxnreg({regs}): Hopper only, nothing on CDNA"
                ));
                Ok(())
            }
            other => Err(LowerError::Unsupported(format!(
                "op `{}` is not lowered to HIP yet",
                other.name()
            ))),
        }
    }

    fn map(&self, r: RegId) -> Result<LaneMap, LowerError> {
        self.maps
            .get(&r.0)
            .cloned()
            .ok_or_else(|| LowerError::Unsupported(format!("register {} has no lane map", r.0)))
    }

    fn reg(&self, r: RegId) -> (String, kittens_tile::RegTile) {
        let d = self.k.reg(r);
        (
            format!("r_{}", ident(&d.name)),
            *d.tile().expect("maps exist only for tiles"),
        )
    }

    /// Element offset of view element `(row, col)` (C strings) in its tensor, and the in-bounds test.
    fn global_addr(
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
        // `&`, not `&&`: no short-circuit, so the compiler evaluates both bounds without an exec-masked
        // region.
        let inb = format!(
            "(({} + {row} < {}) & ({} + {col} + {col_extent} <= {}))",
            self.ex(&v.origin[rd]),
            self.ex(&g.dims[rd]),
            self.ex(&v.origin[cd]),
            self.ex(&g.dims[cd])
        );
        (terms.join(" + "), inb)
    }

    fn load_async(
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
        };
        let name = ident(&sd.name);
        let (idx, row0) = (self.ex(&dst.index), self.ex(&dst.row0));
        let rsrc = format!("rsrc_{}", ident(&self.k.global(src.tensor).name));
        let (addr, inb) = self.global_addr(src, "r", "c", width / e);
        let wrapper = if x4 {
            "buffer_load_dwordx4_lds"
        } else {
            "buffer_load_dword_lds"
        };
        self.block("", |em| {
            em.line(format!(
                "// load_async: {}x{} -> `{name}`, {n} x {wrapper} per wave",
                dst.rows, dst.cols
            ));
            // `region` is the view's first byte inside its tile: the swizzle acts on tile offsets.
            em.line(format!("const u32 tile = (u32)({idx}) * {};", t.bytes()));
            em.line(format!("const u32 region = (u32)({row0}) * {};", t.row_bytes()));
            em.line(format!(
                "const u32 band = (u32){wave_in_scope} * {per_wave};"
            ));
            em.line("#pragma unroll");
            em.block(format!("for (int i = 0; i < {n}; ++i)"), |em| {
                em.line(format!(
                    "const u32 p = region + band + (u32)i * {} + (u32)lane * {width};",
                    64 * width
                ));
                em.line(format!(
                    "const u32 q = {} - region;",
                    swizzle_c(t.swizzle, "p")
                ));
                em.line(format!(
                    "const int r = (int)(q / {}), c = (int)(q % {} / {e});",
                    t.row_bytes(),
                    t.row_bytes()
                ));
                em.line(format!(
                    "const u32 voff = {inb} ? (u32)(({addr}) * {e}) : 0x80000000u;"
                ));
                em.line(format!(
                    "{wrapper}<0>({rsrc}, voff, 0, lds_{name} + tile + region + band + (u32)i * {});",
                    64 * width
                ));
                Ok(())
            })
        })?;
        self.async_issued.push(n);
        Ok(())
    }

    /// `ds_read` (`store == false`) or `ds_write` of a row-layout register tile to/from a shared view.
    fn lds_access(&mut self, r: RegId, view: &SharedView, store: bool) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
        let map = self.map(r)?;
        let sd = self.k.shared_decl(view.buf).clone();
        let e = sd.tile.dtype.bytes();
        let bytes = map.elems_per_lane() * e;
        let ty = reg_type(tile.dtype, map.elems_per_lane()).unwrap_or("float");
        let ok = tile.layout == Layout::Row
            && map.row_contiguous()
            && (bytes == 8 || bytes == 16)
            && tile.dtype == sd.tile.dtype;
        if !ok && !store && tile.dtype == sd.tile.dtype {
            if self.lds_read_tr_b16(r, view)? {
                return Ok(());
            }
            return self.lds_read_elements(r, view);
        }
        if !ok || !keeps_granule(sd.tile.swizzle, bytes, sd.tile.bytes()) {
            return Err(LowerError::Unsupported(format!(
                "{} of `{}` ({:?}, {:?} layout) through `{}`",
                if store {
                    "store to shared"
                } else {
                    "load from shared"
                },
                self.k.reg(r).name,
                tile.dtype,
                tile.layout,
                sd.name
            )));
        }
        let (gr, gc) = tile.base_grid();
        let (row, col) = map.slots[0];
        let g = map.group;
        let off = format!(
            "((u32)({row0} + bi * {br} + {rb} + {ri} * (lane % {g}) + {rg} * (lane / {g})) * {rowb} + (u32)({col0} + bj * {bc} + {cb} + {ci} * (lane % {g}) + {cg} * (lane / {g})) * {e})",
            row0 = self.ex(&view.row0),
            col0 = self.ex(&view.col0),
            br = tile.base.rows,
            bc = tile.base.cols,
            rb = row.base,
            ri = row.per_idx,
            rg = row.per_group,
            cb = col.base,
            ci = col.per_idx,
            cg = col.per_group,
            rowb = sd.tile.row_bytes()
        );
        let lds = format!(
            "lds_{} + (u32)({}) * {} + {}",
            ident(&sd.name),
            self.ex(&view.index),
            sd.tile.bytes(),
            swizzle_c(sd.tile.swizzle, "o")
        );
        let bits = if bytes == 16 { "b128" } else { "b64" };
        let vty = if bytes == 16 { "u32x4" } else { "u32x2" };
        let access = |em: &mut Self, imm: u32, slot: &str, addr: &str| {
            if store {
                em.line(format!(
                    "ds_write_{bits}<{imm}>({addr}, __builtin_bit_cast({vty}, {name}{slot}));"
                ));
            } else {
                em.line(format!(
                    "{name}{slot} = __builtin_bit_cast({ty}, ds_read_{bits}<{imm}>({addr}));"
                ));
            }
        };
        // Unswizzled: one lane address, each base tile at an immediate offset (seed 001 §2.1: the offset
        // rides in the instruction, costing no register and no address math).
        let imm =
            |bi: u32, bj: u32| bi * tile.base.rows * sd.tile.row_bytes() + bj * tile.base.cols * e;
        if sd.tile.swizzle == Swizzle::None && imm(gr - 1, gc - 1) <= u16::MAX as u32 {
            let base = off.replace("bi * ", "0 * ").replace("bj * ", "0 * ");
            self.block("", |em| {
                em.line(format!("const u32 o = {base};"));
                for bi in 0..gr {
                    for bj in 0..gc {
                        access(em, imm(bi, bj), &format!("[{bi}][{bj}]"), &lds);
                    }
                }
                Ok(())
            })?;
        } else {
            self.line("#pragma unroll");
            self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
                em.line("#pragma unroll");
                em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                    em.line(format!("const u32 o = {off};"));
                    access(em, 0, "[bi][bj]", &lds);
                    Ok(())
                })
            })?;
        }
        self.lds_issued.push(gr * gc);
        Ok(())
    }

    /// Shared→register load of a tile whose lanes do not hold runs of one row (a column-layout bf16
    /// tile: the transposed operand of `mma_atb`): one 16-bit (32-bit) LDS read per element at its
    /// swizzled address, through the compiler (which tracks the wait).
    fn lds_read_elements(&mut self, r: RegId, view: &SharedView) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
        let map = self.map(r)?;
        let sd = self.k.shared_decl(view.buf).clone();
        let e = sd.tile.dtype.bytes();
        let cty = match e {
            2 => "unsigned short",
            4 => "float",
            _ => {
                return Err(LowerError::Unsupported(format!(
                    "element-wise shared load of {:?}",
                    sd.tile.dtype
                )))
            }
        };
        if !keeps_granule(sd.tile.swizzle, e, sd.tile.bytes()) {
            return Err(LowerError::Unsupported(format!(
                "element-wise load through `{}`: its swizzle splits elements",
                sd.name
            )));
        }
        let (gr, gc) = tile.base_grid();
        let epl = map.elems_per_lane();
        let (row0, col0, idx) = (
            self.ex(&view.row0),
            self.ex(&view.col0),
            self.ex(&view.index),
        );
        let smem = format!("smem_{}", ident(&sd.name));
        self.line(format!(
            "// load (shared->reg) `{name}`: {epl} element reads per base tile"
        ));
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for (s, (ra, ca)) in map.slots.iter().enumerate() {
                    let rr = format!("({row0} + bi * {} + {})", tile.base.rows, super::regops::affine_c(*ra, map.group));
                    let cc = format!("({col0} + bj * {} + {})", tile.base.cols, super::regops::affine_c(*ca, map.group));
                    em.line(format!(
                        "{{ const u32 o = (u32)({rr}) * {} + (u32)({cc}) * {e}; {name}[bi][bj][{s}] = *({cty}*)({smem} + (u32)({idx}) * {} + {}); }}",
                        sd.tile.row_bytes(),
                        sd.tile.bytes(),
                        swizzle_c(sd.tile.swizzle, "o")
                    ));
                }
                Ok(())
            })
        })
    }

    /// Per-lane vector loads of a row-layout tile straight from global memory, through the compiler
    /// (it tracks these loads and waits for them at their first use: the register double buffer of
    /// seed 000 E.1 on MI325X). Chunks past the tensor's edge read as zero.
    fn load_global(&mut self, r: RegId, src: &GlobalView) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
        let dst = name.clone();
        let map = self.map(r)?;
        let epl = map.elems_per_lane();
        let ty = reg_type(tile.dtype, epl).unwrap_or("float");
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
        let rexpr = format!(
            "(bi * {} + {} + {} * (lane % {g}) + {} * (lane / {g}))",
            tile.base.rows, row.base, row.per_idx, row.per_group
        );
        let cexpr = format!(
            "(bj * {} + {} + {} * (lane % {g}) + {} * (lane / {g}))",
            tile.base.cols, col.base, col.per_idx, col.per_group
        );
        let (addr, inb) = self.global_addr(src, &rexpr, &cexpr, epl);
        let gname = ident(&self.k.global(src.tensor).name);
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
        // Whole 4/8/16-byte chunks per lane: a buffer load (HipKittens' `buffer_load_dwordx4`, seed 000
        // E.1) whose out-of-range chunks read 0 from the resource's bound, with no branch. Otherwise a
        // plain load from a 32-bit byte offset (SGPR-base addressing), masked to zero out of range.
        let bits = epl * e * 8;
        let load = if matches!(bits, 32 | 64 | 128) {
            format!(
                "const u32 voff = inb ? (u32)(({addr}) * {e}) : 0x80000000u;\n\
                 {name}[bi][bj] = __builtin_bit_cast({ty}, buffer_load_b{bits}(vrsrc_{gname}, voff));"
            )
        } else {
            format!(
                "const u32 off = inb ? (u32)(({addr}) * {e}) : 0u;\n\
                 const {ty} v = *(const {ty}*)((const unsigned char*)g_{gname} + off);\n\
                 {name}[bi][bj] = inb ? v : ({ty}){{}};"
            )
        };
        self.line("#pragma unroll");
        self.block(
            format!("for (int bi = 0; bi < {}; ++bi)", tile.base_grid().0),
            |em| {
                em.line("#pragma unroll");
                em.block(
                    format!("for (int bj = 0; bj < {}; ++bj)", tile.base_grid().1),
                    |em| {
                        em.line(format!("const bool inb = {inb};"));
                        if widen {
                            em.line(format!("{ty} wide[1][1];"));
                        }
                        load.lines()
                            .for_each(|l| em.line(l.replace("wide[bi][bj]", "wide[0][0]")));
                        if widen {
                            em.line(format!("for (int s = 0; s < {epl}; ++s) {dst}[bi][bj][s] = bf16_to_f32(wide[0][0][s]);"));
                        }
                        Ok(())
                    },
                )
            },
        )
    }

    fn store_global(
        &mut self,
        dst: &GlobalView,
        r: RegId,
        rounding: Rounding,
    ) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
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
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for (s, (row, col)) in slots.iter().enumerate() {
                    let re = format!(
                        "(bi * {} + {} + {} * (lane % {g}) + {} * (lane / {g}))",
                        tile.base.rows, row.base, row.per_idx, row.per_group
                    );
                    let ce = format!(
                        "(bj * {} + {} + {} * (lane % {g}) + {} * (lane / {g}))",
                        tile.base.cols, col.base, col.per_idx, col.per_group
                    );
                    let (addr, inb) = em.global_addr(dst, &re, &ce, 1);
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
    }

    fn mma(
        &mut self,
        form: MmaForm,
        d: RegId,
        a: &MmaOperand,
        b: &MmaOperand,
        c: Option<RegId>,
    ) -> Result<(), LowerError> {
        let (MmaOperand::Reg(a), MmaOperand::Reg(b)) = (a, b) else {
            return Err(LowerError::Unsupported(format!(
                "{} with a shared-memory operand (CDNA MFMAs read registers)",
                form.name()
            )));
        };
        let ((dn, dt), (an, at), (bn, bt)) = (self.reg(d), self.reg(*a), self.reg(*b));
        // Every form runs as A·Bᵀ on row views: a transposed operand (A stored K×M, B stored K×N) is
        // read through its transposed lane map, its base tiles indexed `[k][m]`.
        let (ta, tb) = (form.a_transposed(), !form.b_transposed());
        let view = |m: LaneMap, t: &kittens_tile::RegTile, tr: bool| {
            if tr {
                let b = kittens_tile::BaseShape::new(t.base.cols, t.base.rows);
                (m.transposed(), b, t.base_grid().0)
            } else {
                (m, t.base, t.base_grid().1)
            }
        };
        let (amap, abase, kr) = view(self.map(*a)?, &at, ta);
        let (bmap, bbase, _) = view(self.map(*b)?, &bt, tb);
        let plan = mfma_for_abt(self.arch, at.dtype, (abase, &amap), (bbase, &bmap), dt.base)?;
        let ix = |tr: bool, mn: &str, k: &str| {
            if tr {
                format!("[{k}][{mn}]")
            } else {
                format!("[{mn}][{k}]")
            }
        };
        let (ai0, bj0, aik, bjk) = (
            ix(ta, "i", "0"),
            ix(tb, "j", "0"),
            ix(ta, "i", "kk"),
            ix(tb, "j", "kk"),
        );
        let f = plan.instr.name.trim_start_matches("v_");
        let (mr, nr) = dt.base_grid();
        // Operand of split `h`: the whole register vector, or its slots h·n .. (h+1)·n.
        let part = |v: &str, h: u32| match plan.splits {
            1 => v.to_string(),
            _ => {
                let idx: Vec<String> = (h * plan.slots..(h + 1) * plan.slots)
                    .map(|x| x.to_string())
                    .collect();
                format!("__builtin_shufflevector({v}, {v}, {})", idx.join(", "))
            }
        };
        if let Some(c) = c.filter(|c| *c != d) {
            let (cn, _) = self.reg(c);
            self.line(format!("for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) {dn}[i][j] = {cn}[i][j];"));
        }
        if [&dt, &at, &bt].iter().any(|t| t.pin.is_some()) {
            if ta || tb {
                return Err(LowerError::Unsupported(format!(
                    "{} on pinned registers (only mma_abt)",
                    form.name()
                )));
            }
            let dmap = self.map(d)?;
            let ops = super::pinned::AbtOperands {
                d: (&dn, &dt, dmap.elems_per_lane()),
                a: (&an, &at, amap.elems_per_lane()),
                b: (&bn, &bt, bmap.elems_per_lane()),
            };
            self.mma_pinned(&plan, &ops, c.is_none());
            return Ok(());
        }
        self.line(format!(
            "// {}: {mr}x{nr} accumulators, {kr} K tiles of {} {f}",
            form.name(),
            plan.splits
        ));
        self.line("#pragma unroll");
        self.block(format!("for (int i = 0; i < {mr}; ++i)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int j = 0; j < {nr}; ++j)"), |em| {
                if c.is_none() {
                    let (a0, b0) = (
                        part(&format!("{an}{ai0}"), 0),
                        part(&format!("{bn}{bj0}"), 0),
                    );
                    em.line(format!("{dn}[i][j] = {f}_zero({a0}, {b0});"));
                }
                em.line("#pragma unroll");
                em.block(format!("for (int kk = 0; kk < {kr}; ++kk)"), |em| {
                    for h in 0..plan.splits {
                        let (av, bv) = (
                            part(&format!("{an}{aik}"), h),
                            part(&format!("{bn}{bjk}"), h),
                        );
                        let skip = if c.is_none() && h == 0 {
                            "if (kk > 0) "
                        } else {
                            ""
                        };
                        em.line(format!("{skip}{f}({av}, {bv}, {dn}[i][j]);"));
                    }
                    Ok(())
                })
            })
        })
    }

    fn fill(&mut self, r: RegId, value: f32) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
        let n = self.map(r)?.elems_per_lane();
        let lit = match tile.dtype {
            DType::F32 => format!("{value:?}f"),
            DType::Bf16 => format!("(unsigned short){}", bf16_bits_rtne(value)),
            other => return Err(LowerError::Unsupported(format!("fill of a {other:?} tile"))),
        };
        let (gr, gc) = tile.base_grid();
        let lit = if lit.contains("inf") {
            format!("__builtin_inff() * {}", if value < 0.0 { -1 } else { 1 })
        } else {
            lit
        };
        self.line(format!("for (int i = 0; i < {gr}; ++i) for (int j = 0; j < {gc}; ++j) for (int s = 0; s < {n}; ++s) {name}[i][j][s] = {lit};"));
        Ok(())
    }

    fn wait(&mut self, queue: WaitQueue, count: WaitCount) {
        let recent = |issued: &[u32], n: u32| issued.iter().rev().take(n as usize).sum::<u32>();
        match (queue, count) {
            (WaitQueue::Async, c) => {
                let n = match c {
                    WaitCount::Outstanding(n) if !self.has_global_loads => {
                        recent(&self.async_issued, n).min(MAX_VMCNT)
                    }
                    _ => 0,
                };
                self.line(format!("s_waitcnt_vmcnt<{n}>();"));
            }
            (WaitQueue::Shared, c) => {
                let n = match c {
                    WaitCount::Outstanding(n) => recent(&self.lds_issued, n).min(MAX_LGKMCNT),
                    WaitCount::Auto => 0,
                };
                self.line(format!("s_waitcnt_lgkmcnt<{n}>();"));
            }
        }
    }
}

/// bf16 bits of `v`, round to nearest even (for fill constants).
fn bf16_bits_rtne(v: f32) -> u16 {
    if v.is_nan() {
        return 0x7fc0;
    }
    let u = v.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}
