//! Swizzled LDS addresses with the lane part hoisted (HipKittens precomputes swizzled offsets).
//!
//! Every swizzle of the family (`kittens_tile::Swizzle`) is linear over GF(2): `S(x ^ y) = S(x) ^ S(y)`.
//! A lane's byte offset inside a shared tile is `x = lane_part + rest`, where `lane_part` is the lane's
//! position inside its base tile and `rest` the base tile's origin plus the view's origin. When the row
//! pitch, the base tile's rows and its row bytes are powers of two and the view starts on a base-tile
//! boundary, the two parts have disjoint bits, so `x = lane_part | rest` and
//! `S(x) = S(lane_part) ^ S(rest)`: the lane part is swizzled once per access (one VGPR), the rest is
//! wave-uniform (scalar arithmetic), and each base tile costs one `v_xor`.

use kittens_ir::{BinOp, Expr, SharedView};
use kittens_tile::{RegTile, SharedTile, Swizzle};

/// True when `e` is a multiple of `m` for every value of its free variables (a sufficient test).
pub(super) fn multiple_of(e: &Expr, m: i64) -> bool {
    match e {
        Expr::Const(v) => v % m == 0,
        Expr::Bin(BinOp::Mul, a, b) => multiple_of(a, m) || multiple_of(b, m),
        Expr::Bin(BinOp::Add | BinOp::Sub, a, b) => multiple_of(a, m) && multiple_of(b, m),
        _ => false,
    }
}

/// True when a lane's offset splits into disjoint lane and base-tile parts (module docs) for `tile`
/// read through `view` of the shared tile `st`.
pub(super) fn splits(st: &SharedTile, tile: &RegTile, view: &SharedView) -> bool {
    let e = st.dtype.bytes();
    let pow2 = |v: u32| v.is_power_of_two();
    pow2(st.row_bytes())
        && pow2(tile.base.rows)
        && pow2(tile.base.cols * e)
        && multiple_of(&view.row0, tile.base.rows as i64)
        && multiple_of(&view.col0, tile.base.cols as i64)
}

/// How one item is reached: its class's address plus an immediate byte offset.
pub(super) type Reach = (usize, u32);

/// Base tiles grouped by lane address: the representative `(bi, bj)` of each class, and how each base
/// tile (row-major) is reached.
pub(super) struct Classes {
    pub reps: Vec<(u32, u32)>,
    pub at: Vec<Reach>,
}

/// The byte offsets inside the shared tile of one lane position `(r, c)` (per lane) over every
/// placement the view can have (its origin a multiple of its own shape); `None` when the view's origin
/// is not provably such a multiple.
pub(super) fn lane_offsets(
    st: &SharedTile,
    view: &SharedView,
    at: impl Fn(u32) -> (u32, u32),
) -> Option<Vec<u32>> {
    if !multiple_of(&view.row0, view.rows as i64) || !multiple_of(&view.col0, view.cols as i64) {
        return None;
    }
    let (e, rowb) = (st.dtype.bytes(), st.row_bytes());
    let mut xs = Vec::new();
    for pr in (0..st.rows).step_by(view.rows as usize) {
        for pc in (0..st.cols).step_by(view.cols as usize) {
            for l in 0..64 {
                let (r, c) = at(l);
                xs.push((pr + r) * rowb + (pc + c) * e);
            }
        }
    }
    Some(xs)
}

/// Classes of immediates `imms` (non-decreasing) over lane offsets `xs`: item `b` is reached as
/// `S(x + imms[rep]) + (imms[b] - imms[rep])` when that equals `S(x + imms[b])` for every `x` (checked on
/// each). Returns the representative item of each class and, per item, its class and immediate.
pub(super) fn group(s: Swizzle, xs: &[u32], imms: &[u32]) -> (Vec<usize>, Vec<Reach>) {
    let (mut reps, mut out) = (Vec::<usize>::new(), Vec::new());
    for (b, &ib) in imms.iter().enumerate() {
        let found = reps.iter().position(|&r| {
            let ir = imms[r];
            ib >= ir
                && ib - ir <= u16::MAX as u32
                && xs
                    .iter()
                    .all(|&x| s.apply(x + ib) == s.apply(x + ir) + (ib - ir))
        });
        match found {
            Some(k) => out.push((k, ib - imms[reps[k]])),
            None => {
                reps.push(b);
                out.push((reps.len() - 1, 0));
            }
        }
    }
    (reps, out)
}

/// Lane addresses for `tile` read through `view` with lane map `map`: base tile `(bi, bj)` is reached
/// as `address[class] + imm`, returned per base tile in row-major order with the representative
/// `(bi, bj)` of each class. Base tile `b` joins the class of an earlier one `r` when
/// `S(x + imm_b) = S(x + imm_r) + (imm_b - imm_r)` for every lane and every placement the view can have
/// (its origin a multiple of its own shape), checked on every such value; `None` when the view's origin
/// is not provably such a multiple.
pub(super) fn classes(
    st: &SharedTile,
    tile: &RegTile,
    map: &super::layout::LaneMap,
    view: &SharedView,
) -> Option<Classes> {
    let xs = lane_offsets(st, view, |l| map.at(l, 0))?;
    let (e, rowb) = (st.dtype.bytes(), st.row_bytes());
    let (gr, gc) = tile.base_grid();
    let tiles: Vec<(u32, u32)> = (0..gr)
        .flat_map(|bi| (0..gc).map(move |bj| (bi, bj)))
        .collect();
    let imms: Vec<u32> = tiles
        .iter()
        .map(|&(bi, bj)| bi * tile.base.rows * rowb + bj * tile.base.cols * e)
        .collect();
    let (reps, out) = group(st.swizzle, &xs, &imms);
    Some(Classes {
        reps: reps.into_iter().map(|r| tiles[r]).collect(),
        at: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item reached through its class is at its swizzled address, for every lane offset; the
    /// GEMM's 128-byte-row tile under the 128-byte XOR needs one address per 64-byte column half.
    #[test]
    fn grouped_addresses_are_exact() {
        let s = Swizzle::NV_128B;
        // Lanes of a 16x32 bf16 base tile in 128-byte rows: row l % 16, 16-byte chunk l / 16.
        let xs: Vec<u32> = (0..64).map(|l| (l % 16) * 128 + (l / 16) * 16).collect();
        let imms: Vec<u32> = (0..4)
            .flat_map(|bi| (0..2).map(move |bj| bi * 16 * 128 + bj * 64))
            .collect();
        let (reps, at) = group(s, &xs, &imms);
        assert_eq!(reps.len(), 2);
        for (b, &(k, imm)) in at.iter().enumerate() {
            for &x in &xs {
                assert_eq!(s.apply(x + imms[reps[k]]) + imm, s.apply(x + imms[b]));
            }
        }
        // Without a swizzle one address serves every base tile.
        assert_eq!(group(Swizzle::None, &xs, &imms).0.len(), 1);
    }
}
