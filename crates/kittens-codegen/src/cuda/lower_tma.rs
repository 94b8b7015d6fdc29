//! The TMA side of the sm_90a lowering (`lower.rs`): the producer's fills of ring slots, and the
//! accumulator store.
//!
//! The store is a lowering choice, not an IR change. The
//! IR stores each wave's 16×N fp32 slice to a bf16 tensor; on Hopper the four waves of a consumer
//! warpgroup write their slices, rounded to bf16, into one 64×N shared slab in the 128-byte swizzle, and
//! one thread hands the slab to TMA stores (64×64 boxes, clipped by TMA at the tensor's edges). The
//! warpgroup then starts its next tile while TMA writes C out: on the H100 this epilogue measured +9.6%
//! over direct predicated global stores at 8192³ (bench/NOTES.md, run 3).

use kittens_hw::dtype::DType;
use kittens_ir::{Expr, GlobalView, Kernel, Op, RegId, Rounding, Scope, SharedView};

use super::lower::{column_atoms, swizzle_bytes, unsupported, CudaLowerError, Emit, TmaMap};

/// Columns of one TMA store box: 64 bf16 = one 128-byte swizzled row.
const BOX_COLS: u32 = 64;
/// Rows of a warpgroup's slab: wgmma's M.
const WG_ROWS: u32 = 64;

/// Bytes of one consumer warpgroup's slab: 64 rows × N bf16 for the widest stored accumulator (0 when
/// the kernel stores nothing).
pub(super) fn slab_bytes(k: &Kernel) -> Result<u32, CudaLowerError> {
    let mut n = 0u32;
    for r in k.ops() {
        // Only row-major matrices are stored through the slab (`store`; others `store_direct`).
        if let Op::StoreGlobal { src, dst, .. } = r.op {
            if k.global(dst.tensor).dims.len() != 2 {
                continue;
            }
            n = n.max(k.reg(*src).shape().1);
        }
    }
    Ok(WG_ROWS * n * DType::Bf16.bytes())
}

