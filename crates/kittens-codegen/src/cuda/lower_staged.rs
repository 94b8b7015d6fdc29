//! The in-kernel copy of a `SlotFill::TmaStaged` tensor (`kittens_ir::SlotFill`): TMA reads rows that
//! start off 128-byte lines slowly (each 128-byte box row straddles two lines; H100, 3000³: the GEMM's
//! kernel 86 µs reading A that way against 74 on aligned rows, bench/NOTES.md), and a copy before
//! the launch costs its whole time on top (13-16 µs for B at 3000³). Here the producer warpgroup's
//! warps 1-3, idle beside the one thread that issues TMA, copy the tensor onto 128-byte lines while
//! the consumers multiply:
//!
//! - the tensor is cut in chunks of [`CHUNK`] elements along its K axis (the axis the ring walks),
//!   copied in order; every block copies its share of each chunk's rows in 16-byte vectors and then
//!   adds one to the chunk's flag (`red.release.gpu`, after a proxy fence, a `membar.gl` and a named
//!   barrier of the 96 copying threads: the classic fence-then-count of a grid reduction);
//! - the TMA thread, before its first box from a chunk, waits until the chunk's flag reaches the
//!   launch's base plus the grid's blocks (`ld.acquire.gpu`, compared modulo 2³²), then fences the
//!   async proxy and issues the box from the copy (whose tensor map the launch encodes);
//! - the flags are never reset: each launch adds exactly the grid's blocks to every chunk, and the
//!   launcher passes the count at launch (`KernelArg::Stage(StageArg::Base)`).
//!
//! Every block of the persistent grid must be resident at once (one per SM, at most as many as
//! SMs), as the other blocks' chunks are waited for; a block copies its share whatever it waits for,
//! so the copy itself never waits.

use kittens_hw::dtype::DType;
use kittens_ir::{GlobalView, Kernel, SlotFill};

use super::lower::{unsupported, CudaLowerError, Emit};
use crate::cexpr::ident;
use crate::lowered::{KernelArg, StageArg};

/// Elements per chunk along the K axis: four 64-element K steps, so the first boxes wait for a
/// sixteenth of a 4096-wide operand's copy rather than all of it.
pub(super) const CHUNK: u32 = 256;
/// 16-byte vectors a copying thread has in flight (its loads issued before its stores), by the
/// producer warpgroup's registers: eight with 72 (the GEMM's staging split, 72 / 216: at 56 even
/// two vectors spilled, NVRTC 13.0) for one staged tensor, four each for two (eight spilled 272
/// bytes); two with fewer registers.
fn unroll(k: &Kernel) -> u32 {
    let regs = match k.schedule {
        kittens_ir::Schedule::ProducerConsumer { producer_regs, .. } => producer_regs,
        _ => 0,
    };
    match (regs >= 72, staged(k).len()) {
        (true, 1) => 8,
        (true, _) => 4,
        (false, _) => 2,
    }
}

/// Named barrier of the 96 copying threads (IDs below are the roles' and warpgroups').
const COPY_BARRIER: u32 = 15;

/// The staged globals of `k`: (index, K axis).
pub(super) fn staged(k: &Kernel) -> Vec<(usize, u8)> {
    k.globals
        .iter()
        .enumerate()
        .filter_map(|(i, g)| match g.slot_fill {
            SlotFill::TmaStaged { k_axis } => Some((i, k_axis)),
            _ => None,
        })
        .collect()
}

/// Checks what the copy assumes of each staged global: a 2-D bf16 tensor, read only, contiguous
/// along its columns, K axis 0 or 1; and that no ring is filled by `cp.async` (`cp_async`), whose
/// producer threads are all busy with their own copies.
pub(super) fn check(k: &Kernel, cp_async: bool) -> Result<(), CudaLowerError> {
    if cp_async && !staged(k).is_empty() {
        return unsupported("staged copies beside cp.async slot fills (both need the producer's warps)");
    }
    for (i, axis) in staged(k) {
        let g = &k.globals[i];
        if g.dims.len() != 2
            || g.dtype != DType::Bf16
            || g.access != kittens_ir::Access::Read
            || g.strides[1] != kittens_ir::Expr::c(1)
            || axis > 1
        {
            return unsupported(format!(
                "staged copy of `{}`: a read-only 2-D bf16 tensor with unit column stride and K axis 0 or 1",
                g.name
            ));
        }
    }
    Ok(())
}

