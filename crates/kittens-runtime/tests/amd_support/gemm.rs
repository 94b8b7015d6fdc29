//! A BF16 GEMM `C = A·Bᵀ` written in the tile language with the 8-wave ping-pong schedule of HipKittens
//! E.1, kept as a test program closer to Fig. 21's literal waits (`wait_shared(1)` → `lgkmcnt(8)`) than
//! the registry's `kittens_kernels::gemm_bf16`, which is what `kittens compile` builds (both targets:
//! tests/amd_registry.rs).
//!
//! 256×256 output tile per block, K step 64, 8 waves as 2×4 (warp_row = wave / 4, warp_col = wave % 4),
//! each wave owning a 2×2 grid of 64×32 accumulators; chiplet remap (Algorithm 1, window 8, chunk 64).
//! - gfx950 (160 KiB LDS): A and B halves double-buffered in LDS (ring of 4 = 2 buffers × 2 halves),
//!   filled by async loads straight into LDS, the E.1 hot loop cluster by cluster.
//! - gfx942 (64 KiB LDS): one LDS buffer; the next K tile is double-buffered in registers (global →
//!   registers during compute, registers → LDS after the last read of the buffer), as HipKittens does on
//!   MI325X (HipKittens E.1).
#![allow(dead_code)]

use kittens_hw::dtype::DType;
use kittens_hw::Arch;
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_tile::{BaseShape, Layout, SharedTile};

pub const BLOCK: i64 = 256;
pub const HALF: u32 = 128;
pub const K_STEP: u32 = 64;

/// The operands every GEMM test program here computes on: parameters M, N, K; A (M×K) and B (N×K) bf16,
/// read; C (M×N) of `c_dtype`, written.
pub struct AbtOperands {
    pub m: Expr,
    pub n: Expr,
    pub k: Expr,
    pub a: GlobalId,
    pub b: GlobalId,
    pub c: GlobalId,
}

pub fn abt_operands(b: &mut KernelBuilder, c_dtype: DType) -> AbtOperands {
    let (m, n, k) = (b.param("M"), b.param("N"), b.param("K"));
    let mat = |b: &mut KernelBuilder,
               name: &str,
               dtype,
               rows: (&str, &Expr),
               cols: (&str, &Expr),
               access| {
        b.global(
            name,
            dtype,
            &[(rows.0, rows.1.clone()), (cols.0, cols.1.clone())],
            access,
        )
    };
    let a = mat(b, "a", DType::Bf16, ("m", &m), ("k", &k), Access::Read);
    let bb = mat(b, "b", DType::Bf16, ("n", &n), ("k", &k), Access::Read);
    let c = mat(b, "c", c_dtype, ("m", &m), ("n", &n), Access::Write);
    AbtOperands {
        m,
        n,
        k,
        a,
        b: bb,
        c,
    }
}

pub fn gemm_bf16(arch: Arch) -> Kernel {
    let mut b = KernelBuilder::new("gemm_bf16", Schedule::PingPong8);
    let AbtOperands {
        m,
        n,
        k,
        a: ga,
        b: gb,
        c: gc,
    } = abt_operands(&mut b, DType::Bf16);
    b.grid(
        vec![m.ceil_div(BLOCK), n.ceil_div(BLOCK)],
        GridOrder::XcdSwizzle {
            xcds: 8,
            window: 8,
            chunk: 64,
        },
    );
    // HipKittens' 16×32 register base tile on both targets: one MFMA per base-tile pair on CDNA4,
    // two 16×16×16 MFMAs (K split) on CDNA3.
    let base = BaseShape::S16X32;
    let ring = if arch == Arch::Cdna4 { 4 } else { 2 };
    let sa = b.shared_tile("As", SharedTile::new(DType::Bf16, HALF, K_STEP), ring);
    let sb = b.shared_tile("Bs", SharedTile::new(DType::Bf16, HALF, K_STEP), ring);
    let a_t = b.tile("A_tile", DType::Bf16, 64, 64, Layout::Row, base);
    let b_t = [0, 1].map(|i| {
        b.tile(
            &format!("B_tile_{i}"),
            DType::Bf16,
            32,
            64,
            Layout::Row,
            base,
        )
    });
    let acc = [0, 1].map(|i| {
        [0, 1].map(|j| {
            b.tile(
                &format!("C_{i}{j}"),
                DType::F32,
                64,
                32,
                Layout::Col,
                BaseShape::S16X16,
            )
        })
    });
    let (warp_row, warp_col) = (b.wave() / 4, b.wave() % 4);
    let (row, col) = (b.block(0), b.block(1));
    let num_tiles = k.ceil_div(K_STEP as i64);
    // Half `h` (0/1) of the block's A rows (B rows) for K tile `t`.
    let a_src = |b: &KernelBuilder, h: i64, t: Expr| b.gtile(ga, HALF, K_STEP, &row * 2 + h, t);
    let b_src = |b: &KernelBuilder, h: i64, t: Expr| b.gtile(gb, HALF, K_STEP, &col * 2 + h, t);
    for r in acc.iter().flatten() {
        b.zero(*r);
    }
    if arch == Arch::Cdna4 {
        hot_loop_lds_double_buffer(
            &mut b,
            [sa, sb],
            a_t,
            b_t,
            acc,
            (&warp_row, &warp_col),
            &num_tiles,
            &a_src,
            &b_src,
        );
    } else {
        hot_loop_register_buffer(
            &mut b,
            [sa, sb],
            a_t,
            b_t,
            acc,
            (&warp_row, &warp_col),
            &num_tiles,
            [ga, gb],
            (&row, &col),
        );
    }
    for (i, j) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let r0 = &row * BLOCK + i * HALF as i64 + &warp_row * 64;
        let c0 = &col * BLOCK + j * HALF as i64 + &warp_col * 32;
        let dst = b.gview(gc, vec![r0, c0], 0, 1, 64, 32);
        b.store(dst, acc[i as usize][j as usize]);
    }
    b.finish().expect("gemm_bf16 builds")
}

