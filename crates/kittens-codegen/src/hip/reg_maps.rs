//! Where register data sits across a wave's lanes, as the HIP lowering's emitter and the register
//! ops both need it before any op is emitted: the lane map of a register vector ([`VecMap`], from the
//! tile shape it indexes) and whether a copy between two tiles stays in its lanes ([`lane_local`]),
//! else the per-wave LDS scratch its remap takes ([`scratch_bytes`]).

use super::layout::LaneMap;
use super::LowerError;
use kittens_hw::dtype::DType;
use kittens_ir::{Arg, Axis, Kernel, MapFn, Op};
use kittens_tile::{BaseShape, RegTile};

/// Where a register vector lives: the lane map of the tile it indexes, that tile's base shape, and
/// whether it is indexed by rows or columns.
#[derive(Debug, Clone)]
pub struct VecMap {
    pub map: LaneMap,
    pub base: BaseShape,
    pub axis: Axis,
    pub len: u32,
}

impl VecMap {
    /// Entries per lane: one per base tile along the vector.
    pub fn per_lane(&self) -> u32 {
        self.len.div_ceil(self.base_extent())
    }

    /// The entries along the vector one base tile covers.
    fn base_extent(&self) -> u32 {
        if self.axis == Axis::Rows {
            self.base.rows
        } else {
            self.base.cols
        }
    }

    /// True when both vectors put every entry in the same lane and slot (entry `i·extent + coord`
    /// of every lane; [`vec_map`] admits only vectors whose lanes each hold one coordinate), whichever
    /// tile axis each indexes: the queries-per-row vector of an MFMA A operand and the
    /// queries-per-column vector of a 16×16 accumulator both hold entry `i` in the lanes with
    /// `lane % 16 = i % 16`, so a copy between them is lane-local.
    pub fn same_spread(&self, o: &VecMap) -> bool {
        self.len == o.len
            && self.base_extent() == o.base_extent()
            && (0..64).all(|l| self.coord(l) == o.coord(l))
    }

    /// The coordinate (row or column inside its base tile) `lane` holds, if all its slots agree.
    pub(super) fn coord(&self, lane: u32) -> Option<u32> {
        let pick = |s: usize| {
            let (r, c) = self.map.at(lane, s);
            if self.axis == Axis::Rows {
                r
            } else {
                c
            }
        };
        let v = pick(0);
        (0..self.map.slots.len()).all(|s| pick(s) == v).then_some(v)
    }
}

/// Bytes of per-wave LDS scratch an op needs (a remap between two different lane maps), or 0.
pub(super) fn scratch_bytes(
    k: &Kernel,
    maps: &std::collections::HashMap<u32, LaneMap>,
    op: &Op,
) -> u32 {
    let (dst, src, transpose) = match op {
        Op::Map {
            dst,
            f: MapFn::Copy,
            args,
            ..
        } => match args.as_slice() {
            [Arg::Reg(s)] => (*dst, *s, false),
            _ => return 0,
        },
        Op::SwapLayout { dst, src } => (*dst, *src, false),
        Op::Transpose { dst, src } => (*dst, *src, true),
        _ => return 0,
    };
    let (Some(dt), Some(st)) = (k.reg(dst).tile(), k.reg(src).tile()) else {
        return 0;
    };
    match (maps.get(&dst.0), maps.get(&src.0)) {
        (Some(dm), Some(sm)) if !lane_local(dt, dm, st, sm, transpose) => {
            dt.rows * dt.cols * dt.dtype.bytes()
        }
        _ => 0,
    }
}

/// True when every element of `dst` sits in the same lane and slot as its source element, base tile
/// `[i][j]` of `dst` coming from `[i][j]` of `src` (`[j][i]` when transposed).
pub(super) fn lane_local(
    dt: &RegTile,
    dm: &LaneMap,
    st: &RegTile,
    sm: &LaneMap,
    transpose: bool,
) -> bool {
    let (sm, sb, sg) = if transpose {
        let (r, c) = st.base_grid();
        (
            sm.transposed(),
            BaseShape::new(st.base.cols, st.base.rows),
            (c, r),
        )
    } else {
        (sm.clone(), st.base, st.base_grid())
    };
    dt.base == sb && dt.base_grid() == sg && dm.same_as(&sm)
}

/// The lane map of a register vector: that of the tile shape it indexes.
pub(super) fn vec_map(
    arch: kittens_hw::Arch,
    v: &kittens_ir::RegVec,
) -> Result<VecMap, LowerError> {
    let map = super::layout::lane_map(arch, v.dtype, v.layout, v.base)
        .or_else(|_| super::layout::lane_map(arch, DType::Bf16, v.layout, v.base))?;
    let vm = VecMap {
        map,
        base: v.base,
        axis: v.axis,
        len: v.len,
    };
    if (0..64).any(|l| vm.coord(l).is_none()) {
        return Err(LowerError::Layout(format!(
            "a {} vector over {} {:?} tiles: a lane holds several {}",
            if v.axis == Axis::Rows {
                "row"
            } else {
                "column"
            },
            v.base,
            v.layout,
            if v.axis == Axis::Rows {
                "rows"
            } else {
                "columns"
            }
        )));
    }
    Ok(vm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_hw::Arch;
    use kittens_ir::RegVec;
    use kittens_tile::Layout;

    fn vec(axis: Axis, len: u32, layout: Layout, base: BaseShape, arch: Arch) -> VecMap {
        let v = RegVec {
            dtype: DType::F32,
            len,
            axis,
            layout,
            base,
        };
        vec_map(arch, &v).unwrap()
    }

    /// The per-row vector of a row-layout (A operand) tile and the per-column vector of a 16×16
    /// accumulator spread their entries alike on both CDNA generations (a copy between them is
    /// lane-local); vectors of other lengths do not.
    #[test]
    fn rows_of_an_operand_match_columns_of_an_accumulator() {
        for arch in [Arch::Cdna3, Arch::Cdna4] {
            let rows = vec(Axis::Rows, 32, Layout::Row, BaseShape::S16X32, arch);
            let cols = vec(Axis::Cols, 32, Layout::Col, BaseShape::S16X16, arch);
            assert!(
                rows.same_spread(&cols) && cols.same_spread(&rows),
                "{arch:?}"
            );
            let short = vec(Axis::Cols, 16, Layout::Col, BaseShape::S16X16, arch);
            assert!(!rows.same_spread(&short), "{arch:?}");
        }
    }
}
