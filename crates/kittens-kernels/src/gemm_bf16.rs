//! BF16 GEMM `C = A·Bᵀ` (A M×K, B N×K, C M×N bf16, fp32 accumulation) with the 8-wave ping-pong
//! schedule of seed 000 E.1 (Fig. 21).
//!
//! Each block computes a `block × block` tile of C with 8 waves arranged 2×4; each wave owns four
//! `block/4 × block/8` accumulators (`c[i][j]`). A and B stream through a double-buffered ring of
//! half-block shared tiles (`a_s[h][tic]`, `b_s[h][tic]`). The hot loop is eight clusters, memory and
//! compute alternating; the schedule turns them into the ping-pong (priority 1 on compute, a barrier at
//! every cluster end, the conditional stagger barrier before the loop and the re-join after it).
//!
//! Waits count IR load ops per wave (the seed's `vmcnt(4)`/`vmcnt(6)` count two `buffer_load`s per tile
//! load, i.e. 2 and 3 ops). Each memory cluster drains its shared→register loads (`wait_shared(0)`)
//! before its closing barrier: the seed waits `lgkmcnt(0)` at the start of the next compute cluster
//! instead, but with the stagger the other warpgroup's async load into the slot just read is issued in
//! that same barrier interval, which the schedule analysis reports as a race. Where the seed peels the
//! last two K steps into an epilogue, this kernel runs the loop over every K step: the loads it issues
//! past the end of K read zeros into buffers no later step reads, which keeps the whole schedule on one
//! screen.
//!
//! [`GemmSchedule::ProducerConsumer`] builds the same GEMM warp-specialised for Hopper instead
//! (`crate::gemm_bf16_ws`), [`GemmSchedule::Interleave4`] with four waves (`crate::gemm_bf16_i4`):
//! per-target schedule, one kernel (DESIGN.md principle 2).

use crate::KernelError;
use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::{Access, Expr, GlobalId, GridRemap, Kernel, KernelBuilder, RegId, Schedule};
use kittens_tile::{BaseShape, Layout::Col, Layout::Row, SharedTile};

/// Base tile of the A and B register tiles (HipKittens `rt_16x32_s`, seed 000 E.1) and of the
/// accumulators (`rt_16x16_s`).
const OPERAND: BaseShape = BaseShape::S16X32;
const ACC: BaseShape = BaseShape::S16X16;

/// Which schedule the GEMM is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmSchedule {
    /// 8-wave ping-pong (seed 000 E.1), the AMD schedule.
    PingPong8,
    /// 4-wave interleave (seed 000 §3.3.2): one wave per SIMD mixing loads and matrix work.
    Interleave4,
    /// One producer warpgroup loading, two consumer warpgroups multiplying from shared memory
    /// (Hopper `wgmma` style; refused on AMD, whose MFMAs read registers only).
    ProducerConsumer,
}

/// Tile sizes; the defaults are seed 000 E.1's (256×256 block, K step 64).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmConfig {
    pub schedule: GemmSchedule,
    /// Rows and columns of C per block (the seed's `BLOCK_SIZE`); a multiple of 128.
    pub block: u32,
    /// K per pipeline step (`K_STEP`); a multiple of 32.
    pub k_step: u32,
    pub remap: GridRemap,
}

impl Default for GemmConfig {
    fn default() -> Self {
        // E.1: WGM = 8, chunk WGM·WGM, 8 XCDs.
        GemmConfig {
            schedule: GemmSchedule::PingPong8,
            block: 256,
            k_step: 64,
            remap: GridRemap::XcdSwizzle {
                xcds: 8,
                window: 8,
                chunk: 64,
            },
        }
    }
}

impl GemmConfig {
    /// The configuration for one target: the warp-specialised schedule on Hopper, the ping-pong on CDNA
    /// with the largest K step (64, else 32) whose double-buffered A and B tiles fit the GPU's shared
    /// memory per block — on gfx942's 64 KiB that is 32, where the seed instead stages the next K tile in
    /// registers (seed 000 E.1, MI325X paragraph); gfx950's 160 KiB takes E.1's 64.
    pub fn for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        if !gpu.arch.is_amd() {
            return GemmConfig {
                schedule: GemmSchedule::ProducerConsumer,
                ..Self::default()
            };
        }
        let d = Self::default();
        let bytes = |ks: u32| 2 * 2 * 2 * (d.block / 2) * ks * 2; // {A,B} × 2 halves × 2 slots, bf16
        let k_step = [64, 32]
            .into_iter()
            .find(|&ks| bytes(ks) <= gpu.shared_bytes_per_block)
            .unwrap_or(32);
        GemmConfig {
            k_step,
            remap: GridRemap::XcdSwizzle {
                xcds: gpu.xcds,
                window: 8,
                chunk: 64,
            },
            ..d
        }
    }

    /// The smallest instance of the same schedule, for fast tests.
    pub fn small() -> Self {
        GemmConfig {
            block: 128,
            k_step: 32,
            ..Self::default()
        }
    }
}

/// Declares `m, n, k` and the tensors `a` (M×K), `b` (N×K), `c` (M×N), and a grid of `bm × bn` tiles.
pub(crate) fn declare(
    k: &mut KernelBuilder,
    bm: u32,
    bn: u32,
    remap: GridRemap,
) -> (Expr, [GlobalId; 3]) {
    let (m, n, kd) = (k.param("m"), k.param("n"), k.param("k"));
    let mut mat = |name, r: &Expr, c: &Expr, acc| {
        k.global(name, Bf16, &[("r", r.clone()), ("c", c.clone())], acc)
    };
    let g = [
        mat("a", &m, &kd, Access::Read),
        mat("b", &n, &kd, Access::Read),
        mat("c", &m, &n, Access::Write),
    ];
    k.grid(vec![m.ceil_div(bm as i64), n.ceil_div(bn as i64)], remap);
    (kd, g)
}