impl Emit<'_> {
    /// Loads with one ring-slot index: those whose rings share barriers are one fill (one `empty`
    /// wait, `full` armed once with their summed bytes, one TMA each); the others one fill each.
    pub(super) fn fills(&mut self, loads: &[&Op]) -> Result<(), CudaLowerError> {
        let mut done = vec![false; loads.len()];
        for i in 0..loads.len() {
            if done[i] {
                continue;
            }
            let base = |op: &Op| match op {
                Op::LoadAsync { dst, .. } => self.bars[dst.buf.0 as usize],
                _ => u32::MAX,
            };
            let mut group = Vec::new();
            for j in i..loads.len() {
                if !done[j] && base(loads[j]) == base(loads[i]) {
                    done[j] = true;
                    group.push(loads[j]);
                }
            }
            self.fill(&group)?;
        }
        Ok(())
    }

    fn fill(&mut self, loads: &[&Op]) -> Result<(), CudaLowerError> {
        let (mut tmas, mut copies) = (Vec::new(), Vec::new());
        let (mut bytes, mut slot, mut names) = (0u32, String::new(), Vec::new());
        for op in loads {
            let Op::LoadAsync { dst, src, scope } = op else {
                return unsupported("a fill of something other than load_async");
            };
            if *scope == Scope::Wave {
                return unsupported("wave-scoped loads (one producer thread issues every TMA)");
            }
            if self.cp_rings[dst.buf.0 as usize] {
                copies.extend(self.cp_async_load(dst, src)?);
            } else {
                let (t, b) = self.tma_load(dst, src)?;
                tmas.extend(t);
                bytes += b;
            }
            slot = format!(
                "{}u + (u32)({})",
                self.bars[dst.buf.0 as usize],
                self.ex(&dst.index)
            );
            let (g, sh) = (self.k.global(src.tensor), self.k.shared_decl(dst.buf));
            names.push(format!("{} -> {}", g.name, sh.name));
        }
        self.line(format!("{{ // load_async {}", names.join(", ")));
        self.depth += 1;
        self.line(format!("const u32 slot = {slot};"));
        self.line("kt::mbarrier_wait(KT_EMPTY(slot), ((kt_ppar >> slot) & 1u) ^ 1u); // the previous fill was read");
        if !tmas.is_empty() {
            // With every producer thread here (`Emit::threaded`), thread 0 issues the TMA loads.
            if self.threaded {
                self.line("if (kt_ptid == 0) {");
                self.depth += 1;
            }
            self.line(format!(
                "kt::mbarrier_arrive_expect_tx(KT_FULL(slot), {bytes}u);"
            ));
            for t in tmas {
                self.line(t);
            }
            if self.threaded {
                self.depth -= 1;
                self.line("}");
            }
        }
        if !copies.is_empty() {
            for c in copies {
                self.line(c);
            }
            self.line("kt::cp_async_mbarrier_arrive_noinc(KT_FULL(slot)); // when this thread's copies land");
        }
        self.line("kt_ppar ^= 1u << slot; kt_filled |= 1u << slot;");
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The TMA boxes of a load filling a whole ring slot (one, or one per column atom of a tile wider
    /// than its swizzle: `lower::column_atoms`), and its bytes.
    fn tma_load(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
    ) -> Result<(Vec<String>, u32), CudaLowerError> {
        let s = self.k.shared_decl(dst.buf);
        let g = self.k.global(src.tensor);
        let (rd, cd) = (src.row_dim as usize, src.col_dim as usize);
        if g.dims.len() < 2 || g.dims.len() > 5 || rd == cd || g.strides[cd] != Expr::c(1) {
            return unsupported(format!(
                "load of `{}`: 2 to 5 dimensions with unit stride along the columns",
                g.name
            ));
        }
        if (dst.rows, dst.cols) != (s.tile.rows, s.tile.cols)
            || (src.rows, src.cols) != (dst.rows, dst.cols)
            || src.rows > 256
            || src.cols > 256
        {
            return unsupported(format!(
                "load into part of `{}` (one TMA box of at most 256 x 256 fills a whole ring slot)",
                s.name
            ));
        }
        let atoms = column_atoms(&s.tile);
        let (swizzle_bytes, box_cols) = match atoms {
            Some(a) => (128, src.cols / a),
            None => (
                swizzle_bytes(s.tile.swizzle, s.tile.cols * s.tile.dtype.bytes())?,
                src.cols,
            ),
        };
        let map = TmaMap {
            global: src.tensor.0,
            box_rows: src.rows,
            box_cols,
            swizzle_bytes,
            row_dim: src.row_dim,
            col_dim: src.col_dim,
        };
        let mi = match self.maps.iter().position(|m| *m == map) {
            Some(i) => i,
            None => {
                self.maps.push(map);
                self.maps.len() - 1
            }
        };
        let order = TmaMap::dim_order(g.dims.len(), src.row_dim, src.col_dim);
        let base = self.smem_addr(dst, "wave");
        let lines = (0..atoms.unwrap_or(1))
            .map(|j| {
                let coords: Vec<String> = order
                    .iter()
                    .map(|&i| {
                        let c = format!("(int)({})", self.ex(&src.origin[i]));
                        if i == cd && j > 0 {
                            format!("{c} + {}", j * box_cols)
                        } else {
                            c
                        }
                    })
                    .collect();
                // Atom `j` lies `j` atoms (rows × 128 bytes) into the slot.
                let at = if j > 0 {
                    format!("{base} + {}u", j * src.rows * 128)
                } else {
                    base.clone()
                };
                format!(
                    "kt::tma_load_{}d({at}, &tma{mi}, KT_FULL(slot), {});",
                    g.dims.len(),
                    coords.join(", ")
                )
            })
            .collect();
        Ok((lines, s.tile.bytes()))
    }

    /// Stores the warpgroup's 64×N accumulator (the four waves' 16-row slices) through the slab.
    pub(super) fn store(
        &mut self,
        dst: &GlobalView,
        src: RegId,
        rounding: Rounding,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        let (acc, _) = self.acc(src);
        let n = self.k.reg(src).shape().1;
        if rounding != Rounding::Rtne
            || (dst.rows, dst.cols) != (16, n)
            || !n.is_multiple_of(BOX_COLS)
        {
            return unsupported(format!(
                "store of {}x{} with {rounding:?} (16 x a multiple of 64, RTNE)",
                dst.rows, dst.cols
            ));
        }
        if g.dtype != DType::Bf16 {
            return unsupported(format!(
                "store to `{}` of {:?} (the TMA-store epilogue writes bf16)",
                g.name, g.dtype
            ));
        }
        if g.dims.len() != 2 || dst.row_dim != 0 || dst.col_dim != 1 || g.strides[1] != Expr::c(1) {
            return unsupported(format!("store to `{}`: only row-major 2-d tensors", g.name));
        }
        self.check_store_slices(dst)?;
        let map = TmaMap {
            global: dst.tensor.0,
            box_rows: WG_ROWS,
            box_cols: BOX_COLS,
            swizzle_bytes: 128,
            row_dim: 0,
            col_dim: 1,
        };
        match self.store_map {
            Some(m) if m != map => return unsupported("stores to two different tensors"),
            _ => self.store_map = Some(map),
        }
        let producers = self.producers;
        let (slab, box_bytes) = (self.slab, WG_ROWS * 128);
        let l = |e: &mut Self, s: &str| e.line(s);
        self.line(format!(
            "{{ // store {} -> {} through a swizzled shared slab and TMA",
            self.k.reg(src).name,
            g.name
        ));
        self.depth += 1;
        self.line(format!(
            "const u32 slab = kt_slabs + (threadIdx.x / 128u - {producers}u) * {slab}u, w = (threadIdx.x / 32u) % 4u, l = kt_lane;"
        ));
        self.line(format!(
            "const int r0 = {}, c0 = {}; // the warpgroup's first row and column",
            self.ex_with(&dst.origin[0], "kt_wave0"),
            self.ex_with(&dst.origin[1], "kt_wave0")
        ));
        l(self, "if (threadIdx.x % 128 == 0) kt::tma_store_wait_read<0>(); // the previous tile's store has read the slab");
        l(self, super::lower::WG_BARRIER);
        // D fragment: rows 16w + l/4 (+8), columns 8i + 2(l%4) (+1). In the 128-byte swizzle
        // (`kt::swizzle128`) the row's 16-byte chunk i%8 moves to chunk (i%8) ^ (row%8), and row%8
        // is l/4 for every fragment row: the address is a per-thread base plus constants and one of
        // eight XORed chunk offsets, so the compiler keeps 8 offsets live, not one address per store
        // (it hoisted all of them out of the tile loop, 48 registers at 192 columns).
        l(
            self,
            "const u32 sw = l / 4u, base = slab + (w * 16u + l / 4u) * 128u + (l % 4u) * 4u;",
        );
        l(self, "#pragma unroll");
        self.line(format!("for (u32 i = 0; i < {}u; ++i) {{", n / 8));
        l(self, "#pragma unroll");
        l(self, "    for (u32 h = 0; h < 2; ++h) {");
        self.line(format!(
            "        const u32 off = (i / 8u) * {box_bytes}u + h * 1024u + (((i % 8u) ^ sw) << 4);"
        ));
        self.line(format!(
            "        kt::st_shared_b32(base + off, kt::pack_bf16x2({acc}[4 * i + 2 * h], {acc}[4 * i + 2 * h + 1]));"
        ));
        l(self, "    }");
        l(self, "}");
        l(
            self,
            "kt::fence_proxy_async(); // generic-proxy writes before the async-proxy (TMA) read",
        );
        l(self, super::lower::WG_BARRIER);
        l(self, "if (threadIdx.x % 128 == 0) {");
        let mi = format!("tma{}", self.maps.len()); // pushed after the loads' maps
        self.line(format!("    for (u32 j = 0; j < {}u; ++j)", n / BOX_COLS));
        self.line(format!(
            "        kt::tma_store_2d(&{mi}, slab + j * {box_bytes}u, c0 + (int)(j * {BOX_COLS}u), r0);"
        ));
        l(self, "    kt::tma_store_commit();");
        l(self, "}");
        self.depth -= 1;
        l(self, "}");
        Ok(())
    }

    /// The four waves of a warpgroup store consecutive 16-row slices at the same columns (evaluated at
    /// block and loop indices 0), so they form one 64-row box.
    fn check_store_slices(&self, dst: &GlobalView) -> Result<(), CudaLowerError> {
        let at = |e: &Expr, wave: u32| self.at_origin(e, wave);
        for w0 in (4 * self.producers..self.k.waves).step_by(4) {
            for i in 0..4u32 {
                let ok = at(&dst.origin[0], w0 + i)
                    .zip(at(&dst.origin[0], w0))
                    .is_some_and(|(r, r0)| r == r0 + 16 * i as i64)
                    && at(&dst.origin[1], w0 + i) == at(&dst.origin[1], w0);
                if !ok {
                    return unsupported("a store whose per-wave slices are not one 64-row box");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The slab address the store emits equals `swizzle128` of the fragment's plain offset for every
    /// lane, wave, fragment column block and row half (`kt::swizzle128`: `off ^ (((off >> 7) & 7) << 4)`).
    #[test]
    fn xor_form_is_the_128_byte_swizzle() {
        let box_bytes = super::WG_ROWS * 128;
        let swizzle128 = |off: u32| off ^ (((off >> 7) & 7) << 4);
        for w in 0..4u32 {
            for l in 0..32u32 {
                let (sw, base) = (l / 4, (w * 16 + l / 4) * 128 + (l % 4) * 4);
                for i in 0..32u32 {
                    for h in 0..2u32 {
                        let (row, col) = (w * 16 + l / 4 + 8 * h, i * 8 + (l % 4) * 2);
                        let plain = (col / 64) * box_bytes + row * 128 + (col % 64) * 2;
                        let xor = base + (i / 8) * box_bytes + h * 1024 + (((i % 8) ^ sw) << 4);
                        assert_eq!(swizzle128(plain), xor, "w {w} l {l} i {i} h {h}");
                    }
                }
            }
        }
    }
}
