//! Grid remaps: which logical tile a launched block computes. Pure integer functions, so a kernel can
//! evaluate them per block and the cache model and the property tests can evaluate them on the host.
//!
//! The hardware hands blocks to XCDs round-robin by launch id (`id mod n_xcd`, HipKittens §3.4 "Cost
//! model"). A remap chooses the logical tile each launch id works on, so that blocks sharing an XCD's
//! L2 read the same rows of A and columns of B, and blocks running at the same time on different XCDs
//! overlap in the last-level cache.
//!
//! HipKittens Algorithm 1 is two steps, and both are exposed separately because kernels use them alone:
//! - [`xcd_chunk`] (lines 1–12): de-interleave launch ids so each XCD owns runs of `C` consecutive
//!   logical ids; the tail past the last full `n_xcd × C` cycle keeps its order (lines 5–6);
//! - [`group_m`] (lines 13–21, also HipKittens Fig. 21 lines 37–44): fold a linear id into vertical
//!   windows of height `W` rows that sweep across all columns, going down a column first.
//!
//! [`xcd_swizzle`] composes them; [`head_first`] is [`xcd_chunk`] with the chunk set to the query blocks
//! of one (batch, head) — MI300X-attn §4.1's attention swizzle.

use serde::{Deserialize, Serialize};

/// A launch id's place in HipKittens Algorithm 1 lines 1–12: `chunk ∘ interleave`.
///
/// Launch id `id` runs on XCD `id mod n_xcd` as that XCD's `id / n_xcd`-th block; the result gives the
/// XCD its `pos`-th id of chunk `chunk_idx`, so XCD `x` owns logical ids `[cycle·n·C + x·C, … + C)`.
/// Ids at or past `limit` (the largest multiple of `n_xcd × C` not above `blocks`) are returned as is:
/// there the XCDs would not receive whole chunks and the de-interleave would not be a bijection. The
/// paper writes the guard `xy > limit`; `>=` is equivalent (id `limit` maps to itself either way) and
/// matches how the prefix is described.
///
/// `n_xcd` or `chunk` of 0 is treated as 1 (no remap).
pub fn xcd_chunk(id: u64, blocks: u64, n_xcd: u64, chunk: u64) -> u64 {
    let (n, c) = (n_xcd.max(1), chunk.max(1));
    let per_cycle = n * c;
    let limit = (blocks / per_cycle) * per_cycle;
    if id >= limit {
        return id;
    }
    let xcd = id % n;
    let local = id / n;
    (local / c) * per_cycle + xcd * c + local % c
}

/// HipKittens Algorithm 1 lines 13–21 (the "group-M" swizzle of Fig. 21): logical id `xy` of a
/// `rows × cols` tile grid to `(row, col)`, walking windows of `window` rows; inside a window the row
/// index moves fastest, so `window` consecutive ids share one column of B and successive columns reuse
/// the same `window` rows of A. The last window may be shorter (line 18) — still a bijection.
///
/// `window` of 0 is treated as 1 (which is column-major inside one-row windows, i.e. row-major order).
pub fn group_m(xy: u64, rows: u64, cols: u64, window: u64) -> (u64, u64) {
    let w = window.max(1);
    let per_group = w * cols;
    let group = xy / per_group;
    let first_row = group * w;
    let win_h = rows.saturating_sub(first_row).min(w).max(1);
    let l = xy % per_group;
    (first_row + l % win_h, l / win_h)
}

/// HipKittens Algorithm 1 in full: launch id → `(row, col)` tile of a `rows × cols` grid.
pub fn xcd_swizzle(
    id: u64,
    rows: u64,
    cols: u64,
    n_xcd: u64,
    window: u64,
    chunk: u64,
) -> (u64, u64) {
    let xy = xcd_chunk(id, rows * cols, n_xcd, chunk);
    group_m(xy, rows, cols, window)
}

/// Row-major order, the default: launch id `id` computes tile `(id / cols, id mod cols)`.
pub fn row_major(id: u64, cols: u64) -> (u64, u64) {
    let c = cols.max(1);
    (id / c, id % c)
}

