//! The TMA side of the sm_90a lowering (`lower.rs`): the producer's fills of ring slots, and the
//! accumulator's store and reduction through a shared slab.
//!
//! The store is a lowering choice, not an IR change. The
//! IR stores each wave's 16×N fp32 slice to a bf16 tensor; on Hopper the four waves of a consumer
//! warpgroup write their slices, rounded to bf16, into one 64×N shared slab in the 128-byte swizzle, and
//! one thread hands the slab to TMA stores (64×64 boxes, clipped by TMA at the tensor's edges). The
//! warpgroup then starts its next tile while TMA writes C out: on the H100 this epilogue measured +9.6%
//! over direct predicated global stores at 8192³ (docs/performance.md). An `atomic_add` of f32
//! slices goes the same way, as f32 in 32-column boxes handed to TMA reductions (`reduce_add`).

use kittens_hw::dtype::DType;
use kittens_ir::{Expr, GlobalView, Kernel, Op, RegId, Rounding, Scope, SharedView};

use super::emit::{unsupported, CudaLowerError, Emit};
use crate::lowered::TmaMap;
use kittens_tile::Swizzle;

/// Rows of a warpgroup's slab: wgmma's M.
const WG_ROWS: u32 = 64;

/// What goes through a warpgroup's slab: a bf16 store (TMA store) or an f32 reduction (TMA
/// reduce-add). Either way a box row is 128 bytes, the 128-byte swizzle's span.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlabOp {
    Store,
    ReduceAdd,
}

impl SlabOp {
    fn dtype(self) -> DType {
        match self {
            SlabOp::Store => DType::Bf16,
            SlabOp::ReduceAdd => DType::F32,
        }
    }
    /// Columns of one box: one 128-byte swizzled row.
    fn box_cols(self) -> u32 {
        128 / self.dtype().bytes()
    }
    fn name(self) -> &'static str {
        match self {
            SlabOp::Store => "store",
            SlabOp::ReduceAdd => "atomic_add",
        }
    }
    /// The prelude's function, less its `_{rank}d` suffix.
    fn call(self) -> &'static str {
        match self {
            SlabOp::Store => "tma_store",
            SlabOp::ReduceAdd => "tma_reduce_add",
        }
    }
}

/// Whether an `atomic_add` of `src` into `dst` goes through the slab (TMA reductions): an f32 tensor
/// of 2 to 5 dimensions with unit column stride and a source as wide as a whole number of boxes.
/// Others use per-element `red.global.add` (`store_direct`).
pub(super) fn reduces_through_slab(k: &Kernel, dst: &GlobalView, src: RegId) -> bool {
    let g = k.global(dst.tensor);
    let n = k.reg(src).shape().1;
    g.dtype == DType::F32
        && (2..=5).contains(&g.dims.len())
        && g.strides[dst.col_dim as usize] == Expr::c(1)
        && dst.row_dim != dst.col_dim
        && n.is_multiple_of(SlabOp::ReduceAdd.box_cols())
}

/// Bytes of one consumer warpgroup's slab: 64 rows × N elements for the widest accumulator stored
/// (bf16) or reduced (f32) through it (0 when the kernel does neither).
pub(super) fn slab_bytes(k: &Kernel) -> Result<u32, CudaLowerError> {
    let mut bytes = 0u32;
    for r in k.ops() {
        let (src, op) = match r.op {
            // Only row-major matrices are stored through the slab (`store`; others `store_direct`).
            Op::StoreGlobal { src, dst, .. } if k.global(dst.tensor).dims.len() == 2 => {
                (*src, SlabOp::Store)
            }
            Op::AtomicAdd { src, dst } if reduces_through_slab(k, dst, *src) => {
                (*src, SlabOp::ReduceAdd)
            }
            _ => continue,
        };
        bytes = bytes.max(WG_ROWS * k.reg(src).shape().1 * op.dtype().bytes());
    }
    Ok(bytes)
}

