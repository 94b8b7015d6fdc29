//! Column-layout shared→register loads on gfx950 through `ds_read_b64_tr_b16` (HipKittens D.1; CDNA4 ISA
//! §11.4; the lane arithmetic `kittens_tile::access` documents): in each group of 16 lanes, lane `i` reads
//! 8 bytes — 4 consecutive elements of row `k0 + i/4`, the columns that lanes `4·(i%4) .. +4` hold — and
//! the hardware hands element `q` of them to lane `4·(i%4) + q`, as that lane's slot `i/4`. So one
//! instruction fills 4 slots of every lane when, per group, each lane's 4 slots are rows `k0 .. k0+4` of
//! one column and the 4 lanes of a quad hold consecutive columns; the check below verifies exactly that
//! on the tile's lane map. Issued through the compiler builtin, so the compiler tracks `lgkmcnt`.

use super::layout::{Affine, LaneMap};
use super::lower::Emitter;
use super::LowerError;
use crate::cexpr::ident;
use kittens_ir::{RegId, SharedView};

/// `base + per_idx·(L % g) + per_group·(L / g)` as C for a lane expression `L`.
fn affine_at(a: Affine, g: u32, lane: &str) -> String {
    format!(
        "({} + {} * (int)(({lane}) % {g}) + {} * (int)(({lane}) / {g}))",
        a.base, a.per_idx, a.per_group
    )
}

/// True when slots `4h .. 4h+4` of `map` are what one `ds_read_b64_tr_b16` delivers.
pub(super) fn tr_b16_fits(map: &LaneMap, h: usize) -> bool {
    (0..64u32).step_by(16).all(|g0| {
        let (k0, _) = map.at(g0, 4 * h);
        (0..16).all(|j| {
            let (_, n) = map.at(g0 + j, 4 * h);
            let quad0 = map.at(g0 + j - j % 4, 4 * h).1;
            n == quad0 + j % 4 && (0..4).all(|q| map.at(g0 + j, 4 * h + q) == (k0 + q as u32, n))
        })
    })
}