/// MI300X-attn §4.1's head-first chiplet swizzle for attention forward: launch id → `(batch, head, q_block)`
/// such that every q block of one (batch, head) runs on one XCD, keeping that head's K and V in one
/// L2. It is [`xcd_chunk`] with the chunk set to `q_blocks`, applied to the head-first linear order
/// `(batch · heads + head) · q_blocks + q_block`. The (batch, head) pairs past the last multiple of
/// `n_xcd` keep launch order (Algorithm 1's tail rule), so the map stays a bijection for every size.
pub fn head_first(id: u64, batch: u64, heads: u64, q_blocks: u64, n_xcd: u64) -> (u64, u64, u64) {
    let qb = q_blocks.max(1);
    let h = heads.max(1);
    let logical = xcd_chunk(id, batch * h * qb, n_xcd, qb);
    let bh = logical / qb;
    (bh / h, bh % h, logical % qb)
}

/// A grid order: which logical tile each launch id computes, as a value. Kernels carry one in their
/// grid (`kittens_ir::Grid`, lowered per target); the interpreter, the cache model and the pictures
/// evaluate it with the functions above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GridOrder {
    /// Launch id → coordinates in row-major order of the extents (last coordinate fastest).
    RowMajor,
    /// 2-d grid: XCD chunking then group-M windows (Algorithm 1 in full, [`xcd_swizzle`]).
    XcdSwizzle { xcds: u32, window: u32, chunk: u32 },
    /// 2-d grid: group-M windows only (Algorithm 1 lines 13–21, HipKittens Fig. 21; [`group_m`]).
    GroupM { window: u32 },
    /// 3-d grid `[batch, heads, q_blocks]`: every q block of one (batch, head) on one XCD
    /// ([`head_first`]).
    HeadFirst { xcds: u32 },
}

impl GridOrder {
    /// Grid dimensions the order needs; `None` when it takes any number (row-major).
    pub fn dims(&self) -> Option<usize> {
        match self {
            GridOrder::RowMajor => None,
            GridOrder::XcdSwizzle { .. } | GridOrder::GroupM { .. } => Some(2),
            GridOrder::HeadFirst { .. } => Some(3),
        }
    }

    /// The coordinates launch id `id` computes on a grid of `extents`; `None` when the order needs
    /// another number of dimensions ([`GridOrder::dims`]).
    pub fn coords(&self, id: u64, extents: &[u64]) -> Option<Vec<u64>> {
        if self.dims().is_some_and(|d| d != extents.len()) {
            return None;
        }
        let u = u64::from;
        Some(match *self {
            GridOrder::RowMajor => {
                let mut rest = id;
                let mut c = vec![0; extents.len()];
                for (i, e) in extents.iter().enumerate().rev() {
                    c[i] = rest % e.max(&1);
                    rest /= e.max(&1);
                }
                c
            }
            GridOrder::XcdSwizzle {
                xcds,
                window,
                chunk,
            } => {
                let (r, c) = xcd_swizzle(id, extents[0], extents[1], u(xcds), u(window), u(chunk));
                vec![r, c]
            }
            GridOrder::GroupM { window } => {
                let (r, c) = group_m(id, extents[0], extents[1], u(window));
                vec![r, c]
            }
            GridOrder::HeadFirst { xcds } => {
                let (b, h, q) = head_first(id, extents[0], extents[1], extents[2], u(xcds));
                vec![b, h, q]
            }
        })
    }

    /// The `(row, col)` tile that launch id `id` computes on a `rows × cols` grid; `None` for an order
    /// of another dimension.
    pub fn tile(&self, id: u64, rows: u64, cols: u64) -> Option<(u64, u64)> {
        match self.coords(id, &[rows, cols])?[..] {
            [r, c] => Some((r, c)),
            _ => None,
        }
    }

