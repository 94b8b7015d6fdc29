//! The frame of a kernel lowered for sm_90a (`lower.rs`): its entry, the mbarrier setup of the rings,
//! the consumers' release helper, and what thread-block clusters change there
//! ([`kittens_ir::Grid::cluster`]).
//!
//! **Clusters of two (or four) blocks** (`Grid::cluster`): consecutive row tiles of a GEMM read the
//! same B box at every K step. Each block of the cluster fetches its share of that box's rows and
//! multicasts it into every block's slots (`cp.async.bulk.tensor … .multicast::cluster`, PTX ISA §9.7.9.25; each copy
//! completes on the `full` mbarrier at the same offset in each block), so the L2 serves the box once
//! per pair. cuBLAS's kernel at 3000³ runs in such pairs (ncu: about half our L2 requests with both
//! operands read in place; docs/performance.md, "gemm_bf16"). What that asks of the frame:
//!
//! - a block may overwrite a slot of its partner only once the partner's consumers have read it:
//!   lane r of every consumer warp arrives on the `empty` barrier of cluster block r
//!   (`mapa`, then a remote arrive with the default `.release.cta` semantics — an explicit
//!   `.release.cluster` compiled to a GPU-wide membar per arrive and halved the hand-written 2-CTA
//!   GEMM, docs/performance.md), so each `empty` barrier counts the consumer warps of both blocks;
//! - the partner's copies may arrive before this block's producer arms `full` with the bytes (the
//!   transaction count goes negative for a while, which the mbarrier allows);
//! - no block initialises its barriers after its partner may have signalled them: a cluster barrier
//!   after the setup replaces `__syncthreads`;
//! - no block exits while a partner may still signal its barriers or write its slots: its producer
//!   thread waits until every slot's last fill has been released by every block's consumers (as
//!   CUTLASS's producer tail does; `lower_roles.rs`). A cluster barrier at the end instead cost about
//!   1.4 µs per launch (5% at 2048³ on the H100, docs/performance.md).

use kittens_hw::dtype::DType;
use kittens_ir::{Cond, Expr, GlobalView, Kernel, Op, SlotFill, Stmt};

use super::emit::{unsupported, CudaLowerError};

/// What the frame is built from.
pub(super) struct Frame<'a> {
    pub kernel: &'a str,
    pub entry: &'a str,
    pub args: String,
    pub threads: u32,
    /// Ring slots (full/empty pairs).
    pub nbars: u32,
    /// Arrivals each `empty` barrier counts: every consumer thread's.
    pub empty: u32,
    pub full_init: String,
    pub slabs_at: u32,
    pub slab: u32,
    pub bars_at: u32,
    pub cluster: u32,
    pub body: String,
}