type Src<'a> = &'a dyn Fn(&KernelBuilder, i64, Expr) -> kittens_ir::GlobalView;

/// HipKittens E.1 (MI355X): prologue, conditional stagger, four compute and four memory clusters.
#[allow(clippy::too_many_arguments)]
fn hot_loop_lds_double_buffer(
    b: &mut KernelBuilder,
    [sa, sb]: [kittens_ir::SharedId; 2],
    a_t: kittens_ir::RegId,
    b_t: [kittens_ir::RegId; 2],
    acc: [[kittens_ir::RegId; 2]; 2],
    (warp_row, warp_col): (&Expr, &Expr),
    num_tiles: &Expr,
    a_src: Src,
    b_src: Src,
) {
    // Ring index of (buffer, half).
    let slot = |buf: Expr, h: i64| buf * 2 + h;
    // Prologue: K step 0 into buffer 0.
    let (bs0, as0, bs1, as1) = (b.smem(sb, 0), b.smem(sa, 0), b.smem(sb, 1), b.smem(sa, 1));
    let (s0, s1) = (b_src(b, 0, 0.into()), a_src(b, 0, 0.into()));
    let (s2, s3) = (b_src(b, 1, 0.into()), a_src(b, 1, 0.into()));
    b.load_async(bs0, s0);
    b.load_async(as0, s1);
    b.load_async(bs1, s2);
    b.load_async(as1, s3);
    b.staggered(|b| {
        b.wait_async(2);
        b.barrier();
        let (d0, d1, d2) = (
            b.smem(sb, slot(1.into(), 0)),
            b.smem(sa, slot(1.into(), 0)),
            b.smem(sb, slot(1.into(), 1)),
        );
        let (s0, s1, s2) = (
            b_src(b, 0, 1.into()),
            a_src(b, 0, 1.into()),
            b_src(b, 1, 1.into()),
        );
        b.load_async(d0, s0);
        b.load_async(d1, s1);
        b.load_async(d2, s2);
        b.wait_async(3);
        b.barrier();
        b.for_range("tile", 0, num_tiles.clone(), |b, t| {
            let tic = &t % 2;
            let toc = Expr::c(1) - &tic;
            b.memory("read B0 and A0, prefetch A1 of the next tile", |b| {
                let vb = b
                    .smem(sb, slot(tic.clone(), 0))
                    .sub(32, 64, warp_col.clone(), 0);
                let va = b
                    .smem(sa, slot(tic.clone(), 0))
                    .sub(64, 64, warp_row.clone(), 0);
                b.load(b_t[0], vb);
                b.load(a_t, va);
                let (d, s) = (b.smem(sa, slot(toc.clone(), 1)), a_src(b, 1, &t + 1));
                b.load_async(d, s);
                b.wait_shared(1);
            });
            b.compute("C00 += A·B0ᵀ", |b| {
                b.wait_shared(0);
                b.mma_abt(acc[0][0], a_t, b_t[0], acc[0][0]);
            });
            b.memory("read B1, prefetch B0 two tiles ahead", |b| {
                let vb = b
                    .smem(sb, slot(tic.clone(), 1))
                    .sub(32, 64, warp_col.clone(), 0);
                b.load(b_t[1], vb);
                let (d, s) = (b.smem(sb, slot(tic.clone(), 0)), b_src(b, 0, &t + 2));
                b.load_async(d, s);
            });
            b.compute("C01 += A·B1ᵀ", |b| {
                b.wait_shared(0);
                b.mma_abt(acc[0][1], a_t, b_t[1], acc[0][1]);
            });
            b.memory("read A1, prefetch A0 two tiles ahead", |b| {
                let va = b
                    .smem(sa, slot(tic.clone(), 1))
                    .sub(64, 64, warp_row.clone(), 0);
                b.load(a_t, va);
                let (d, s) = (b.smem(sa, slot(tic.clone(), 0)), a_src(b, 0, &t + 2));
                b.load_async(d, s);
            });
            b.compute("C10 += A·B0ᵀ", |b| {
                b.wait_shared(0);
                b.mma_abt(acc[1][0], a_t, b_t[0], acc[1][0]);
            });
            b.memory("prefetch B1 two tiles ahead, wait for the next tile", |b| {
                let (d, s) = (b.smem(sb, slot(tic.clone(), 1)), b_src(b, 1, &t + 2));
                b.load_async(d, s);
                b.wait_async(3);
            });
            b.compute("C11 += A·B1ᵀ", |b| {
                b.mma_abt(acc[1][1], a_t, b_t[1], acc[1][1]);
            });
        });
    });
    b.wait_async(0);
}

