//! BF16 GEMM `C = A·Bᵀ` (A M×K, B N×K, C M×N bf16, fp32 accumulation), one kernel with a schedule per
//! target:
//!
//! - [`GemmSchedule::PingPong8`] ([`ping_pong`]): the 8-wave ping-pong of seed 000 E.1 (Fig. 21), the
//!   AMD schedule, with the next K step staged in LDS or in registers ([`Staging`]);
//! - [`GemmSchedule::Interleave4`] ([`interleave4`]): four waves, one per SIMD (seed 000 §3.3.2);
//! - [`GemmSchedule::ProducerConsumer`] ([`producer_consumer`]): warp-specialised for Hopper.
//!
//! This module holds what the three share: the configuration, the declarations of `m, n, k` and
//! `a, b, c`, and [`build`], which picks the schedule. Each schedule's module reads only these.

mod interleave4;
mod ping_pong;
pub mod problem;
mod producer_consumer;

use crate::KernelError;
use kittens_hw::dtype::DType::Bf16;
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder};

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
        GemmSchedule::PingPong8 => ping_pong::build(cfg),
        GemmSchedule::Interleave4 => interleave4::build(cfg),
        GemmSchedule::ProducerConsumer => producer_consumer::build(cfg),
    }
}
