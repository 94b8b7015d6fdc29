//! Lowering of single IR ops to prelude calls.
//!
//! - `LoadAsync` → `buffer_load_dword[x4] … lds` (HipKittens D.5): LDS receives each instruction's data
//!   contiguously (lane `l` at `M0 + l·width`), so the *global* address is swizzled instead — each lane
//!   fetches the logical element that belongs at its physical LDS byte (HipKittens §3.2.2, "swizzling on
//!   the HBM addresses"). The swizzles here are involutions, so the inverse is the swizzle itself
//!   (checked). 16-byte loads into LDS exist on gfx950 only.
//! - `LoadGlobal` → `buffer_load_dword[x2|x4]` to registers through the LLVM builtins (the compiler
//!   tracks the wait), out-of-range chunks reading zero past the resource's bound.
//! - `StoreGlobal` → per-element stores, masked. The three global-memory ops, their 64-bit addressing
//!   and their ragged edges are in [`super::global`].
//! - `LoadShared` / `StoreShared` → `ds_read_b64/b128`, `ds_write_b64/b128` per base tile: a row-layout
//!   lane holds consecutive elements of one row (HipKittens D.1).
//!   A tile whose lanes hold runs of a column (column-layout bf16, the transposed operand of
//!   `mma_atb`): `ds_read_b64_tr_b16` on gfx950 ([`super::lds_tr`]), one element read each on gfx942.
//! - `Mma` → the target's MFMA per (row, col, k) base-tile triple with tied accumulators; every form
//!   runs as `A·Bᵀ` on row views (a transposed operand through its transposed lane map); the
//!   zero-accumulator form starts a chain when `c` is absent.
//! - Register-only ops (maps, reductions, masks, transposes) are in [`super::regops`].
//! - `Wait` → `s_waitcnt vmcnt/lgkmcnt` with the IR's op counts turned into instruction counts.