/// Parameter order of the built kernel: `m, n, k`; tensors `a, b, c`.
pub fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    match cfg.schedule {
        GemmSchedule::PingPong8 => ping_pong(cfg),
        GemmSchedule::Interleave4 => crate::gemm_bf16_i4::build(cfg),
        GemmSchedule::ProducerConsumer => crate::gemm_bf16_ws::build(cfg),
    }
}

fn ping_pong(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bs, ks) = (cfg.block, cfg.k_step);
    if bs % 128 != 0 || ks % 32 != 0 {
        return Err(KernelError::Config(format!(
            "gemm_bf16: block {bs} must be a multiple of 128, k_step {ks} of 32"
        )));
    }
    let (half, hm, hn) = (bs / 2, bs / 4, bs / 8); // half-block rows, per-wave accumulator rows and cols
    let mut k = KernelBuilder::new("gemm_bf16", Schedule::PingPong8);
    let (kd, [a, b, c]) = declare(&mut k, bs, bs, cfg.remap);
    let a_s = [0, 1].map(|h| k.shared_tile(&format!("a_s{h}"), SharedTile::new(Bf16, half, ks), 2));
    let b_s = [0, 1].map(|h| k.shared_tile(&format!("b_s{h}"), SharedTile::new(Bf16, half, ks), 2));
    let a_r = k.tile("a_r", Bf16, hm, ks, Row, OPERAND);
    let b_r = [0, 1].map(|j| k.tile(&format!("b_r{j}"), Bf16, hn, ks, Row, OPERAND));
    let acc: Vec<RegId> = (0..4)
        .map(|x| k.tile(&format!("c{}{}", x / 2, x % 2), F32, hm, hn, Col, ACC))
        .collect();
    let (row, col) = (k.block(0), k.block(1));
    let (wr, wc) = (k.wave() / 4, k.wave() % 4);
    let nt = kd.ceil_div(ks as i64);
    // G::load of half `h` of A (or B) for K step `t` into ring slot `slot`.
    let ga = |k: &KernelBuilder, h: i64, t: Expr| k.gtile(a, half, ks, &row * 2 + h, t);
    let gb = |k: &KernelBuilder, h: i64, t: Expr| k.gtile(b, half, ks, &col * 2 + h, t);
    acc.iter().for_each(|&r| k.zero(r));

    // Prologue: K step 0 into slot 0.
    for h in [0, 1] {
        k.load_async(k.smem(b_s[h], 0), gb(&k, h as i64, Expr::c(0)));
        k.load_async(k.smem(a_s[h], 0), ga(&k, h as i64, Expr::c(0)));
    }
    k.staggered(|k| {
        k.wait_async(2);
        k.barrier();
        k.load_async(k.smem(b_s[0], 1), gb(k, 0, Expr::c(1)));
        k.load_async(k.smem(a_s[0], 1), ga(k, 0, Expr::c(1)));
        k.load_async(k.smem(b_s[1], 1), gb(k, 1, Expr::c(1)));
        k.wait_async(3);
        k.barrier();
        k.for_range("tile", 0, nt, |k, t| {
            let (tic, toc) = (&t % 2, (&t + 1) % 2);
            k.memory("load a0 b0", |k| {
                k.load(b_r[0], k.smem(b_s[0], &tic).sub(hn, ks, &wc, 0));
                k.load(a_r, k.smem(a_s[0], &tic).sub(hm, ks, &wr, 0));
                k.load_async(k.smem(a_s[1], &toc), ga(k, 1, &t + 1));
                k.wait_shared(0);
            });
            k.compute("c00", |k| k.mma_abt(acc[0], a_r, b_r[0], acc[0]));
            k.memory("load b1", |k| {
                k.load(b_r[1], k.smem(b_s[1], &tic).sub(hn, ks, &wc, 0));
                k.load_async(k.smem(b_s[0], &tic), gb(k, 0, &t + 2));
                k.wait_shared(0);
            });
            k.compute("c01", |k| k.mma_abt(acc[1], a_r, b_r[1], acc[1]));
            k.memory("load a1", |k| {
                k.load(a_r, k.smem(a_s[1], &tic).sub(hm, ks, &wr, 0));
                k.load_async(k.smem(a_s[0], &tic), ga(k, 0, &t + 2));
                k.wait_shared(0);
            });
            k.compute("c10", |k| k.mma_abt(acc[2], a_r, b_r[0], acc[2]));
            k.memory("prefetch b1", |k| {
                k.load_async(k.smem(b_s[1], &tic), gb(k, 1, &t + 2));
                k.wait_async(3);
            });
            k.compute("c11", |k| k.mma_abt(acc[3], a_r, b_r[1], acc[3]));
        });
    });

    // Store: accumulator (i, j) of wave (wr, wc) is C tile (row·4 + 2i + wr, col·8 + 4j + wc) of hm × hn.
    for (x, &r) in acc.iter().enumerate() {
        let (i, j) = ((x / 2) as i64, (x % 2) as i64);
        let at = k.gtile(c, hm, hn, &row * 4 + &wr + 2 * i, &col * 8 + &wc + 4 * j);
        k.store(at, r);
    }
    Ok(k.finish()?)
}
