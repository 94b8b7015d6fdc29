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
//! rows) straddles two lines, and TMA reads such boxes slowly (bench/NOTES.md); the threads' 16-byte
//! pieces need 16-byte alignment only.

use kittens_ir::{GlobalView, SharedView};
use kittens_tile::Swizzle;

use super::lower::{unsupported, CudaLowerError, Emit};

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
        // Pieces per row; thread `t` copies pieces `t`, `t + 128`, … of the slot in row order.
        let per_row = row_bytes / PIECE;
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
        l.push(format!(
            "    const long long kt_rows = {}, kt_cols = {}, kt_pitch = {}, kt_row0 = {}, kt_col0 = {};",
            ex(&g.dims[rd]),
            ex(&g.dims[cd]),
            ex(&g.strides[rd]),
            ex(&src.origin[rd]),
            ex(&src.origin[cd])
        ));
        // Not unrolled: unrolled, the compiler hoisted every piece's 64-bit offset out of the tile
        // loop and the producers' 40 registers spilled.
        l.push("    #pragma unroll 1".into());
        l.push(format!(
            "    for (u32 kt_i = kt_ptid; kt_i < {}u; kt_i += {THREADS}u) {{",
            s.tile.rows * per_row
        ));
        l.push(format!(
            "        const u32 kt_r = kt_i / {per_row}u, kt_c = kt_i % {per_row}u; // row, 16-byte piece"
        ));
        l.push(format!(
            "        const long long kt_row = kt_row0 + kt_r, kt_col = kt_col0 + (long long)kt_c * {per};"
        ));
        // Bytes of the piece inside the tensor: 16, fewer at the last column, 0 past the edges.
        l.push(format!(
            "        const u32 kt_n = kt_row < kt_rows && kt_col < kt_cols ? (u32)min(kt_cols - kt_col, {per}ll) * {elem}u : 0u;"
        ));
        // Atom c/8 of the slot (rows × 128 bytes each); piece c%8 of the row XOR the row within
        // the 8-row swizzle pattern. Locals start with `kt_`: no parameter name can shadow them.
        l.push(format!(
            "        kt::cp_async_16(kt_dst + (kt_c / 8u) * {}u + kt_r * 128u + (((kt_c % 8u) ^ (kt_r % 8u)) << 4), kt_n ? kt_base + (kt_row * kt_pitch + kt_col) * {elem}ll : kt_base, kt_n);",
            s.tile.rows * 128
        ));
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
            let per_row = row_bytes / PIECE;
            let total = rows * per_row;
            let mut hit = vec![0u8; (rows * row_bytes / PIECE) as usize];
            for t in 0..THREADS {
                let mut i = t;
                while i < total {
                    let (r, c) = (i / per_row, i % per_row);
                    let emitted = (c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4);
                    let tma = (c / 8) * rows * 128 + swizzle128(r * 128 + (c % 8) * PIECE);
                    assert_eq!(
                        emitted, tma,
                        "rows {rows} row bytes {row_bytes} r {r} c {c}"
                    );
                    hit[(emitted / PIECE) as usize] += 1;
                    i += THREADS;
                }
            }
            assert!(
                hit.iter().all(|&h| h == 1),
                "rows {rows} row bytes {row_bytes}"
            );
        }
    }
}