    /// Checks that this order's products on a `rows × cols` grid fit the `u64` arithmetic of
    /// [`GridOrder::tile`] (`rows · cols`, `window · cols`, `xcds · chunk`); the remaps themselves stay
    /// plain integer functions a kernel can evaluate, so the host checks once, here.
    pub fn check(&self, rows: u64, cols: u64) -> Result<(), crate::GridError> {
        use crate::mul64;
        mul64(rows, cols, "grid rows x columns")?;
        // The remaps read a window or chunk of 0 as 1; an order that says W0 or C0 but computes W1 or
        // C1 would be reported under a label it did not run, so it is refused here.
        let zero = match *self {
            GridOrder::GroupM { window } => window == 0,
            GridOrder::XcdSwizzle { window, chunk, .. } => window == 0 || chunk == 0,
            _ => false,
        };
        if zero {
            return Err(crate::GridError::Invalid(format!(
                "{}: the window W and the chunk C must be at least 1",
                self.label()
            )));
        }
        match *self {
            GridOrder::RowMajor | GridOrder::HeadFirst { .. } => {}
            GridOrder::GroupM { window } => {
                mul64(u64::from(window.max(1)), cols, "window x grid columns")?;
            }
            GridOrder::XcdSwizzle {
                xcds,
                window,
                chunk,
            } => {
                mul64(u64::from(window.max(1)), cols, "window x grid columns")?;
                mul64(
                    u64::from(xcds.max(1)),
                    u64::from(chunk.max(1)),
                    "XCDs x chunk",
                )?;
            }
        }
        Ok(())
    }

    /// Short label, as in HipKittens Table 4 ("Row-major", "XCD W5/C25").
    pub fn label(&self) -> String {
        match *self {
            GridOrder::RowMajor => "Row-major".to_string(),
            GridOrder::GroupM { window } => format!("Group-M W{window}"),
            GridOrder::XcdSwizzle { window, chunk, .. } => format!("XCD W{window}/C{chunk}"),
            GridOrder::HeadFirst { xcds } => format!("Head-first over {xcds} XCDs"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 1 lines 8–12 by hand for 8 XCDs, C = 2: launch ids 0..16 run on XCDs 0..7 twice; XCD 0
    /// (ids 0 and 8) must own logical 0 and 1, XCD 1 (ids 1 and 9) logical 2 and 3.
    #[test]
    fn chunk_gives_each_xcd_consecutive_ids() {
        let got: Vec<u64> = (0..16).map(|i| xcd_chunk(i, 16, 8, 2)).collect();
        for i in 0..16u64 {
            let xcd = i % 8;
            assert_eq!(got[i as usize] / 2, xcd, "id {i}");
        }
    }

    #[test]
    fn window_goes_down_first() {
        // 4 rows × 3 cols, W = 2: ids 0..6 cover rows 0–1, 6..12 rows 2–3.
        let seq: Vec<(u64, u64)> = (0..12).map(|i| group_m(i, 4, 3, 2)).collect();
        assert_eq!(&seq[..4], &[(0, 0), (1, 0), (0, 1), (1, 1)]);
        assert_eq!(seq[6], (2, 0));
    }

    /// The order as a value evaluates to the functions it names, and refuses grids of another rank.
    #[test]
    fn order_values_follow_their_functions() {
        let hf = GridOrder::HeadFirst { xcds: 8 };
        for id in 0..2 * 19 * 7 {
            let (b, h, q) = head_first(id, 2, 19, 7, 8);
            assert_eq!(hf.coords(id, &[2, 19, 7]), Some(vec![b, h, q]));
        }
        // Row-major over three extents: the last coordinate fastest.
        assert_eq!(
            GridOrder::RowMajor.coords(23, &[2, 3, 4]),
            Some(vec![1, 2, 3])
        );
        let xs = GridOrder::XcdSwizzle {
            xcds: 8,
            window: 5,
            chunk: 25,
        };
        assert_eq!(xs.tile(77, 48, 36), Some(xcd_swizzle(77, 48, 36, 8, 5, 25)));
        assert_eq!(hf.tile(0, 4, 4), None);
        assert_eq!(xs.coords(0, &[2, 3, 4]), None);
    }
}
