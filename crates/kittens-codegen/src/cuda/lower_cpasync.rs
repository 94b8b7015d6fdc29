//! The `cp.async` fill of a ring slot (`kittens_ir::SlotFill::CpAsync`): the producer warpgroup's 128
//! threads copy the slot in 16-byte pieces (`cp.async.cg.shared.global`, PTX ISA §9.7.9.25.3) into
//! exactly the layout a TMA box writes (the 128-byte swizzle, column atoms of 64 bf16 one after the
//! other), so the consumers' `wgmma` descriptors do not change. A piece past the tensor's rows or
//! columns reads zero bytes (the src-size operand) and is zero-filled, as TMA's out-of-range
//! elements are. Each thread then hands its copies to the slot's `full` mbarrier with
//! `cp.async.mbarrier.arrive.noinc` (PTX ISA §9.7.13.15.13): the arrival comes when they land and
//! counts as one of the barrier's expected arrivals, so `full` expects 128 of them.
//!
//! Why: a TMA box row of 128 bytes from rows that start off 128-byte lines (K = 3000 bf16: 6000-byte
//! rows) straddles two lines, and TMA reads such boxes slowly (docs/performance.md); the threads' 16-byte
//! pieces need 16-byte alignment only.

use kittens_ir::{GlobalView, SharedView};
use kittens_tile::Swizzle;

use super::emit::{unsupported, CudaLowerError, Emit};

/// Threads of the producer warpgroup.
const THREADS: u32 = 128;
/// Bytes per `cp.async` piece (its largest size, `.cg` needs it).
const PIECE: u32 = 16;

