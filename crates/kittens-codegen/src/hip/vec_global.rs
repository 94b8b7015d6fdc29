//! Register vectors to and from global memory: one value per row (a row vector, down a `len × 1`
//! view) or per column (a column vector, along a `1 × len` view) of the tile the vector indexes — the
//! attention's log-sum-exp stored by a forward, and read back with `D` by the variable-length
//! backward, whose rows start at an offset read from `cu_seqlens` (docs/ir.md, `LoadGlobal` and
//! `StoreGlobal` of a vector).
//!
//! Entry `i·extent + coord(lane)` of a vector is the lane's slot `i` ([`super::reg_maps::VecMap`]):
//! every lane that holds an entry reads (writes) that entry itself, so the vector needs no exchange
//! between lanes. A load goes through a resource rebased at the view's origin (the addressing of
//! [`super::global`]), one 32-bit buffer load per slot, `OUT_OF_RANGE` — reading 0, without a branch —
//! for an entry past the vector, the tensor or its clip; a store is guarded element by element.

use super::global::ViewAddr;
use super::lower::Emitter;
use super::reg_maps::VecMap;
use super::LowerError;
use crate::cexpr::ident;
use kittens_hw::dtype::DType;
use kittens_ir::{Axis, GlobalView, RegId};

/// What a vector access needs in C: the register array, the tensor's pointer name, the lane's
/// coordinate inside its base tile, the entries one base tile covers, and the test that the view's
/// coordinates outside its rows and columns lie inside the tensor (uniform).
struct VecAccess {
    name: String,
    gname: String,
    vm: VecMap,
    coord: String,
    extent: u32,
    fixed: String,
}

impl Emitter<'_> {
    fn vec_access(&self, view: &GlobalView, r: RegId, what: &str) -> Result<VecAccess, LowerError> {
        let d = self.k.reg(r);
        let gd = self.k.global(view.tensor);
        let (Some(v), Some(vm)) = (d.vec(), self.vmaps.get(&r.0).cloned()) else {
            return Err(LowerError::Unsupported(format!(
                "{what} of `{}` (no vector map)",
                d.name
            )));
        };
        if v.dtype != DType::F32 || gd.dtype != DType::F32 {
            return Err(LowerError::Unsupported(format!(
                "{what} of the {:?} vector `{}` with the {:?} tensor `{}` (f32 and f32 only)",
                v.dtype, d.name, gd.dtype, gd.name
            )));
        }
        let (slot_r, slot_c) = vm.map.slots[0];
        let g = vm.map.group;
        let (coord, extent) = if v.axis == Axis::Rows {
            (super::regops::affine_c(slot_r, g), vm.base.rows)
        } else {
            (super::regops::affine_c(slot_c, g), vm.base.cols)
        };
        let fixed: Vec<String> = (0..gd.dims.len())
            .filter(|&i| i != view.row_dim as usize && i != view.col_dim as usize)
            .map(|i| {
                let o = self.ex(&view.origin[i]);
                format!("(({o}) >= 0) & (({o}) < ({}))", self.extent(view.tensor, i))
            })
            .collect();
        Ok(VecAccess {
            name: format!("r_{}", ident(&d.name)),
            gname: format!("g_{}", ident(&gd.name)),
            vm,
            coord,
            extent,
            fixed: if fixed.is_empty() {
                "true".to_string()
            } else {
                format!("({})", fixed.join(" & "))
            },
        })
    }

    /// The view element entry `e` of a vector along `axis` sits at.
    fn vec_addr(&self, view: &GlobalView, axis: Axis) -> ViewAddr {
        let (row, col) = if axis == Axis::Rows {
            ("e", "0")
        } else {
            ("0", "e")
        };
        self.view_addr(view, row, col)
    }

    /// An f32 register vector to an f32 tensor: a row vector down a `len × 1` view, a column vector
    /// along a `1 × len` one (the attention's log-sum-exp, one value per query). The lanes that hold
    /// the same entry store the same value, each guarded by the tensor's bounds.
    pub(super) fn store_vec(&mut self, dst: &GlobalView, r: RegId) -> Result<(), LowerError> {
        let a = self.vec_access(dst, r, "store")?;
        let axis = self.k.reg(r).vec().map_or(Axis::Rows, |v| v.axis);
        let (row, col) = if axis == Axis::Rows {
            ("e", "0")
        } else {
            ("0", "e")
        };
        self.line("#pragma unroll");
        self.block(
            format!("for (int i = 0; i < {}; ++i)", a.vm.per_lane()),
            |em| {
                em.line(format!("const int e = i * {} + {};", a.extent, a.coord));
                let (addr, inb) = em.element_index(dst, row, col, 1);
                em.line(format!(
                    "if (e < {} && {} && {inb}) {}[{addr}] = {}[i];",
                    a.vm.len, a.fixed, a.gname, a.name
                ));
                Ok(())
            },
        )
    }

    /// An f32 register vector from an f32 tensor, the mirror of [`Self::store_vec`]: entry `e` from
    /// view element `(e, 0)` (a row vector) or `(0, e)` (a column vector), 0 past the vector's length,
    /// the tensor's extent or its clip (a packed sequence's end) — every lane loads its own entries
    /// from a resource at the view's origin, whose offset may come from an index read.
    pub(super) fn load_vec(&mut self, r: RegId, src: &GlobalView) -> Result<(), LowerError> {
        let a = self.vec_access(src, r, "load")?;
        let axis = self.k.reg(r).vec().map_or(Axis::Rows, |v| v.axis);
        let origin = self.view_addr(src, "0", "0").origin_bytes;
        let tensor = self.tensor_args(src);
        let at = self.vec_addr(src, axis);
        self.block("", |em| {
            em.line(format!(
                "const buffer_rsrc_t rs = tile_rsrc_t({tensor}, {origin});"
            ));
            em.line("#pragma unroll");
            em.block(
                format!("for (int i = 0; i < {}; ++i)", a.vm.per_lane()),
                |em| {
                    em.line(format!("const int e = i * {} + {};", a.extent, a.coord));
                    em.line(format!(
                        "const u32 voff = ((e < {}) & {} & {}) ? {} * 4 : OUT_OF_RANGE;",
                        a.vm.len,
                        a.fixed,
                        at.inside(1),
                        at.rel
                    ));
                    em.line(format!(
                        "{}[i] = __builtin_bit_cast(float, buffer_load_b32(rs, voff));",
                        a.name
                    ));
                    Ok(())
                },
            )
        })
    }
}