/// HipKittens E.1 (MI325X): one LDS buffer, the next K tile staged in registers.
#[allow(clippy::too_many_arguments)]
fn hot_loop_register_buffer(
    b: &mut KernelBuilder,
    [sa, sb]: [kittens_ir::SharedId; 2],
    a_t: kittens_ir::RegId,
    b_t: [kittens_ir::RegId; 2],
    acc: [[kittens_ir::RegId; 2]; 2],
    (warp_row, warp_col): (&Expr, &Expr),
    num_tiles: &Expr,
    [ga, gb]: [kittens_ir::GlobalId; 2],
    (row, col): (&Expr, &Expr),
) {
    // Each wave stages a 16-row band of each of the four halves (A0, A1, B0, B1).
    let stage = [0, 1, 2, 3].map(|i| {
        b.tile(
            &format!("stage_{i}"),
            DType::Bf16,
            16,
            64,
            Layout::Row,
            BaseShape::S16X32,
        )
    });
    let band = |b: &KernelBuilder, which: usize, t: Expr| {
        let (g, blk) = if which < 2 { (ga, row) } else { (gb, col) };
        let r0 = blk * BLOCK + (which as i64 % 2) * HALF as i64 + Expr::Wave * 16;
        b.gview(g, vec![r0, t * K_STEP as i64], 0, 1, 16, 64)
    };
    let fill = |b: &mut KernelBuilder, which: usize, t: Expr| {
        let src = band(b, which, t);
        b.load_global(stage[which], src);
    };
    let spill = |b: &mut KernelBuilder| {
        for (which, s) in stage.iter().enumerate() {
            let buf = if which < 2 { sa } else { sb };
            let dst = b.smem(buf, 0).sub(16, 64, Expr::Wave, 0);
            let dst = kittens_ir::SharedView {
                index: Expr::c(which as i64 % 2),
                ..dst
            };
            b.store_shared(dst, *s);
        }
    };
    for which in 0..4 {
        fill(b, which, Expr::c(0));
    }
    spill(b);
    b.wait_shared(0);
    b.barrier();
    b.staggered(|b| {
        b.for_range("tile", 0, num_tiles.clone(), |b, t| {
            b.memory("read B0 and A0, stage A0 of the next tile", |b| {
                let vb = b.smem(sb, 0).sub(32, 64, warp_col.clone(), 0);
                let va = b.smem(sa, 0).sub(64, 64, warp_row.clone(), 0);
                b.load(b_t[0], vb);
                b.load(a_t, va);
                fill(b, 0, &t + 1);
            });
            b.compute("C00 += A·B0ᵀ", |b| {
                b.wait_shared(0);
                b.mma_abt(acc[0][0], a_t, b_t[0], acc[0][0]);
            });
            b.memory("read B1, stage B0 of the next tile", |b| {
                let vb = b.smem(sb, 1).sub(32, 64, warp_col.clone(), 0);
                b.load(b_t[1], vb);
                fill(b, 2, &t + 1);
            });
            b.compute("C01 += A·B1ᵀ", |b| {
                b.wait_shared(0);
                b.mma_abt(acc[0][1], a_t, b_t[1], acc[0][1]);
            });
            b.memory("read A1, stage A1 and B1 of the next tile", |b| {
                let va = b.smem(sa, 1).sub(64, 64, warp_row.clone(), 0);
                b.load(a_t, va);
                fill(b, 1, &t + 1);
                fill(b, 3, &t + 1);
                b.wait_shared(0);
            });
            b.compute("C10 += A·B0ᵀ", |b| {
                b.mma_abt(acc[1][0], a_t, b_t[0], acc[1][0]);
            });
            b.memory("registers -> LDS: the next tile", |b| {
                spill(b);
                b.wait_shared(0);
            });
            b.compute("C11 += A·B1ᵀ", |b| {
                b.mma_abt(acc[1][1], a_t, b_t[1], acc[1][1]);
            });
        });
    });
}
