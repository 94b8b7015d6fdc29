//! How a strip register is spread over the lanes of a wave (see the module documentation of
//! [`super`]): tiles in chunks dealt round robin, row vectors in every lane, and column vectors either
//! like a one-row tile or — when the vector has fewer chunks than the wave has lanes — once per group
//! of lanes, so that a tile whose rows are narrower than a wave finds its column's entries in its own
//! lane.

use kittens_ir::{Axis, Kernel, RegId, RegKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dist {
    /// A tile (or column vector as a one-row tile): `rows × cols` in chunks of `v` over `lanes`.
    Strip {
        rows: u32,
        cols: u32,
        v: u32,
        lanes: u32,
    },
    /// A column vector of `cols / v` chunks, fewer than the lanes and dividing them: lane `l` holds
    /// chunk `l % (cols / v)` in its one slot. A tile row of `cols` columns has the same chunk
    /// count, so in every slot of such a tile lane `l` holds columns of that same chunk: a column
    /// broadcast reads the lane's own slot, with no exchange between lanes.
    Grouped { cols: u32, v: u32 },
    /// A row vector of `len`, in every lane.
    Replicated { len: u32 },
}

impl Dist {
    pub(super) fn lanes(self) -> u32 {
        match self {
            Dist::Strip { lanes, .. } => lanes,
            Dist::Grouped { .. } | Dist::Replicated { .. } => 1,
        }
    }
    pub(super) fn chunks_per_row(self) -> u32 {
        match self {
            Dist::Strip { cols, v, .. } | Dist::Grouped { cols, v } => cols / v,
            Dist::Replicated { .. } => 1,
        }
    }
    pub(super) fn chunks(self) -> u32 {
        match self {
            Dist::Strip { rows, .. } => rows * self.chunks_per_row(),
            Dist::Grouped { .. } => self.chunks_per_row(),
            Dist::Replicated { len } => len,
        }
    }
    pub(super) fn slots(self) -> u32 {
        match self {
            Dist::Strip { lanes, .. } => self.chunks().div_ceil(lanes),
            Dist::Grouped { .. } => 1,
            Dist::Replicated { len } => len,
        }
    }
    pub(super) fn v(self) -> u32 {
        match self {
            Dist::Strip { v, .. } | Dist::Grouped { v, .. } => v,
            Dist::Replicated { .. } => 1,
        }
    }
    /// Elements a lane holds.
    pub(super) fn len(self) -> u32 {
        self.slots() * self.v()
    }
    /// Whether every slot of every lane holds a chunk (else the last slot is partial).
    pub(super) fn full(self) -> bool {
        matches!(self, Dist::Replicated { .. } | Dist::Grouped { .. })
            || self.chunks().is_multiple_of(self.lanes())
    }
    /// Whether several lanes hold the same chunk (only the first group writes it to memory).
    pub(super) fn grouped(self) -> bool {
        matches!(self, Dist::Grouped { .. })
    }
}

/// Elements per chunk for rows of `cols`: 8, 4, 2 or 1, the largest dividing `cols` (16 bytes of bf16).
pub(super) fn chunk_of(cols: u32) -> u32 {
    [8, 4, 2, 1]
        .into_iter()
        .find(|v| cols.is_multiple_of(*v))
        .unwrap_or(1)
}

pub(super) fn dist(k: &Kernel, r: RegId, lanes: u32) -> Dist {
    match k.reg(r).kind {
        RegKind::Tile(t) => Dist::Strip {
            rows: t.rows,
            cols: t.cols,
            v: chunk_of(t.cols),
            lanes,
        },
        RegKind::Vec(v) if v.axis == Axis::Cols => {
            let c = chunk_of(v.len);
            let n = v.len / c;
            if n < lanes && lanes.is_multiple_of(n) {
                Dist::Grouped { cols: v.len, v: c }
            } else {
                Dist::Strip {
                    rows: 1,
                    cols: v.len,
                    v: c,
                    lanes,
                }
            }
        }
        RegKind::Vec(v) => Dist::Replicated { len: v.len },
    }
}