/// The kernel's source after the prelude: release helper, entry, barrier setup, body.
pub(super) fn frame(f: &Frame) -> String {
    let Frame {
        kernel,
        entry,
        nbars,
        threads,
        empty,
        slabs_at,
        slab,
        bars_at,
        ..
    } = *f;
    let clustered = f.cluster > 1;
    // The release: every consumer thread arrives on this block's `empty` barrier; in a cluster lanes
    // 0 and 1 of each warp arrive on those of blocks 0 and 1 (a remote arrive is a cluster
    // transaction: one per warp and block, not one per thread), so each counts the consumer warps of
    // both blocks.
    let (arrive, empty) = if clustered {
        (
            format!("if (kt::lane_id() < {}u) kt::mbarrier_arrive_cluster(kt::map_shared_to_cta(KT_EMPTY(i), kt::lane_id()))", f.cluster),
            empty / 32 * f.cluster,
        )
    } else {
        ("kt::mbarrier_arrive(KT_EMPTY(i))".to_string(), empty)
    };
    let sync = if clustered {
        "kt::cluster_sync(); // the partner block's barriers are initialised before it signals ours"
    } else {
        "__syncthreads();"
    };
    let rank = if clustered {
        "    const u32 kt_crank = kt::cluster_ctarank(); // this block's place in its cluster\n"
    } else {
        ""
    };
    // The C staging slabs, when a store goes through them.
    let slabs = if slab > 0 {
        format!("    const u32 kt_slabs = kt_smem + {slabs_at}u; // C staging, {slab} bytes per consumer warpgroup\n")
    } else {
        String::new()
    };
    format!(
        "\n// Lowered from the tile program `{kernel}` by kittens-codegen::cuda::lower.\n\
         // Slot i of the rings has mbarriers full[i] (TMA landed) and empty[i] (every consumer warp done).\n\
         #define KT_FULL(i) (kt_bars + 8u * (u32)(i))\n\
         #define KT_EMPTY(i) (kt_bars + 8u * ({nbars}u + (u32)(i)))\n\
         // Every consumer thread hands back the slots in `mask` (its warpgroup's wgmmas on them are done).\n\
         __device__ __forceinline__ void kt_release(u32 kt_bars, u32 mask) {{\n\
         #pragma unroll\n\
         \x20   for (u32 i = 0; i < {nbars}u; ++i)\n\
         \x20       if ((mask >> i) & 1u) {arrive};\n\
         }}\n\
         extern \"C\" __global__ void __launch_bounds__({threads}, 1)\n{entry}({args}) {{\n\
         \x20   extern __shared__ __align__(1024) unsigned char kt_smem_raw[];\n\
         \x20   const u32 kt_smem = (kt::smem_u32(kt_smem_raw) + 1023u) & ~1023u;\n\
         {slabs}\
         \x20   const u32 kt_bars = kt_smem + {bars_at}u;\n\
         \x20   const int wave = threadIdx.x / 32, kt_lane = threadIdx.x % 32;\n\
         \x20   const int kt_wave0 = (threadIdx.x / 128) * 4; // first wave of this warpgroup\n\
         {rank}\
         \x20   if (threadIdx.x == 0) {{\n\
         \x20       for (u32 i = 0; i < {nbars}u; ++i)\n\
         \x20           kt::mbarrier_init(KT_EMPTY(i), {empty});\n\
         {full_init}\
         \x20       kt::fence_mbarrier_init();\n\
         \x20       kt::fence_proxy_async();\n\
         \x20   }}\n\
         \x20   {sync}\n\
         \x20   kt::griddep_wait(); // a programmatic launch starts here, before the previous grid ends\n{body}}}\n",
        args = f.args,
        full_init = f.full_init,
        body = f.body,
    )
}

/// Checks a clustered program against what the frame assumes: every fill a TMA box (a `cp.async` fill
/// cannot multicast), no pairing of launch ids, and a producer whose loop bounds and conditions do
/// not read the row tile — both blocks of a cluster must issue the same fills in the same order, also
/// where the second one's row tile lies past the end (an odd number of row tiles).
pub(super) fn check_cluster(k: &Kernel, producer: &[Stmt]) -> Result<(), CudaLowerError> {
    match k.grid.cluster {
        0 | 1 => return Ok(()),
        2 | 4 => {}
        n => return unsupported(format!("clusters of {n} blocks (2 or 4)")),
    }
    if k.grid.paired {
        return unsupported("clusters on a paired grid");
    }
    if cp_async_rings(k).iter().any(|&c| c) {
        return unsupported("clusters with cp.async fills (only TMA multicasts)");
    }
    fn cond_reads(c: &Cond) -> bool {
        match c {
            Cond::Eq(a, b) | Cond::Ne(a, b) | Cond::Lt(a, b) | Cond::Le(a, b) => {
                a.reads_block(0) || b.reads_block(0)
            }
            Cond::And(a, b) | Cond::Or(a, b) => cond_reads(a) || cond_reads(b),
            Cond::Not(a) => cond_reads(a),
        }
    }
    fn uniform(body: &[Stmt]) -> bool {
        body.iter().all(|s| match s {
            Stmt::For {
                start, end, body, ..
            } => !start.reads_block(0) && !end.reads_block(0) && uniform(body),
            Stmt::If { cond, then, els } => !cond_reads(cond) && uniform(then) && uniform(els),
            Stmt::Cluster { body, .. }
            | Stmt::Staggered { body }
            | Stmt::LastArrival { body, .. } => uniform(body),
            Stmt::Op { .. } | Stmt::Roles { .. } => true,
        })
    }
    if !uniform(producer) {
        return unsupported(
            "clusters whose producer loops or branches on the row tile (the blocks of a cluster fill in step)",
        );
    }
    Ok(())
}