use super::layout::{mfma_for_abt, LaneMap};
use super::lower::{base_tiles, reg_type, Emitter};
use super::LowerError;
use crate::cexpr::ident;
use kittens_hw::dtype::DType;
use kittens_ir::{
    MmaForm, MmaOperand, Op, RegId, SchedHint, Scope, SharedView, WaitCount, WaitQueue,
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

pub(super) fn is_involution(s: Swizzle, bytes: u32) -> bool {
    (0..bytes).all(|o| s.apply(s.apply(o)) == o)
}

impl Emitter<'_> {
    pub(super) fn op(&mut self, op: &Op) -> Result<(), LowerError> {
        self.op_body(op)?;
        self.place_pinned(op);
        Ok(())
    }

    fn op_body(&mut self, op: &Op) -> Result<(), LowerError> {
        match op {
            Op::LoadAsync { dst, src, scope } => self.load_async(dst, src, *scope),
            Op::LoadShared { dst, src } => self.lds_access(*dst, src, false),
            Op::StoreShared { dst, src, .. } => self.lds_access(*src, dst, true),
            Op::LoadGlobal { dst, src } if self.k.reg(*dst).vec().is_some() => {
                self.load_vec(*dst, src)
            }
            Op::LoadGlobal { dst, src } => self.load_global(*dst, src),
            Op::StoreGlobal { dst, src, .. } if self.k.reg(*src).vec().is_some() => {
                self.store_vec(dst, *src)
            }
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
            Op::Alibi {
                dst,
                slope,
                row0,
                col0,
            } => self.alibi(*dst, *slope, row0, col0),
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
                    if *other == 0 {
                        // MFMAs alone: a group of them, in place.
                        self.line(format!("sched_group_barrier<SCHED_MFMA, {mma}, 0>();"));
                    } else {
                        self.line(format!("sched_group_barrier<SCHED_MFMA, {mma}, 0>(); sched_group_barrier<SCHED_VALU, {other}, 0>();"));
                    }
                }
                Ok(())
            }
            Op::Hint(SchedHint::MmaExp { mma, exp, groups }) => {
                for _ in 0..*groups {
                    self.line(format!("sched_group_barrier<SCHED_MFMA, {mma}, 0>(); sched_group_barrier<SCHED_TRANS, {exp}, 0>();"));
                }
                Ok(())
            }
            Op::Hint(SchedHint::MmaReads { mma, reads, groups }) => {
                for _ in 0..*groups {
                    self.line(format!("sched_group_barrier<SCHED_MFMA, {mma}, 0>(); sched_group_barrier<SCHED_DS_READ, {reads}, 0>();"));
                }
                Ok(())
            }
            Op::SetMaxRegs { regs } => {
                self.line(format!(
                    "// setmaxnreg({regs}): Hopper only, nothing on CDNA"
                ));
                Ok(())
            }
            // `global_atomic_add_f32` exists on CDNA3, but no AMD program accumulates across
            // blocks yet: refused rather than lowered untested.
            Op::AtomicAdd { .. } => Err(LowerError::Unsupported(format!(
                "atomic_add (reg→global) is not lowered for {}",
                self.arch.target()
            ))),
            other => Err(LowerError::Unsupported(format!(
                "op `{}` is not lowered to HIP yet",
                other.name()
            ))),
        }
    }

    /// True when the kernel's MFMAs are compiler-scheduled builtins (`Emitter::compiler_scheduled`).
    /// An LDS op of `instrs` instructions issued; `dests`: the registers its asm reads fill.
    pub(super) fn lds_op(&mut self, instrs: u32, dests: Vec<String>) {
        self.lds_issued.push(instrs);
        self.lds_ties.issued(dests);
    }

    pub(super) fn compiler_scheduled(&self) -> bool {
        self.compiler_scheduled
    }

    pub(super) fn map(&self, r: RegId) -> Result<LaneMap, LowerError> {
        self.maps
            .get(&r.0)
            .cloned()
            .ok_or_else(|| LowerError::Unsupported(format!("register {} has no lane map", r.0)))
    }

    /// Register tile `r`'s C name and shape; a vector where an op needs a tile is refused by name.
    pub(super) fn reg(&self, r: RegId) -> Result<(String, kittens_tile::RegTile), LowerError> {
        let d = self.k.reg(r);
        let t = d.tile().ok_or_else(|| {
            LowerError::Unsupported(format!("`{}` (a vector) where the op takes a tile", d.name))
        })?;
        Ok((format!("r_{}", ident(&d.name)), *t))
    }

    /// `ds_read` (`store == false`) or `ds_write` of a row-layout register tile to/from a shared view.
    fn lds_access(&mut self, r: RegId, view: &SharedView, store: bool) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
        let map = self.map(r)?;
        let sd = self.k.shared_decl(view.buf).clone();
        let e = sd.tile.dtype.bytes();
        let bytes = map.elems_per_lane() * e;
        let ty = reg_type(tile.dtype, map.elems_per_lane()).unwrap_or("float");
        let ok = tile.layout == Layout::Row
            && map.row_contiguous()
            && (bytes == 8 || bytes == 16)
            && tile.dtype == sd.tile.dtype;
        if !ok && tile.layout == Layout::Row && tile.dtype == sd.tile.dtype {
            if let Some(len) = map.row_runs(e) {
                return self.lds_access_runs(r, view, store, len);
            }
        }
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
                // The compiler-scheduled form where it exists (the 4-wave interleave's reads).
                let sched = if em.compiler_scheduled() && bytes == 16 {
                    "_sched"
                } else {
                    ""
                };
                em.line(format!(
                    "{name}{slot} = __builtin_bit_cast({ty}, ds_read_{bits}{sched}<{imm}>({addr}));"
                ));
            }
        };
        // One lane address per class of base tiles, each base tile at an immediate offset from its
        // class's address (MI300X-attn §2.1: the offset rides in the instruction, costing no register
        // and no address math); without a swizzle a single class (lds_addr).
        if let Some(super::lds_addr::Classes { reps, at }) =
            super::lds_addr::classes(&sd.tile, &tile, &map, view)
        {
            let base = format!(
                "lds_{} + (u32)({}) * {}",
                ident(&sd.name),
                self.ex(&view.index),
                sd.tile.bytes()
            );
            self.block("", |em| {
                for (k, (ri, rj)) in reps.iter().enumerate() {
                    let o = off
                        .replace("bi * ", &format!("{ri} * "))
                        .replace("bj * ", &format!("{rj} * "));
                    em.line(format!("const u32 x{k} = {o};"));
                    em.line(format!(
                        "const u32 o{k} = {};",
                        swizzle_c(sd.tile.swizzle, &format!("x{k}"))
                    ));
                }
                for bi in 0..gr {
                    for bj in 0..gc {
                        let (k, imm) = at[(bi * gc + bj) as usize];
                        access(em, imm, &format!("[{bi}][{bj}]"), &format!("{base} + o{k}"));
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
        let dests = if store || (self.compiler_scheduled() && bytes == 16) {
            vec![]
        } else {
            base_tiles(&name, gr, gc)
        };
        self.lds_op(gr * gc, dests);
        Ok(())
    }

    /// Shared→register load of a tile whose lanes do not hold runs of one row (a column-layout bf16
    /// tile: the transposed operand of `mma_atb`): one 16-bit (32-bit) LDS read per element at its
    /// swizzled address, through the compiler (which tracks the wait).
    fn lds_read_elements(&mut self, r: RegId, view: &SharedView) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
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
        let (rowb, bytes) = (sd.tile.row_bytes(), sd.tile.bytes());
        // Per slot, one lane address per class of base tiles, the rest immediates (lds_addr).
        let imms: Vec<u32> = (0..gr)
            .flat_map(|bi| (0..gc).map(move |bj| (bi, bj)))
            .map(|(bi, bj)| bi * tile.base.rows * rowb + bj * tile.base.cols * e)
            .collect();
        let per_slot: Option<Vec<_>> = (0..map.slots.len())
            .map(|s| {
                super::lds_addr::lane_offsets(&sd.tile, view, |l| map.at(l, s))
                    .map(|xs| super::lds_addr::group(sd.tile.swizzle, &xs, &imms))
            })
            .collect();
        if let Some(per_slot) = per_slot {
            return self.block("", |em| {
                for (s, ((ra, ca), (reps, at))) in map.slots.iter().zip(&per_slot).enumerate() {
                    for (k, &r) in reps.iter().enumerate() {
                        let (bi, bj) = (r as u32 / gc, r as u32 % gc);
                        let rr = format!("({row0} + {bi} * {} + {})", tile.base.rows, super::regops::affine_c(*ra, map.group));
                        let cc = format!("({col0} + {bj} * {} + {})", tile.base.cols, super::regops::affine_c(*ca, map.group));
                        em.line(format!("const u32 x{s}_{k} = (u32)({rr}) * {rowb} + (u32)({cc}) * {e};"));
                        em.line(format!("const u32 o{s}_{k} = {};", swizzle_c(sd.tile.swizzle, &format!("x{s}_{k}"))));
                    }
                    for (b, &(k, imm)) in at.iter().enumerate() {
                        let (bi, bj) = (b as u32 / gc, b as u32 % gc);
                        em.line(format!(
                            "{name}[{bi}][{bj}][{s}] = *({cty}*)({smem} + (u32)({idx}) * {bytes} + o{s}_{k} + {imm});"
                        ));
                    }
                }
                Ok(())
            });
        }
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
        let ((dn, dt), (an, at), (bn, bt)) = (self.reg(d)?, self.reg(*a)?, self.reg(*b)?);
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
        // An accumulator that holds the MFMA's result transposed takes it with the operands swapped.
        let Some(swap) = plan.d_transposed(&self.map(d)?, &amap, &bmap) else {
            return Err(LowerError::Layout(format!(
                "{} into `{dn}`: its lane map holds neither the result of {} nor its transpose",
                form.name(),
                plan.instr.name
            )));
        };
        let order = |a: String, b: String| {
            if swap {
                format!("{b}, {a}")
            } else {
                format!("{a}, {b}")
            }
        };
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
            let (cn, _) = self.reg(c)?;
            self.line(format!("for (int i = 0; i < {mr}; ++i) for (int j = 0; j < {nr}; ++j) {dn}[i][j] = {cn}[i][j];"));
        }
        if [&dt, &at, &bt].iter().any(|t| t.pin.is_some()) {
            if swap {
                return Err(LowerError::Unsupported(format!(
                    "{} into the pinned `{dn}` holding the MFMA's result transposed",
                    form.name()
                )));
            }
            let dmap = self.map(d)?;
            let ops = super::pinned::AbtOperands {
                d: (&dn, &dt, dmap.elems_per_lane()),
                a: (&an, &at, amap.elems_per_lane()),
                b: (&bn, &bt, bmap.elems_per_lane()),
                transposed: (ta, tb),
            };
            self.mma_pinned(&plan, &ops, c.is_none());
            return Ok(());
        }
        // The 4-wave interleave hands its MFMAs to the compiler's scheduler (`_sched`, the builtin):
        // one wave per SIMD has the whole unified register file, the compiler keeps the accumulators,
        // which outgrow the 256 VGPRs, in AGPRs, and places the MFMAs between the loads of their
        // region (HipKittens §3.3.2). Elsewhere the asm form keeps the written order.
        let acc = if self.compiler_scheduled() && sched_form(f) {
            "_sched"
        } else {
            ""
        };
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
                    em.line(format!("{dn}[i][j] = {f}_zero({});", order(a0, b0)));
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
                        em.line(format!("{skip}{f}{acc}({}, {dn}[i][j]);", order(av, bv)));
                    }
                    Ok(())
                })
            })
        })
    }

    fn fill(&mut self, r: RegId, value: f32) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r)?;
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
                let (n, ops) = match c {
                    WaitCount::Outstanding(n) => {
                        (recent(&self.lds_issued, n).min(MAX_LGKMCNT), n as usize)
                    }
                    WaitCount::Auto => (0, 0),
                };
                self.line(format!("s_waitcnt_lgkmcnt<{n}>();"));
                let (now, marker) = self.lds_ties.wait(ops);
                for tie in super::landed::tie_lines(&now) {
                    self.line(tie);
                }
                if let Some(m) = marker {
                    self.line(super::landed::marker(m));
                }
            }
        }
        if self.compiler_scheduled() {
            // Compiler-scheduled MFMAs read registers the waited-for loads fill: none may rise above
            // the wait (the loads are asm the compiler cannot see into).
            self.line("sched_barrier<SCHED_NONE>();");
        }
    }
}

/// The MFMAs the prelude has a compiler-scheduled (`_sched`, builtin) form of.
fn sched_form(f: &str) -> bool {
    matches!(
        f,
        "mfma_f32_16x16x16_bf16"
            | "mfma_f32_16x16x32_bf16"
            | "mfma_f32_16x16x32_fp8_fp8"
            | "mfma_f32_16x16x128_f8f6f4"
    )
}

/// bf16 bits of `v`, round to nearest even (for fill constants).
fn bf16_bits_rtne(v: f32) -> u16 {
    if v.is_nan() {
        return 0x7fc0;
    }
    let u = v.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}