/// The kernel arguments the staged globals add (after the parameters) and their C declarations.
pub(super) fn args(k: &Kernel) -> (Vec<KernelArg>, Vec<String>) {
    let (mut kargs, mut decls) = (Vec::new(), Vec::new());
    let list = staged(k);
    for &(i, _) in &list {
        let (name, id) = (k.globals[i].name.clone(), ident(&k.globals[i].name));
        kargs.push(KernelArg::Stage(StageArg::Copy { name: name.clone() }));
        kargs.push(KernelArg::Stage(StageArg::Pitch { name: name.clone() }));
        kargs.push(KernelArg::Stage(StageArg::Flags { name }));
        decls.push(format!("bf16_t* __restrict__ kt_stage_{id}"));
        decls.push(format!("int kt_stage_pitch_{id}"));
        decls.push(format!("unsigned* __restrict__ kt_stage_flags_{id}"));
    }
    if !list.is_empty() {
        kargs.push(KernelArg::Stage(StageArg::Base));
        decls.push("unsigned kt_stage_base".into());
    }
    (kargs, decls)
}

impl Emit<'_> {
    /// The copying threads' code (producer warps 1-3), where the kernel stages any global.
    pub(super) fn staged_copies(&mut self) -> Result<(), CudaLowerError> {
        let list = staged(self.k);
        if list.is_empty() {
            return Ok(());
        }
        self.line("if (threadIdx.x % 128u >= 32u) { // warps 1-3: the staged copies (lower_staged.rs)");
        self.depth += 1;
        self.line("const u32 kt_ct = threadIdx.x % 128u - 32u;");
        let unroll = unroll(self.k);
        for (i, axis) in list {
            let g = &self.k.globals[i];
            let id = ident(&g.name);
            let (rows, cols, pitch) = (self.ex(&g.dims[0]), self.ex(&g.dims[1]), self.ex(&g.strides[0]));
            self.line(format!("{{ // `{}` onto 128-byte lines, chunks of {CHUNK} along axis {axis}", g.name));
            self.depth += 1;
            self.line(format!("const u32 kt_rows = (u32)({rows}), kt_cols = (u32)({cols});"));
            self.line(format!(
                "const u64 kt_sp = (u64)({pitch}), kt_dp = (u64)kt_stage_pitch_{id};"
            ));
            let along = if axis == 1 { "kt_cols" } else { "kt_rows" };
            self.line(format!(
                "for (u32 kt_c = 0; kt_c < ({along} + {}u) / {CHUNK}u; ++kt_c) {{",
                CHUNK - 1
            ));
            self.depth += 1;
            if axis == 1 {
                self.line(format!("const u32 r0 = 0, r1 = kt_rows, c0 = kt_c * {CHUNK}u, c1 = min(kt_cols, c0 + {CHUNK}u);"));
            } else {
                self.line(format!("const u32 r0 = kt_c * {CHUNK}u, r1 = min(kt_rows, r0 + {CHUNK}u), c0 = 0, c1 = kt_cols;"));
            }
            self.line("const u32 per = (r1 - r0 + gridDim.x - 1u) / gridDim.x;");
            self.line("const u32 my0 = min(r1, r0 + blockIdx.x * per), my1 = min(r1, my0 + per);");
            self.line("const u32 vecs = (c1 - c0) / 8u; // 16-byte vectors per row");
            // Warp w copies rows my0 + w, + 3, …, its lanes a row's vectors: `nr` rows of `nv`
            // vectors per lane in flight (a K-axis-1 chunk row is 32 vectors, one per lane; a
            // K-axis-0 chunk's block share is a row or two of the whole width).
            let (nr, nv) = if axis == 1 { (unroll, 1) } else { (1, unroll) };
            self.line(format!(
                "for (u32 r = my0 + kt_ct / 32u; r < my1; r += {}u) for (u32 v = kt_ct % 32u; v < vecs; v += {}u) {{",
                3 * nr,
                32 * nv
            ));
            self.line(format!("    uint4 x[{}];", nr * nv));
            for (what, body) in [
                ("load", format!("x[i * {nv}u + j] = kt::ld_global_nc_v4(g_{id} + (u64)(r + 3u * i) * kt_sp + c0 + (v + 32u * j) * 8u);")),
                ("store", format!("kt::st_global_v4(kt_stage_{id} + (u64)(r + 3u * i) * kt_dp + c0 + (v + 32u * j) * 8u, x[i * {nv}u + j]);")),
            ] {
                self.line(format!("    #pragma unroll // every {what} issued before the next step"));
                self.line(format!("    for (u32 i = 0; i < {nr}u; ++i)"));
                self.line("    #pragma unroll");
                self.line(format!("    for (u32 j = 0; j < {nv}u; ++j)"));
                self.line(format!("        if (r + 3u * i < my1 && v + 32u * j < vecs) {body}"));
            }
            self.line("}");
            self.line(format!(
                "kt::stage_done(kt_stage_flags_{id} + kt_c, kt_ct, {COPY_BARRIER}u);"
            ));
            // PROBE (measurement only, removed after): `nocopy` skips the copy.
            if std::env::var("KITTENS_STAGE_PROBE").as_deref() == Ok("nocopy") {
                let body = std::mem::take(&mut self.out);
                let cut = body.rfind("for (u32 r = my0").unwrap_or(body.len());
                let end = body.rfind("kt::stage_done(").unwrap_or(body.len());
                let line_start = body[..end].rfind('\n').map_or(end, |i| i + 1);
                self.out = format!("{}{}", &body[..cut], &body[line_start..]);
            }
            self.depth -= 1;
            self.line("}");
            self.depth -= 1;
            self.line("}");
        }
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// The TMA thread's per-global count of chunks known copied, declared before its tile loop.
    pub(super) fn staged_ready_decls(&mut self) {
        let list = staged(self.k);
        if list.is_empty() {
            return;
        }
        let names: Vec<String> = list
            .iter()
            .map(|&(i, _)| format!("kt_ready_{} = 0", ident(&self.k.globals[i].name)))
            .collect();
        self.line(format!(
            "u32 {}; // chunks of each staged copy known done",
            names.join(", ")
        ));
        self.line("const u32 kt_stage_target = kt_stage_base + gridDim.x; // a chunk's flag when every block copied its share");
    }

    /// Before a TMA box from a staged global: wait until the chunks up to the box's are copied.
    /// `None` for other globals.
    pub(super) fn staged_wait(&self, src: &GlobalView) -> Result<Option<String>, CudaLowerError> {
        let g = self.k.global(src.tensor);
        let SlotFill::TmaStaged { k_axis } = g.slot_fill else {
            return Ok(None);
        };
        let extent = if k_axis == 1 { src.cols } else { src.rows };
        let along = if k_axis == 1 { src.col_dim } else { src.row_dim };
        if !CHUNK.is_multiple_of(extent) || along != k_axis {
            return unsupported(format!(
                "staged load of `{}`: boxes of {extent} along axis {k_axis} (a divisor of {CHUNK} along the K axis)",
                g.name
            ));
        }
        let id = ident(&g.name);
        let origin = self.ex(&src.origin[k_axis as usize]);
        if std::env::var("KITTENS_STAGE_PROBE").as_deref() == Ok("nowait") {
            return Ok(Some(format!("(void)kt_ready_{id}; (void)kt_stage_target; (void)({origin});")));
        }
        Ok(Some(format!(
            "kt_ready_{id} = kt::stage_wait(kt_stage_flags_{id}, (u32)({origin}) / {CHUNK}u, kt_ready_{id}, kt_stage_target);"
        )))
    }
}
