//! BF16 GEMM `C = A·Bᵀ` (A M×K, B N×K, C M×N bf16, fp32 accumulation) with the 8-wave ping-pong
//! schedule of seed 000 E.1 (Fig. 21).
//!
//! Each block computes a `block × block` tile of C with 8 waves arranged 2×4; each wave owns four
//! `block/4 × block/8` accumulators (`c[i][j]`). A and B reach the waves through half-block shared
//! tiles (`a_s[h]`, `b_s[h]`). The hot loop is eight clusters, memory and compute alternating; the
//! schedule turns them into the ping-pong (priority 1 on compute, a barrier at every cluster end, the
//! conditional stagger barrier before the loop and the re-join after it).
//!
//! Where the next K step waits is the [`Staging`]: with [`Staging::Lds`] (gfx950) the shared tiles are
//! a double-buffered ring filled by async loads straight into LDS; with [`Staging::Registers`] (gfx942,
//! whose 64 KiB hold only one buffer) each wave loads its band of the next K step into registers during
//! the first three memory clusters and writes it to the single buffer in the fourth, after every wave
//! has read the current step (seed 000 E.1, MI325X paragraph). Same clusters, same reads, same MFMAs.
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
use kittens_ir::{
    Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Schedule, SharedId, SharedView,
};
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

/// Where the ping-pong GEMM keeps the next K step while the current one is multiplied (seed 000 E.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staging {
    /// Two LDS buffers per operand half, filled by async global→LDS loads two K steps ahead
    /// (MI355X, Fig. 21): 128 KiB at the seed's tiles.
    Lds,
    /// One LDS buffer per operand half; each wave loads its band of the next K step into registers
    /// and writes it to LDS once the buffer has been read (MI325X: "double buffer using the register
    /// file"): 64 KiB at the seed's tiles. Needs a block that is a multiple of 256.
    Registers,
}

/// Tile sizes; the defaults are seed 000 E.1's (256×256 block, K step 64).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmConfig {
    pub schedule: GemmSchedule,
    /// Rows and columns of C per block (the seed's `BLOCK_SIZE`); a multiple of 128.
    pub block: u32,
    /// K per pipeline step (`K_STEP`); a multiple of 32.
    pub k_step: u32,
    pub remap: GridOrder,
    /// Where the next K step is staged; only the ping-pong schedule reads it.
    pub staging: Staging,
}

impl Default for GemmConfig {
    fn default() -> Self {
        // E.1: WGM = 8, chunk WGM·WGM, 8 XCDs.
        GemmConfig {
            schedule: GemmSchedule::PingPong8,
            block: 256,
            k_step: 64,
            remap: GridOrder::XcdSwizzle {
                xcds: 8,
                window: 8,
                chunk: 64,
            },
            staging: Staging::Lds,
        }
    }
}

