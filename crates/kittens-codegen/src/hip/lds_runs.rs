//! Shared↔register accesses of row-layout tiles whose lanes hold several runs of one row: the fp8
//! 16×128 operand of `v_mfma_f32_16x16x128_f8f6f4`, where lane `l` holds K `16·(l/16) .. +16` and
//! `64 + 16·(l/16) .. +16` of row `l % 16` (FP8-tutorial §6). Each run is one `ds_read_b128` /
//! `ds_write_b128` (or `_b64` for 8-byte runs) at its own swizzled address, the runs joined into (or
//! taken from) the base tile's register vector with `__builtin_shufflevector`.

use super::lower::{reg_type, Emitter};
use super::ops::{keeps_granule_pub, swizzle_c_pub};
use super::LowerError;
use crate::cexpr::ident;
use kittens_ir::{RegId, SharedView};

impl Emitter<'_> {
    /// `ds_read` (`store == false`) or `ds_write` of register tile `r` through `view`, in runs of
    /// `len` slots (checked by `LaneMap::row_runs`).
    pub(super) fn lds_access_runs(
        &mut self,
        r: RegId,
        view: &SharedView,
        store: bool,
        len: usize,
    ) -> Result<(), LowerError> {
        let (name, tile) = self.reg(r);
        let map = self.map(r)?;
        let sd = self.k.shared_decl(view.buf).clone();
        let e = sd.tile.dtype.bytes();
        let bytes = len as u32 * e;
        let runs = map.slots.len() / len;
        if !keeps_granule_pub(sd.tile.swizzle, bytes, sd.tile.bytes())
            || !matches!(runs as u32 * bytes, 16 | 32)
        {
            return Err(LowerError::Unsupported(format!(
                "shared access of `{}` in {runs} runs of {bytes} bytes through `{}` (swizzle {:?})",
                self.k.reg(r).name,
                sd.name,
                sd.tile.swizzle
            )));
        }
        let Some(rty) = reg_type(tile.dtype, map.elems_per_lane()) else {
            return Err(LowerError::Unsupported(format!(
                "no register type for {} {:?} per lane",
                map.elems_per_lane(),
                tile.dtype
            )));
        };
        let (bits, words) = if bytes == 16 { ("b128", 4) } else { ("b64", 2) };
        let vty = if bytes == 16 { "u32x4" } else { "u32x2" };
        let whole = runs * words; // 4 or 8: the prelude's u32x4 / u32x8
        let g = map.group;
        let (gr, gc) = tile.base_grid();
        let (row0, col0) = (self.ex(&view.row0), self.ex(&view.col0));
        let smem = format!(
            "lds_{} + (u32)({}) * {}",
            ident(&sd.name),
            self.ex(&view.index),
            sd.tile.bytes()
        );
        self.line("#pragma unroll");
        self.block(format!("for (int bi = 0; bi < {gr}; ++bi)"), |em| {
            em.line("#pragma unroll");
            em.block(format!("for (int bj = 0; bj < {gc}; ++bj)"), |em| {
                em.line(format!(
                    "u32x{whole} w = {};",
                    if store {
                        format!("__builtin_bit_cast(u32x{whole}, {name}[bi][bj])")
                    } else {
                        "{}".into()
                    }
                ));
                for j in 0..runs {
                    let (row, col) = map.slots[j * len];
                    em.line(format!(
                        "{{ const u32 o = ((u32)({row0} + bi * {} + {} + {} * (lane % {g}) + {} * (lane / {g})) * {} + (u32)({col0} + bj * {} + {} + {} * (lane % {g}) + {} * (lane / {g})) * {e});",
                        tile.base.rows, row.base, row.per_idx, row.per_group, sd.tile.row_bytes(),
                        tile.base.cols, col.base, col.per_idx, col.per_group,
                    ));
                    let addr = format!("{smem} + {}", swizzle_c_pub(sd.tile.swizzle, "o"));
                    let lanes: Vec<String> = (0..words).map(|x| (j * words + x).to_string()).collect();
                    if store {
                        em.line(format!(
                            "  ds_write_{bits}<0>({addr}, {vty}{{{}}}); }}",
                            lanes.iter().map(|x| format!("w[{x}]")).collect::<Vec<_>>().join(", ")
                        ));
                    } else {
                        // The compiler-scheduled form where it exists (the 4-wave interleave's reads).
                        let sched = if em.compiler_scheduled() && bits == "b128" { "_sched" } else { "" };
                        em.line(format!("  const {vty} v = ds_read_{bits}{sched}<0>({addr});"));
                        for (x, l) in lanes.iter().enumerate() {
                            em.line(format!("  w[{l}] = v[{x}];"));
                        }
                        em.line("}");
                    }
                }
                if !store {
                    em.line(format!("{name}[bi][bj] = __builtin_bit_cast({rty}, w);"));
                }
                Ok(())
            })
        })?;
        let dests = if store || (self.compiler_scheduled() && bits == "b128") {
            vec![]
        } else {
            super::lower::base_tiles(&name, gr, gc)
        };
        self.lds_op(gr * gc * runs as u32, dests);
        Ok(())
    }
}