impl Emit<'_> {
    /// The lines copying the global tile `src` into the whole ring slot `dst` with `cp.async`.
    pub(super) fn cp_async_load(
        &self,
        dst: &SharedView,
        src: &GlobalView,
    ) -> Result<Vec<String>, CudaLowerError> {
        let s = self.k.shared_decl(dst.buf);
        let g = self.k.global(src.tensor);
        let (rd, cd) = (src.row_dim as usize, src.col_dim as usize);
        let elem = s.tile.dtype.bytes();
        let row_bytes = s.tile.cols * elem;
        if g.dims.len() < 2 || rd == cd || g.strides[cd] != kittens_ir::Expr::c(1) {
            return unsupported(format!(
                "cp.async load of `{}`: 2 or more dimensions with unit stride along the columns",
                g.name
            ));
        }
        if (dst.rows, dst.cols) != (s.tile.rows, s.tile.cols)
            || (src.rows, src.cols) != (dst.rows, dst.cols)
        {
            return unsupported(format!(
                "cp.async load into part of `{}` (a fill writes a whole ring slot)",
                s.name
            ));
        }
        if s.tile.swizzle != Swizzle::NV_128B || !row_bytes.is_multiple_of(128) {
            return unsupported(format!(
                "cp.async load into `{}` ({} x {} {}): the 128-byte swizzle on rows of whole 128-byte atoms",
                s.name, s.tile.rows, s.tile.cols, s.tile.dtype
            ));
        }
        let ex = |e: &kittens_ir::Expr| format!("(long long)({})", self.ex(e));
        // The view's offset along every dimension but its rows and columns.
        let mut other: Vec<String> = (0..g.dims.len())
            .filter(|&i| i != rd && i != cd)
            .map(|i| format!("{} * {}", ex(&src.origin[i]), ex(&g.strides[i])))
            .collect();
        if other.is_empty() {
            other.push("0ll".into());
        }
        let name = crate::cexpr::ident(&g.name);
        let per = PIECE / elem;
        let mut l = Vec::new();
        l.push(format!(
            "{{ // cp.async {} -> {}: {THREADS} threads, {PIECE}-byte pieces in the 128-byte swizzle",
            g.name, s.name
        ));
        l.push(format!(
            "    const u32 kt_dst = {};",
            self.smem_addr(dst, "wave")
        ));
        l.push(format!(
            "    const unsigned char* kt_base = (const unsigned char*)g_{name} + ({}) * {elem}ll;",
            other.join(" + ")
        ));
        // The extents stop at a per-block clip (a varlen sequence's end): rows past it read zero.
        let (rows_end, cols_end) = (self.extent(g, rd), self.extent(g, cd));
        l.push(format!(
            "    const long long kt_rows = (long long)({rows_end}), kt_cols = (long long)({cols_end}), kt_pitch = {}, kt_row0 = {}, kt_col0 = {};",
            ex(&g.strides[rd]),
            ex(&src.origin[rd]),
            ex(&src.origin[cd])
        ));
        // Thread `t` copies 16-byte piece `t % 8` of rows `t / 8`, `t / 8 + 16`, … of every 64-column
        // atom: the same piece of a row, so its global address only steps by 16 rows (one pointer
        // and one stride per thread), and the same XOR of the swizzle (`row % 8` is `t / 8 % 8`).
        // Unrolled, so that each thread has all its copies in flight at once: H100 ncu of a rolled
        // loop (one piece per iteration, 64-bit offsets recomputed) found the producer stalled on
        // each copy's registers (L1TEX scoreboard) and the GEMM at 0.3 of the TMA kernel's speed.
        let (rows, atoms) = (s.tile.rows, row_bytes / 128);
        if rows % 16 != 0 {
            return unsupported(format!(
                "cp.async load into `{}`: {rows} rows, not a multiple of 16",
                s.name
            ));
        }
        l.push(
            "    const u32 kt_pc = kt_ptid % 8u, kt_pr = kt_ptid / 8u; // piece, first row".into(),
        );
        // Rows and columns of the tensor left from this thread's first row and piece, clamped to
        // 32 bits (a tile is far narrower): fewer live registers in the producers' 40.
        l.push(
            "    const int kt_rl = (int)max(min(kt_rows - kt_row0 - (long long)kt_pr, 1ll << 30), -1ll);"
                .into(),
        );
        l.push(format!(
            "    const int kt_cl = (int)max(min(kt_cols - kt_col0 - (long long)kt_pc * {per}, 1ll << 30), -1ll);"
        ));
        l.push(format!(
            "    const unsigned char* kt_p = kt_base + ((kt_row0 + kt_pr) * kt_pitch + kt_col0 + kt_pc * {per}) * {elem}ll;"
        ));
        l.push(format!(
            "    const long long kt_step = 16ll * kt_pitch * {elem}ll; // 16 rows, bytes"
        ));
        l.push(
            "    const u32 kt_d = kt_dst + kt_pr * 128u + ((kt_pc ^ (kt_pr % 8u)) << 4);".into(),
        );
        // Rows outermost with a running pointer (one 64-bit register, stepped by 16 rows), atoms
        // inside at constant offsets that fold into the instructions: unrolled with per-piece
        // offsets instead, ptxas kept them all live across the tile loop and the producers' 40
        // registers spilled.
        l.push("    const unsigned char* kt_q = kt_p;".into());
        l.push("    #pragma unroll".into());
        l.push(format!(
            "    for (u32 kt_j = 0; kt_j < {}u; ++kt_j) {{",
            rows / 16
        ));
        l.push("        const bool kt_in = (int)(kt_j * 16u) < kt_rl;".into());
        l.push("        #pragma unroll".into());
        l.push(format!(
            "        for (u32 kt_a = 0; kt_a < {atoms}u; ++kt_a) {{"
        ));
        // Bytes of the piece inside the tensor's columns: 16, fewer at the last column, 0 past it.
        l.push(format!(
            "            const int kt_ca = kt_cl - (int)(kt_a * {}u);",
            128 / elem
        ));
        l.push(format!(
            "            const u32 kt_n = kt_in && kt_ca > 0 ? (u32)min(kt_ca, {per}) * {elem}u : 0u;"
        ));
        l.push(format!(
            "            kt::cp_async_16(kt_d + kt_a * {}u + kt_j * 2048u, kt_n ? kt_q + kt_a * 128u : kt_base, kt_n);",
            rows * 128
        ));
        l.push("        }".into());
        l.push("        kt_q += kt_step;".into());
        l.push("    }".into());
        l.push("}".into());
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::{PIECE, THREADS};

    /// The emitted piece address (`kt_dst + (c / 8)·rows·128 + r·128 + ((c % 8) ^ (r % 8))·16`)
    /// is where TMA puts the same 16 bytes — column atom `c / 8` of `rows × 128` bytes, then
    /// `kt::swizzle128` of the atom-relative offset — and the 128 threads' pieces cover every
    /// chunk of the slot once, for the slots of the GEMM (K step 64 rows of A and B, B's K × N
    /// slots of 192 and 256 columns).
    #[test]
    fn pieces_land_where_tma_puts_them() {
        let swizzle128 = |off: u32| off ^ (((off >> 7) & 7) << 4);
        for (rows, row_bytes) in [
            (128u32, 128u32),
            (192, 128),
            (64, 384),
            (64, 512),
            (256, 128),
        ] {
            let atoms = row_bytes / 128;
            let mut hit = vec![0u8; (rows * row_bytes / PIECE) as usize];
            for t in 0..THREADS {
                // As emitted: piece `t % 8` of rows `t / 8 + 16 j` of every atom.
                let (c, r0) = (t % 8, t / 8);
                for a in 0..atoms {
                    for j in 0..rows / 16 {
                        let r = r0 + 16 * j;
                        let emitted = r0 * 128 + ((c ^ (r0 % 8)) << 4) + a * rows * 128 + j * 2048;
                        let tma = a * rows * 128 + swizzle128(r * 128 + c * PIECE);
                        assert_eq!(
                            emitted, tma,
                            "rows {rows} row bytes {row_bytes} r {r} c {c}"
                        );
                        hit[(emitted / PIECE) as usize] += 1;
                    }
                }
            }
            assert!(
                hit.iter().all(|&h| h == 1),
                "rows {rows} row bytes {row_bytes}"
            );
        }
    }
}