/// Bytes of each consumer warpgroup's slab within `limit` bytes of shared memory per block, `other`
/// of which the ring, the barriers and the alignment take: the whole accumulator (`full`, from
/// [`slab_bytes`]) where it fits, else as many 64-row boxes of 64-byte rows (4 KiB, the smallest box
/// the store uses) as fit, through which the store goes box by box (`through_slab`). This lets a
/// ring deeper than fits beside the whole slab lower (cuBLAS's kernel at 3000³ on the H100 runs five
/// 64-deep stages of a 128×192 block); the GEMM's default rings still fit beside the whole slab, as
/// a fifth 128×192 stage measured 1-5% slower with the box-by-box store (docs/performance.md).
pub(super) fn fit_slab(full: u32, wgs: u32, other: u32, limit: u32) -> Result<u32, CudaLowerError> {
    let per_wg = limit.saturating_sub(other) / wgs.max(1);
    let box_bytes = WG_ROWS * 64;
    if full <= per_wg {
        Ok(full)
    } else if per_wg >= box_bytes {
        Ok(per_wg / box_bytes * box_bytes)
    } else {
        unsupported(format!(
            "shared memory: the ring and barriers take {other} of the {limit} bytes per block, \
             leaving less than one {box_bytes}-byte C staging box per consumer warpgroup"
        ))
    }
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
    /// than its swizzle: [`column_atoms`]), and its bytes.
    fn tma_load(
        &mut self,
        dst: &SharedView,
        src: &GlobalView,
    ) -> Result<(Vec<String>, u32), CudaLowerError> {
        let s = self.k.shared_decl(dst.buf);
        let g = self.k.global(src.tensor);
        let (rd, cd) = (src.row_dim as usize, src.col_dim as usize);
        if g.clip.is_some() {
            // A tensor map clips at the tensor's edge only; a box at a sequence's end would read
            // the next sequence's rows where the IR reads zeros.
            return unsupported(format!(
                "a TMA load of `{}`, which is clipped per block (fill it with cp.async: \
                 `SlotFill::CpAsync` checks each row against the clip)",
                g.name
            ));
        }
        if g.dims.len() < 2 || g.dims.len() > 5 || rd == cd || g.strides[cd] != Expr::c(1) {
            return unsupported(format!(
                "load of `{}`: 2 to 5 dimensions with unit stride along the columns",
                g.name
            ));
        }
        let atoms = column_atoms(&s.tile);
        // A box may fill the first rows of a slot (whole 8-row swizzle atoms from its start: the
        // GEMM's A box sized to a decode step's M, `GemmConfig::a_rows`), whose swizzle is then the
        // whole slot's.
        let first_rows = dst.rows < s.tile.rows
            && dst.cols == s.tile.cols
            && dst.rows.is_multiple_of(8)
            && dst.row0 == Expr::c(0)
            && dst.col0 == Expr::c(0)
            && atoms.is_none()
            && !super::lower_frame::multicast(self.k, src);
        if !((dst.rows, dst.cols) == (s.tile.rows, s.tile.cols) || first_rows)
            || (src.rows, src.cols) != (dst.rows, dst.cols)
            || src.rows > 256
            || src.cols > 256
        {
            return unsupported(format!(
                "load into part of `{}` (one TMA box of at most 256 x 256 fills a whole ring slot,                  or whole 8-row atoms from its start)",
                s.name
            ));
        }
        let (swizzle_bytes, box_cols) = match atoms {
            Some(a) => (128, src.cols / a),
            None => (
                swizzle_bytes(s.tile.swizzle, s.tile.cols * s.tile.dtype.bytes())?,
                src.cols,
            ),
        };
        // Multicast in a cluster of c (`lower_frame.rs`): this block fetches rows
        // `kt_crank·rows/c ..` of each box into every block. A share is a whole number of 8-row
        // swizzle atoms, so the swizzle (a function of the shared address) is the whole box's.
        let mc = super::lower_frame::multicast(self.k, src);
        let cluster = self.k.grid.cluster.max(1);
        let rows = if mc { src.rows / cluster } else { src.rows };
        if mc && (!src.rows.is_multiple_of(8 * cluster) || g.dims.len() != 2) {
            return unsupported(format!(
                "multicast of `{}` to {cluster} blocks: 2-d boxes of a multiple of {} rows, got {} rows of a {}-d tensor",
                g.name,
                8 * cluster,
                src.rows,
                g.dims.len()
            ));
        }
        let map = TmaMap {
            global: src.tensor.0,
            box_rows: rows,
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
                        } else if i == rd && mc {
                            format!("{c} + (int)kt_crank * {rows}")
                        } else {
                            c
                        }
                    })
                    .collect();
                // Atom `j` lies `j` atoms (rows × 128 bytes) into the slot.
                let mut at = if j > 0 {
                    format!("{base} + {}u", j * src.rows * 128)
                } else {
                    base.clone()
                };
                if mc {
                    let share = rows * box_cols * s.tile.dtype.bytes();
                    at = format!("{at} + kt_crank * {share}u");
                    return format!(
                        "kt::tma_load_2d_multicast({at}, &tma{mi}, KT_FULL(slot), {}, (unsigned short){});",
                        coords.join(", "),
                        (1u32 << cluster) - 1
                    );
                }
                format!(
                    "kt::tma_load_{}d({at}, &tma{mi}, KT_FULL(slot), {});",
                    g.dims.len(),
                    coords.join(", ")
                )
            })
            .collect();
        Ok((lines, dst.rows * dst.cols * s.tile.dtype.bytes()))
    }

    /// Stores the warpgroup's 64×N accumulator (the four waves' 16-row slices), rounded to bf16,
    /// through the slab into a row-major matrix.
    pub(super) fn store(
        &mut self,
        dst: &GlobalView,
        src: RegId,
        rounding: Rounding,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        if rounding != Rounding::Rtne {
            return unsupported(format!("store to `{}` with {rounding:?} (RTNE)", g.name));
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
        self.through_slab(dst, src, SlabOp::Store)
    }

    /// Adds the warpgroup's 64×N f32 accumulator into an f32 tensor of 2 to 5 dimensions through the
    /// slab and TMA reductions (`cp.reduce.async.bulk.tensor … .add`, PTX ISA §9.7.9.25.4.2): one
    /// thread hands the whole box to the L2's reduction units, where per-element `red.global.add`
    /// from every thread (FlashAttention-2's dQ) measured 0.64× the two-launch backward
    /// (docs/performance.md, "attn_bwd"). The IR's meaning is unchanged: each element is added once;
    /// rows outside the tensor are clipped by TMA.
    pub(super) fn reduce_add(
        &mut self,
        dst: &GlobalView,
        src: RegId,
    ) -> Result<(), CudaLowerError> {
        self.through_slab(dst, src, SlabOp::ReduceAdd)
    }

    fn through_slab(
        &mut self,
        dst: &GlobalView,
        src: RegId,
        op: SlabOp,
    ) -> Result<(), CudaLowerError> {
        let g = self.k.global(dst.tensor);
        if g.clip.is_some() {
            // A TMA store of a box crossing the sequence's end would write the next sequence's rows.
            return unsupported(format!(
                "a TMA {} into `{}`, which is clipped per block (a tensor of 3 or more dimensions \
                 takes the bounds-checked direct store)",
                op.name(),
                g.name
            ));
        }
        let (acc, _) = self.acc(src);
        let n = self.k.reg(src).shape().1;
        // bf16 stores narrower than a 128-byte box (a decode-sized GEMM's 32 or 48 columns) take
        // boxes of 32 columns (64-byte rows, as the piped store does) or 16 (32-byte rows).
        let least = if op == SlabOp::Store {
            16
        } else {
            op.box_cols()
        };
        if (dst.rows, dst.cols) != (16, n) || !n.is_multiple_of(least) {
            return unsupported(format!(
                "{} of {}x{} into `{}` (16 x a multiple of {least})",
                op.name(),
                dst.rows,
                dst.cols,
                g.name
            ));
        }
        self.check_store_slices(dst)?;
        let slab = self.slab;
        // All boxes at once where the slab holds the whole accumulator; else box by box through the
        // buffers the slab holds (`fit_slab`): bf16 then in boxes of 32 columns (64-byte rows in the
        // 64-byte swizzle), three of which fit beside a five-stage 128×192 ring.
        let piped = slab < WG_ROWS * n * op.dtype().bytes();
        let wide = op.box_cols();
        let box_cols = match op {
            SlabOp::Store if n.is_multiple_of(wide) && !piped => wide,
            SlabOp::Store if n.is_multiple_of(32) => 32,
            SlabOp::Store if !piped => 16,
            SlabOp::Store => {
                return unsupported(format!(
                    "store of 16x{n} box by box (a multiple of 32 columns)"
                ))
            }
            SlabOp::ReduceAdd => wide,
        };
        let narrow = op == SlabOp::Store && box_cols < wide;
        let row_bytes = box_cols * op.dtype().bytes();
        let box_bytes = WG_ROWS * row_bytes;
        let (boxes, bufs) = (n / box_cols, slab / box_bytes);
        if bufs == 0 {
            return unsupported(format!(
                "{} through a {slab}-byte slab (one {box_bytes}-byte box at least)",
                op.name()
            ));
        }
        let map = TmaMap {
            global: dst.tensor.0,
            box_rows: WG_ROWS,
            box_cols,
            swizzle_bytes: row_bytes,
            row_dim: dst.row_dim,
            col_dim: dst.col_dim,
        };
        match self.store_map {
            Some(m) if m != map => return unsupported("slab stores to two different tensors"),
            _ => self.store_map = Some(map),
        }
        let producers = self.producers;
        let l = |e: &mut Self, s: &str| e.line(s);
        self.line(format!(
            "{{ // {} {} -> {} through a swizzled shared slab and TMA",
            op.name(),
            self.k.reg(src).name,
            g.name
        ));
        self.depth += 1;
        self.line(format!(
            "const u32 slab = kt_slabs + (threadIdx.x / 128u - {producers}u) * {slab}u, w = (threadIdx.x / 32u) % 4u, l = kt_lane;"
        ));
        let mi = format!("tma{}", self.maps.len()); // pushed after the loads' maps
        let order = TmaMap::dim_order(g.dims.len(), dst.row_dim, dst.col_dim);
        let coords: Vec<String> = order
            .iter()
            .map(|&i| {
                if i == dst.col_dim as usize {
                    format!("c0 + (int)(j * {box_cols}u)")
                } else {
                    format!("(int)({})", self.ex_with(&dst.origin[i], "kt_wave0"))
                }
            })
            .collect();
        let first_col = format!(
            "const int c0 = {}; // the warpgroup's first column",
            self.ex_with(&dst.origin[dst.col_dim as usize], "kt_wave0")
        );
        let buf = if piped {
            format!("(j % {bufs}u)")
        } else {
            "j".to_string()
        };
        let issue = format!(
            "kt::{}_{}d(&{mi}, slab + {buf} * {box_bytes}u, {});",
            op.call(),
            order.len(),
            coords.join(", ")
        );
        // Fragment i (8 columns) of the accumulator lies in box i / per_box.
        let per_box = box_cols / 8;
        if piped {
            // Box j into buffer j % bufs: before it, the previous store's boxes have all left the
            // slab (j = 0) or box j - bufs has (at most bufs - 1 later groups still read).
            self.line(&first_col);
            l(self, "#pragma unroll");
            self.line(format!("for (u32 j = 0; j < {boxes}u; ++j) {{"));
            self.line(format!(
                "    if (j == 0u || j >= {bufs}u) {{ if (threadIdx.x % 128 == 0) {{ if (j == 0u) kt::tma_store_wait_read<0>(); else kt::tma_store_wait_read<{}>(); }} {} }}",
                bufs - 1,
                super::emit::WG_BARRIER
            ));
            self.depth += 1;
        } else {
            l(self, "if (threadIdx.x % 128 == 0) kt::tma_store_wait_read<0>(); // the previous box has left the slab");
            l(self, super::emit::WG_BARRIER);
        }
        let (i_range, box_of_i) = if piped {
            (
                format!("u32 i = j * {per_box}u; i < (j + 1u) * {per_box}u; ++i"),
                buf.clone(),
            )
        } else {
            (
                format!("u32 i = 0; i < {}u; ++i", n / 8),
                format!("(i / {per_box}u)"),
            )
        };
        // D fragment: rows 16w + l/4 (+8), columns 8i + 2(l%4) (+1). In the 128-byte swizzle
        // (`kt::swizzle128`) the row's 16-byte chunk c moves to chunk c ^ (row%8), and row%8 is l/4
        // for every fragment row: the address is a per-thread base plus constants and one of eight
        // XORed chunk offsets, so the compiler keeps 8 offsets live, not one address per store (it
        // hoisted all of them out of the tile loop, 48 registers at 192 columns).
        match op {
            // bf16 pairs in 32-column boxes: 4 bytes at column 8i + 2(l%4), chunk i%4 of a 64-byte
            // row; the 64-byte swizzle XORs it with (row/2)%4, which is l/8 for every fragment row.
            // bf16 pairs in 16-column boxes: chunk i%2 of a 32-byte row; the 32-byte swizzle XORs
            // it with (row/4)%2, which is l/16 for every fragment row.
            SlabOp::Store if box_cols == 16 => {
                l(self, "const u32 sw = l / 16u, base = slab + (w * 16u + l / 4u) * 32u + (l % 4u) * 4u;");
                l(self, "#pragma unroll");
                self.line(format!("for ({i_range}) {{"));
                l(self, "#pragma unroll");
                l(self, "    for (u32 h = 0; h < 2; ++h) {");
                self.line(format!(
                    "        const u32 off = {box_of_i} * {box_bytes}u + h * 256u + (((i % 2u) ^ sw) << 4);"
                ));
                self.line(format!(
                    "        kt::st_shared_b32(base + off, kt::pack_bf16x2({acc}[4 * i + 2 * h], {acc}[4 * i + 2 * h + 1]));"
                ));
            }
            SlabOp::Store if narrow => {
                l(self, "const u32 sw = l / 8u, base = slab + (w * 16u + l / 4u) * 64u + (l % 4u) * 4u;");
                l(self, "#pragma unroll");
                self.line(format!("for ({i_range}) {{"));
                l(self, "#pragma unroll");
                l(self, "    for (u32 h = 0; h < 2; ++h) {");
                self.line(format!(
                    "        const u32 off = {box_of_i} * {box_bytes}u + h * 512u + (((i % 4u) ^ sw) << 4);"
                ));
                self.line(format!(
                    "        kt::st_shared_b32(base + off, kt::pack_bf16x2({acc}[4 * i + 2 * h], {acc}[4 * i + 2 * h + 1]));"
                ));
            }
            // bf16 pairs: 4 bytes at column 8i + 2(l%4) of 64-column boxes, chunk i%8.
            SlabOp::Store => {
                l(self, "const u32 sw = l / 4u, base = slab + (w * 16u + l / 4u) * 128u + (l % 4u) * 4u;");
                l(self, "#pragma unroll");
                self.line(format!("for ({i_range}) {{"));
                l(self, "#pragma unroll");
                l(self, "    for (u32 h = 0; h < 2; ++h) {");
                self.line(format!(
                    "        const u32 off = {box_of_i} * {box_bytes}u + h * 1024u + (((i % 8u) ^ sw) << 4);"
                ));
                self.line(format!(
                    "        kt::st_shared_b32(base + off, kt::pack_bf16x2({acc}[4 * i + 2 * h], {acc}[4 * i + 2 * h + 1]));"
                ));
            }
            // f32 pairs: 8 bytes at column 8g + 2(l%4) of 32-column boxes, chunk 2(g%4) + (l%4)/2
            // (an even number plus 0 or 1, so its XOR with row%8 is 2(g%4) ^ (row%8 ^ (l%4)/2)).
            // Stored in column group order (g = i), the rows r and r ^ 1 of a half-warp would hit
            // the same two chunks, two lanes to a bank (ncu: twice the ideal wavefronts); lanes on odd
            // rows store group g = i ^ 2 at step i instead (the same box), so a half-warp's eight
            // (row, half-chunk) pairs fall on eight distinct chunks. That costs one select per value.
            SlabOp::ReduceAdd => {
                l(self, "const u32 odd = (l / 4u) & 1u, sw = (l / 4u) ^ ((l % 4u) / 2u) ^ (odd << 2), base = slab + (w * 16u + l / 4u) * 128u + (l % 2u) * 8u;");
                l(self, "#pragma unroll");
                self.line(format!("for ({i_range}) {{"));
                l(self, "#pragma unroll");
                l(self, "    for (u32 h = 0; h < 2; ++h) {");
                self.line(format!(
                    "        const u32 off = {box_of_i} * {box_bytes}u + h * 1024u + (((2u * (i % 4u)) ^ sw) << 4);"
                ));
                self.line(format!(
                    "        const float x0 = odd ? {acc}[4 * (i ^ 2u) + 2 * h] : {acc}[4 * i + 2 * h], x1 = odd ? {acc}[4 * (i ^ 2u) + 2 * h + 1] : {acc}[4 * i + 2 * h + 1];"
                ));
                l(self, "        kt::st_shared_v2_f32(base + off, x0, x1);");
            }
        }
        l(self, "    }");
        l(self, "}");
        l(
            self,
            "kt::fence_proxy_async(); // generic-proxy writes before the async-proxy (TMA) read",
        );
        l(self, super::emit::WG_BARRIER);
        if piped {
            self.line(format!(
                "if (threadIdx.x % 128 == 0) {{ {issue} kt::tma_store_commit(); }}"
            ));
            self.depth -= 1;
            l(self, "}");
        } else {
            l(self, "if (threadIdx.x % 128 == 0) {");
            self.line(format!("    {first_col}"));
            self.line(format!("    for (u32 j = 0; j < {boxes}u; ++j)"));
            self.line(format!("        {issue}"));
            l(self, "    kt::tma_store_commit();");
            l(self, "}");
        }
        self.depth -= 1;
        l(self, "}");
        Ok(())
    }

    /// The four waves of a warpgroup store consecutive 16-row slices at the same columns (evaluated at
    /// block and loop indices 0) and the same other coordinates (which must not read the wave), so
    /// they form one 64-row box. An index read (`Expr::Elem`, a varlen sequence's first row) whose
    /// index does not read the wave is the same for the four waves: the slices are checked with it
    /// read as 0 and as 2^20, so that a row offset it scales is not taken for a 16-row step.
    fn check_store_slices(&self, dst: &GlobalView) -> Result<(), CudaLowerError> {
        let (rd, cd) = (dst.row_dim as usize, dst.col_dim as usize);
        let others_uniform = dst
            .origin
            .iter()
            .enumerate()
            .all(|(i, e)| i == rd || i == cd || !reads_wave(e));
        let (zero, far) = (|_, _| Some(0i64), |_, _| Some(1i64 << 20));
        for read in [&zero as kittens_ir::expr::ReadElem, &far] {
            let at = |e: &Expr, wave: u32| self.at_origin_in(e, wave, read);
            for w0 in (4 * self.producers..self.k.waves).step_by(4) {
                for i in 0..4u32 {
                    let ok = at(&dst.origin[rd], w0 + i)
                        .zip(at(&dst.origin[rd], w0))
                        .is_some_and(|(r, r0)| r == r0 + 16 * i as i64)
                        && at(&dst.origin[cd], w0 + i).is_some()
                        && at(&dst.origin[cd], w0 + i) == at(&dst.origin[cd], w0);
                    if !ok || !others_uniform {
                        return unsupported("a store whose per-wave slices are not one 64-row box");
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether `e` reads the wave index.
fn reads_wave(e: &Expr) -> bool {
    match e {
        Expr::Wave => true,
        Expr::Bin(_, a, b) => reads_wave(a) || reads_wave(b),
        Expr::Elem(_, i) => reads_wave(i),
        _ => false,
    }
}

/// The TMA/wgmma swizzle of a shared tile whose rows are `row_bytes` long: the NVIDIA modes are an XOR
/// of 16-byte chunks by the row within an 8-row atom, and they require rows of exactly that width.
pub(super) fn swizzle_bytes(sw: Swizzle, row_bytes: u32) -> Result<u32, CudaLowerError> {
    let bytes = if sw == Swizzle::NV_128B {
        128
    } else if sw == Swizzle::NV_64B {
        64
    } else if sw == Swizzle::NV_32B {
        32
    } else if sw == Swizzle::None {
        0
    } else {
        return unsupported(format!(
            "shared swizzle {sw:?} (TMA has the NVIDIA modes only)"
        ));
    };
    if bytes != 0 && bytes != row_bytes {
        return unsupported(format!("{bytes}-byte swizzle on {row_bytes}-byte rows"));
    }
    Ok(bytes)
}

/// Column atoms of a shared tile whose rows are wider than its swizzle: a tile of `rows × cols` under
/// the 128-byte swizzle with rows of `128·a` bytes is kept as `a` atoms of `rows × 128` bytes, one after
/// the other (atom `j` holds columns `j·128/elem ..`), each exactly what one TMA box writes and what a
/// wgmma descriptor steps through with its leading offset (N-major B of `C = A·B`). `None` for a tile
/// [`swizzle_bytes`] takes as it is.
pub(super) fn column_atoms(t: &kittens_tile::SharedTile) -> Option<u32> {
    let row_bytes = t.cols * t.dtype.bytes();
    (t.swizzle == Swizzle::NV_128B && row_bytes > 128 && row_bytes.is_multiple_of(128))
        .then_some(row_bytes / 128)
}

#[cfg(test)]
mod tests {
    /// The slab address each store path emits for wave `w`, lane `l`, step `i` and row half `h`
    /// (`through_slab`'s `base + off`), written once for the address and bank tests below.
    /// bf16, 64-column boxes in the 128-byte swizzle:
    fn bf16_addr(w: u32, l: u32, i: u32, h: u32) -> u32 {
        let (sw, base) = (l / 4, (w * 16 + l / 4) * 128 + (l % 4) * 4);
        base + (i / 8) * super::WG_ROWS * 128 + h * 1024 + (((i % 8) ^ sw) << 4)
    }
    /// bf16, the box-by-box store's 32-column boxes in the 64-byte swizzle:
    fn narrow_addr(w: u32, l: u32, i: u32, h: u32) -> u32 {
        let (sw, base) = (l / 8, (w * 16 + l / 4) * 64 + (l % 4) * 4);
        base + (i / 4) * super::WG_ROWS * 64 + h * 512 + (((i % 4) ^ sw) << 4)
    }
    /// bf16, 16-column boxes (48-column blocks) in the 32-byte swizzle:
    fn box16_addr(w: u32, l: u32, i: u32, h: u32) -> u32 {
        let (sw, base) = (l / 16, (w * 16 + l / 4) * 32 + (l % 4) * 4);
        base + (i / 2) * super::WG_ROWS * 32 + h * 256 + (((i % 2) ^ sw) << 4)
    }
    /// f32 pairs, 32-column boxes in the 128-byte swizzle, odd rows storing group `i ^ 2` at step `i`:
    fn f32_addr(w: u32, l: u32, i: u32, h: u32) -> u32 {
        let odd = (l / 4) & 1;
        let sw = (l / 4) ^ ((l % 4) / 2) ^ (odd << 2);
        let base = (w * 16 + l / 4) * 128 + (l % 2) * 8;
        base + (i / 4) * super::WG_ROWS * 128 + h * 1024 + (((2 * (i % 4)) ^ sw) << 4)
    }

    /// Calls `check(w, l, i, h, row, col)` for every wave `w` of a warpgroup, lane `l`, fragment
    /// column block `i` (of `blocks`) and row half `h`, with the D fragment's element that thread
    /// holds there: row `16w + l/4 + 8h`, column `8i + 2(l%4)`.
    fn each_fragment(blocks: u32, check: impl Fn(u32, u32, u32, u32, u32, u32)) {
        for w in 0..4u32 {
            for l in 0..32u32 {
                for i in 0..blocks {
                    for h in 0..2u32 {
                        check(w, l, i, h, w * 16 + l / 4 + 8 * h, i * 8 + (l % 4) * 2);
                    }
                }
            }
        }
    }

    /// The slab address the store emits equals `swizzle128` of the fragment's plain offset for every
    /// lane, wave, fragment column block and row half (`kt::swizzle128`: `off ^ (((off >> 7) & 7) << 4)`).
    #[test]
    fn xor_form_is_the_128_byte_swizzle() {
        let box_bytes = super::WG_ROWS * 128;
        let swizzle128 = |off: u32| off ^ (((off >> 7) & 7) << 4);
        each_fragment(32, |w, l, i, h, row, col| {
            let plain = (col / 64) * box_bytes + row * 128 + (col % 64) * 2;
            assert_eq!(
                swizzle128(plain),
                bf16_addr(w, l, i, h),
                "w {w} l {l} i {i} h {h}"
            );
        });
    }

    /// The narrow boxes of the box-by-box store (32 bf16 columns, 64-byte rows): the emitted address
    /// equals the 64-byte swizzle (16-byte chunk XOR bits 7-8 of the offset, i.e. row/2 mod 4) of
    /// the fragment's plain offset, for every lane, wave, fragment column block and row half.
    #[test]
    fn narrow_slab_address_is_the_64_byte_swizzle() {
        let box_bytes = super::WG_ROWS * 64;
        let swizzle64 = |off: u32| off ^ (((off >> 7) & 3) << 4);
        each_fragment(32, |w, l, i, h, row, col| {
            let plain = (col / 32) * box_bytes + row * 64 + (col % 32) * 2;
            assert_eq!(
                swizzle64(plain),
                narrow_addr(w, l, i, h),
                "w {w} l {l} i {i} h {h}"
            );
        });
    }

    /// 16-column boxes (32-byte rows): the emitted address equals the 32-byte swizzle (16-byte chunk
    /// XOR bit 7 of the offset, i.e. row/4 mod 2) of the fragment's plain offset.
    #[test]
    fn box16_slab_address_is_the_32_byte_swizzle() {
        let box_bytes = super::WG_ROWS * 32;
        let swizzle32 = |off: u32| off ^ (((off >> 7) & 1) << 4);
        each_fragment(6, |w, l, i, h, row, col| {
            let plain = (col / 16) * box_bytes + row * 32 + (col % 16) * 2;
            assert_eq!(
                swizzle32(plain),
                box16_addr(w, l, i, h),
                "w {w} l {l} i {i} h {h}"
            );
        });
    }

    /// The f32 slab of the TMA reductions: the address the emitted code forms for the column group
    /// a lane stores at step `i` (`g = i ^ 2` on odd rows, the chunk's low bit and the odd rows'
    /// group swap folded into the XOR term) equals `swizzle128` of that group's plain offset in
    /// 32-column boxes, for every lane, wave, step and row half; and every group is stored once.
    #[test]
    fn f32_slab_address_is_the_128_byte_swizzle() {
        let box_bytes = super::WG_ROWS * 128;
        let swizzle128 = |off: u32| off ^ (((off >> 7) & 7) << 4);
        each_fragment(16, |w, l, i, h, row, _| {
            let odd = (l / 4) & 1;
            let g = i ^ (2 * odd);
            let col = g * 8 + (l % 4) * 2;
            let plain = (col / 32) * box_bytes + row * 128 + (col % 32) * 4;
            assert_eq!(
                swizzle128(plain),
                f32_addr(w, l, i, h),
                "w {w} l {l} i {i} h {h}"
            );
        });
        // Every lane stores each of its 16 column groups once, each in the box of its step.
        for l in 0..32u32 {
            let odd = (l / 4) & 1;
            let mut groups: Vec<u32> = (0..16u32).map(|i| i ^ (2 * odd)).collect();
            assert!((0..16u32).all(|i| (i ^ (2 * odd)) / 4 == i / 4), "lane {l}");
            groups.sort_unstable();
            assert_eq!(groups, (0..16).collect::<Vec<_>>(), "lane {l}");
        }
    }

    /// No shared-memory bank is hit twice by one slab store instruction: a 4-byte store (bf16 pairs,
    /// any box width)
    /// is one wavefront of 32 lanes, an 8-byte store (f32 pairs) two of 16 lanes (half-warps), and
    /// within a wavefront the lanes' 4-byte words fall in distinct banks (address / 4 mod 32).
    /// Stored in plain group order the f32 slab failed this (ncu saw the 2-way conflicts too).
    #[test]
    fn slab_stores_are_free_of_bank_conflicts() {
        let distinct = |words: &[u32]| {
            let mut banks: Vec<u32> = words.iter().map(|a| (a / 4) % 32).collect();
            banks.sort_unstable();
            banks.dedup();
            banks.len() == words.len()
        };
        for w in 0..4u32 {
            for i in 0..8u32 {
                for h in 0..2u32 {
                    // bf16 (both box widths): one 4-byte word per lane, one wavefront.
                    for (name, addr) in [
                        ("bf16", bf16_addr as fn(u32, u32, u32, u32) -> u32),
                        ("narrow", narrow_addr),
                        ("box16", box16_addr),
                    ] {
                        let words: Vec<u32> = (0..32u32).map(|l| addr(w, l, i, h)).collect();
                        assert!(distinct(&words), "{name} w {w} i {i} h {h}");
                    }
                    // f32: the two words of each lane's pair, per half-warp.
                    for half in 0..2u32 {
                        let words: Vec<u32> = (16 * half..16 * half + 16)
                            .flat_map(|l| {
                                let a = f32_addr(w, l, i, h);
                                [a, a + 4]
                            })
                            .collect();
                        assert!(distinct(&words), "f32 w {w} i {i} h {h} half {half}");
                    }
                }
            }
        }
    }
}