impl Emitter<'_> {
    /// `ds_read_b64_tr_b16` loads of a 16-bit tile whose every 4-slot run [`tr_b16_fits`]; `false` when
    /// it does not apply (the caller falls back to element reads).
    pub(super) fn lds_read_tr_b16(
        &mut self,
        r: RegId,
        view: &SharedView,
    ) -> Result<bool, LowerError> {
        let d = self.k.reg(r);
        let (name, tile) = (format!("r_{}", ident(&d.name)), *d.tile().expect("a tile"));
        let map = self.maps.get(&r.0).cloned().expect("tiles have maps");
        let sd = self.k.shared_decl(view.buf).clone();
        let epl = map.elems_per_lane() as usize;
        let fits = self.arch == kittens_hw::Arch::Cdna4
            && sd.tile.dtype.bytes() == 2
            && tile.dtype == sd.tile.dtype
            && epl.is_multiple_of(4)
            && sd.tile.row_bytes().is_multiple_of(8)
            && super::ops::keeps_granule_pub(sd.tile.swizzle, 8, sd.tile.bytes())
            && (0..epl / 4).all(|h| tr_b16_fits(&map, h));
        if !fits {
            return Ok(false);
        }
        let (gr, gc) = tile.base_grid();
        let (row0, col0, idx) = (
            self.ex(&view.row0),
            self.ex(&view.col0),
            self.ex(&view.index),
        );
        let smem = format!("smem_{}", ident(&sd.name));
        let split = super::lds_addr::splits(&sd.tile, &tile, view);
        self.line(format!(
            "// load (shared->reg) `{name}`: {} x ds_read_b64_tr_b16 per base tile",
            epl / 4
        ));
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                for h in 0..epl / 4 {
                    let (ra, _) = map.slots[4 * h];
                    let (_, ca) = map.slots[4 * h];
                    if split {
                        // The lane's part and the base tile's uniform part, swizzled apart (lds_addr).
                        let lx = format!(
                            "(u32)({} + (int)(lane % 16) / 4) * {} + (u32){} * 2",
                            affine_at(ra, map.group, "lane"),
                            sd.tile.row_bytes(),
                            affine_at(ca, map.group, "(lane & ~15u) + 4 * (lane & 3u)")
                        );
                        let rx = format!(
                            "(u32)({row0} + bi * {}) * {} + (u32)({col0} + bj * {}) * 2",
                            tile.base.rows,
                            sd.tile.row_bytes(),
                            tile.base.cols
                        );
                        em.line(format!(
                            "{{ const u32 lx = {lx}; const u32 rx = {rx}; const b16x4 t = ds_read_tr_b16({smem} + (u32)({idx}) * {} + ({} ^ {}));",
                            sd.tile.bytes(),
                            super::ops::swizzle_c_pub(sd.tile.swizzle, "lx"),
                            super::ops::swizzle_c_pub(sd.tile.swizzle, "rx")
                        ));
                        em.line(format!(
                            "  for (int q = 0; q < 4; ++q) {name}[bi][bj][{} + q] = t[q]; }}",
                            4 * h
                        ));
                        continue;
                    }
                    let rr = format!(
                        "({row0} + bi * {} + {} + (int)(lane % 16) / 4)",
                        tile.base.rows,
                        affine_at(ra, map.group, "lane")
                    );
                    let cc = format!(
                        "({col0} + bj * {} + {})",
                        tile.base.cols,
                        affine_at(ca, map.group, "(lane & ~15u) + 4 * (lane & 3u)")
                    );
                    em.line(format!(
                        "{{ const u32 o = (u32)({rr}) * {} + (u32)({cc}) * 2; const b16x4 t = ds_read_tr_b16({smem} + (u32)({idx}) * {} + {});",
                        sd.tile.row_bytes(),
                        sd.tile.bytes(),
                        super::ops::swizzle_c_pub(sd.tile.swizzle, "o")
                    ));
                    em.line(format!(
                        "  for (int q = 0; q < 4; ++q) {name}[bi][bj][{} + q] = t[q]; }}",
                        4 * h
                    ));
                }
                Ok(())
            })
        })?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hip::layout::lane_map;
    use kittens_hw::{dtype::DType, lds::DsInstr, Arch};
    use kittens_tile::{access::access_pattern, BaseShape, Layout, RegTile, SharedTile};
    use std::collections::BTreeSet;

    /// The byte address every lane gives each `ds_read_b64_tr_b16` of attention's V tile (32 keys × 128,
    /// column layout, the default-swizzled 32 × 128 shared tile) is the one `kittens_tile::access`
    /// derives on its own from the same instruction model (HipKittens D.1).
    #[test]
    fn tr_b16_addresses_match_the_access_model() {
        let st = SharedTile::new(DType::Bf16, 32, 128).unwrap();
        let rt = RegTile::new(DType::Bf16, 32, 128, Layout::Col, BaseShape::S32X16).unwrap();
        let map = lane_map(Arch::Cdna4, DType::Bf16, Layout::Col, BaseShape::S32X16).unwrap();
        let halves = map.elems_per_lane() as usize / 4;
        assert!((0..halves).all(|h| tr_b16_fits(&map, h)));
        let (gr, gc) = rt.base_grid();
        let mut mine = BTreeSet::new();
        for (bi, bj, h, l) in (0..gr).flat_map(|bi| {
            (0..gc).flat_map(move |bj| {
                (0..halves).flat_map(move |h| (0..64).map(move |l| (bi, bj, h, l)))
            })
        }) {
            let row = bi * 32 + map.at(l, 4 * h).0 + (l % 16) / 4;
            let col = bj * 16 + map.at((l & !15) + 4 * (l & 3), 4 * h).1;
            mine.insert((l, st.offset(row, col)));
        }
        let issues = access_pattern(&st, &rt, DsInstr::DsReadB64TrB16).unwrap();
        let theirs: BTreeSet<(u32, u32)> = issues
            .iter()
            .flat_map(|i| {
                i.addrs
                    .iter()
                    .enumerate()
                    .filter_map(|(l, a)| a.map(|a| (l as u32, a)))
            })
            .collect();
        assert_eq!(issues.len(), (gr * gc) as usize * halves);
        assert_eq!(mine, theirs);
    }
}