/// Whether a load is multicast in a cluster: its box does not depend on the row tile, so both blocks
/// of the pair read the same one.
pub(super) fn multicast(k: &Kernel, src: &GlobalView) -> bool {
    k.grid.cluster > 1 && !src.origin.iter().any(|e: &Expr| e.reads_block(0))
}

/// The C type of a global tensor's kernel argument: bf16 bits, fp8 e4m3 bytes (OCP, the format of
/// Hopper's `wgmma ... e4m3`, PTX ISA §9.7.15.5), or f32 (the FP8 GEMM's scales, the attention's
/// log-sum-exp). Tiles are written as bf16 (the TMA-store epilogue packs bf16), f32 only from row
/// vectors.
pub(super) fn global_ctype(g: &kittens_ir::GlobalDecl) -> Result<&'static str, CudaLowerError> {
    let write = g.access != kittens_ir::Access::Read;
    Ok(match (g.dtype, write) {
        (DType::Bf16, _) => "bf16_t*",
        (DType::Fp8E4m3, false) => "const unsigned char*",
        (DType::F32, false) => "const float*",
        // A row vector stored per query (the attention's log-sum-exp).
        (DType::F32, true) => "float*",
        // Index tensors (varlen offsets) read by `Expr::Elem`; `cexpr` casts the pointer itself.
        (DType::I32, false) => "const int*",
        // Counters of a last arrival (`Stmt::LastArrival`), incremented atomically.
        (DType::I32, true) => "int*",
        (dt, w) => {
            return unsupported(format!(
                "global `{}` of {dt:?}{} (bf16 tensors, read-only e4m3 or f32 ones)",
                g.name,
                if w { ", written" } else { "" }
            ))
        }
    })
}

/// Per shared ring: whether a `load_async` fills it from a global read with `cp.async`.
pub(super) fn cp_async_rings(k: &Kernel) -> Vec<bool> {
    let mut cp = vec![false; k.shared.len()];
    for r in k.ops() {
        if let Op::LoadAsync { dst, src, .. } = r.op {
            if k.global(src.tensor).slot_fill == SlotFill::CpAsync {
                cp[dst.buf.0 as usize] = true;
            }
        }
    }
    cp
}

/// The lines initialising the `full` barriers: a TMA-only slot expects one arrival (the issuing
/// thread's, with the bytes), a slot any of whose rings `cp.async` fills 128 more (each producer
/// thread's `cp.async.mbarrier.arrive.noinc`). Barriers with one count share a loop.
pub(super) fn full_barrier_init(k: &Kernel, bars: &[u32], nbars: u32, cp: &[bool]) -> String {
    let (mut tma, mut cpa) = (vec![false; nbars as usize], vec![false; nbars as usize]);
    for (i, s) in k.shared.iter().enumerate() {
        for b in bars[i]..(bars[i] + s.count).min(nbars) {
            if cp[i] {
                cpa[b as usize] = true;
            } else {
                tma[b as usize] = true;
            }
        }
    }
    let count = |b: usize| u32::from(tma[b] || !cpa[b]) + if cpa[b] { 128 } else { 0 };
    let mut out = String::new();
    let mut b = 0usize;
    while b < nbars as usize {
        let c = count(b);
        let end = (b..nbars as usize)
            .find(|&e| count(e) != c)
            .unwrap_or(nbars as usize);
        out.push_str(&format!(
            "        for (u32 i = {b}u; i < {end}u; ++i) kt::mbarrier_init(KT_FULL(i), {c});\n"
        ));
        b = end;
    }
    out
}