impl GemmConfig {
    /// The configuration for one target: the warp-specialised schedule on Hopper, the ping-pong on CDNA
    /// with E.1's 256×256 block and K step 64, staged in LDS where a double buffer of A and B fits the
    /// GPU's shared memory per block (gfx950's 160 KiB) and in registers where only one does (gfx942's
    /// 64 KiB, as HipKittens does on MI325X, seed 000 E.1); a K step of 32 in registers if even that
    /// does not fit.
    pub fn for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        if !gpu.arch.is_amd() {
            return GemmConfig {
                schedule: GemmSchedule::ProducerConsumer,
                ..Self::default()
            };
        }
        let d = Self::default();
        let fits = |&(staging, k_step): &(Staging, u32)| {
            let c = GemmConfig {
                staging,
                k_step,
                ..d
            };
            c.shared_bytes() <= gpu.shared_bytes_per_block
        };
        let (staging, k_step) = [(Staging::Lds, 64), (Staging::Registers, 64)]
            .into_iter()
            .find(fits)
            .unwrap_or((Staging::Registers, 32));
        GemmConfig {
            k_step,
            staging,
            remap: GridOrder::XcdSwizzle {
                xcds: gpu.xcds,
                window: 8,
                chunk: 64,
            },
            ..d
        }
    }

    /// Shared memory of the ping-pong kernel: A and B, two halves each of `block/2 × k_step` bf16, in
    /// two ring slots with LDS staging and one with register staging.
    pub fn shared_bytes(&self) -> u32 {
        let slots = match self.staging {
            Staging::Lds => 2,
            Staging::Registers => 1,
        };
        2 * 2 * slots * (self.block / 2) * self.k_step * 2
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
    remap: GridOrder,
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
    if cfg.staging == Staging::Registers && cfg.schedule != GemmSchedule::PingPong8 {
        return Err(KernelError::Config(format!(
            "gemm_bf16: register staging is built for the ping-pong schedule, not {:?}",
            cfg.schedule
        )));
    }
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
    let (hm, hn) = (bs / 4, bs / 8); // per-wave accumulator rows and cols
    let mut k = KernelBuilder::new("gemm_bf16", Schedule::PingPong8);
    let (kd, g) = declare(&mut k, bs, bs, cfg.remap);
    let ops = Operands::new(&mut k, cfg, g)?;
    let a_r = k.tile("a_r", Bf16, hm, ks, Row, OPERAND);
    let b_r = [0, 1].map(|j| k.tile(&format!("b_r{j}"), Bf16, hn, ks, Row, OPERAND));
    let acc: Vec<RegId> = (0..4)
        .map(|x| k.tile(&format!("c{}{}", x / 2, x % 2), F32, hm, hn, Col, ACC))
        .collect();
    let (wr, wc) = (k.wave() / 4, k.wave() % 4);
    let nt = kd.ceil_div(ks as i64);
    let lds = cfg.staging == Staging::Lds;
    acc.iter().for_each(|&r| k.zero(r));

    // Prologue: K step 0 (with register staging: into the one buffer, visible to every wave).
    for h in [0, 1] {
        ops.fetch(&mut k, B, h, Expr::c(0));
        ops.fetch(&mut k, A, h, Expr::c(0));
    }
    if !lds {
        ops.commit(&mut k);
        k.wait_shared(0);
        k.barrier();
    }
    k.staggered(|k| {
        if lds {
            k.wait_async(2);
            k.barrier();
            ops.fetch(k, B, 0, Expr::c(1));
            ops.fetch(k, A, 0, Expr::c(1));
            ops.fetch(k, B, 1, Expr::c(1));
            k.wait_async(3);
            k.barrier();
        }
        k.for_range("tile", 0, nt, |k, t| {
            // LDS staging fetches two K steps ahead (slot t % 2 is free again), registers one.
            let ahead = &t + if lds { 2 } else { 1 };
            k.memory("load a0 b0", |k| {
                k.load(b_r[0], ops.read(k, B, 0, &t).sub(hn, ks, &wc, 0));
                k.load(a_r, ops.read(k, A, 0, &t).sub(hm, ks, &wr, 0));
                ops.fetch(k, A, 1, &t + 1);
                k.wait_shared(0);
            });
            k.compute("c00", |k| k.mma_abt(acc[0], a_r, b_r[0], acc[0]));
            k.memory("load b1", |k| {
                k.load(b_r[1], ops.read(k, B, 1, &t).sub(hn, ks, &wc, 0));
                ops.fetch(k, B, 0, ahead.clone());
                k.wait_shared(0);
            });
            k.compute("c01", |k| k.mma_abt(acc[1], a_r, b_r[1], acc[1]));
            k.memory("load a1", |k| {
                k.load(a_r, ops.read(k, A, 1, &t).sub(hm, ks, &wr, 0));
                ops.fetch(k, A, 0, ahead.clone());
                if !lds {
                    ops.fetch(k, B, 1, ahead.clone());
                }
                k.wait_shared(0);
            });
            k.compute("c10", |k| k.mma_abt(acc[2], a_r, b_r[0], acc[2]));
            let last = if lds {
                "prefetch b1"
            } else {
                "registers -> LDS"
            };
            k.memory(last, |k| {
                if lds {
                    ops.fetch(k, B, 1, ahead.clone());
                    k.wait_async(3);
                } else {
                    ops.commit(k);
                    k.wait_shared(0);
                }
            });
            k.compute("c11", |k| k.mma_abt(acc[3], a_r, b_r[1], acc[3]));
        });
    });

    // Store: accumulator (i, j) of wave (wr, wc) is C tile (row·4 + 2i + wr, col·8 + 4j + wc) of hm × hn.
    let (row, col) = (k.block(0), k.block(1));
    for (x, &r) in acc.iter().enumerate() {
        let (i, j) = ((x / 2) as i64, (x % 2) as i64);
        let at = k.gtile(g[2], hm, hn, &row * 4 + &wr + 2 * i, &col * 8 + &wc + 4 * j);
        k.store(at, r);
    }
    Ok(k.finish()?)
}

/// Operand index of A and B in [`Operands`].
const A: usize = 0;
const B: usize = 1;

/// The block's A and B operands on their way from global memory to the waves: half-block shared tiles
/// `s[op][h]` (two ring slots each with LDS staging, one with register staging) and, with register
/// staging, each wave's band of every half (`stage[op][h]`, `half/8` rows) where the next K step waits.
struct Operands {
    staging: Staging,
    g: [GlobalId; 2],
    s: [[SharedId; 2]; 2],
    stage: Option<[[RegId; 2]; 2]>,
    half: u32,
    ks: u32,
}

impl Operands {
    fn new(k: &mut KernelBuilder, cfg: &GemmConfig, g: [GlobalId; 3]) -> Result<Self, KernelError> {
        let (half, ks) = (cfg.block / 2, cfg.k_step);
        let ring = match cfg.staging {
            Staging::Lds => 2,
            Staging::Registers => 1,
        };
        let tile = || SharedTile::new(Bf16, half, ks);
        let s =
            ["a", "b"].map(|op| [0, 1].map(|h| k.shared_tile(&format!("{op}_s{h}"), tile(), ring)));
        let stage = if cfg.staging == Staging::Registers {
            // Eight waves share the copy; a band must hold whole 16-row base tiles.
            if half % (8 * 16) != 0 {
                return Err(KernelError::Config(format!(
                    "gemm_bf16: register staging needs a block that is a multiple of 256, got {}",
                    cfg.block
                )));
            }
            let band = |k: &mut KernelBuilder, name: String| {
                k.tile(&name, Bf16, half / 8, ks, Row, OPERAND)
            };
            Some(["a", "b"].map(|op| [0, 1].map(|h| band(k, format!("{op}_next{h}")))))
        } else {
            None
        };
        Ok(Operands {
            staging: cfg.staging,
            g: [g[0], g[1]],
            s,
            stage,
            half,
            ks,
        })
    }

    /// The shared tile holding half `h` of operand `op` for K step `t`.
    fn read(&self, k: &KernelBuilder, op: usize, h: usize, t: &Expr) -> SharedView {
        match self.staging {
            Staging::Lds => k.smem(self.s[op][h], t % 2),
            Staging::Registers => k.smem(self.s[op][h], 0),
        }
    }

    /// Starts bringing half `h` of operand `op` for K step `t`: HipKittens' `G::load` straight into
    /// the LDS slot `t % 2`, or, with register staging, this wave's band into its registers.
    fn fetch(&self, k: &mut KernelBuilder, op: usize, h: usize, t: Expr) {
        let blk = k.block(op as u8) * 2 + h as i64; // half-block row of A (op 0) or B (op 1)
        match self.stage {
            None => {
                let dst = self.read(k, op, h, &t);
                let src = k.gtile(self.g[op], self.half, self.ks, blk, t);
                k.load_async(dst, src);
            }
            Some(stage) => {
                let src = k.gtile(self.g[op], self.half / 8, self.ks, blk * 8 + k.wave(), t);
                k.load_global(stage[op][h], src);
            }
        }
    }

    /// Register staging: every wave writes its staged bands into the LDS buffer (the seed's `ds_write`
    /// after the compute); nothing with LDS staging.
    fn commit(&self, k: &mut KernelBuilder) {
        let Some(stage) = self.stage else { return };
        for (op, h) in [(A, 0), (A, 1), (B, 0), (B, 1)] {
            let dst = k
                .smem(self.s[op][h], 0)
                .sub(self.half / 8, self.ks, k.wave(), 0);
            k.store_shared(dst, stage[op][h]);
        }
    }
}
