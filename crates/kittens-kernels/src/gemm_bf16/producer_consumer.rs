//! The BF16 GEMM warp-specialised, the Hopper schedule (HipKittens §3.3.1: TMA, `wgmma` from shared memory,
//! register reallocation): one producer warpgroup streams A and B into a ring of `STAGES` shared slots;
//! two consumer warpgroups (8 waves, 16 rows of C each — one `wgmma m64` per warpgroup) multiply straight
//! from shared memory. K step `t` lives in slot `t % STAGES`; the barrier after each load is the
//! hand-off of that slot.
//!
//! The program states the data flow, not the overlap: on the CPU interpreter the producer waits for each
//! load before handing it over. The Hopper lowering (`kittens_codegen::cuda::lower`) turns each hand-off
//! into per-slot full/empty mbarriers, so the producer runs up to `STAGES` K steps ahead of the
//! consumers, and the consumers keep one wgmma chain in flight. Register split 40 / 232 as in
//! ThunderKittens' H100 GEMM (`warpgroup::decrease_registers<40>` / `increase_registers<232>`).

use super::{declare, store_scaled, GemmConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Kernel, KernelBuilder, MmaForm, MmaOperand, Schedule, Scope};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// C rows per block: 8 consumer waves × 16.
const BM: u32 = 128;
/// Ring slots: 3 × (128 + 256) × 64 bf16 = 144 KiB, leaving room on the H100's 227 KiB for the
/// lowering's C staging (bench/NOTES.md: 3 and 4 stages measured the same).
const STAGES: i64 = 3;

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bn, ks) = (cfg.block, cfg.k_step);
    if bn % 64 != 0 || bn > 256 || ks % 32 != 0 {
        return Err(KernelError::Config(format!(
            "{} (producer/consumer): block {bn} must be a multiple of 64 up to 256, k_step {ks} of 32",
            cfg.types.kernel_name()
        )));
    }
    let sched = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 40,
        consumer_regs: 232,
    };
    let mut k = KernelBuilder::new(cfg.types.kernel_name(), sched);
    let decl = declare(&mut k, BM, bn, cfg.remap, &cfg.types);
    let (kd, [a, b, _]) = (decl.kd.clone(), decl.g);
    let dt = cfg.types.input;
    // Rows of `ks` operands are 64 or 128 bytes: the matching TMA/wgmma swizzle mode.
    let swz = if (ks * dt.bytes()).is_multiple_of(128) {
        Swizzle::NV_128B
    } else {
        Swizzle::NV_64B
    };
    let ring = STAGES as u32;
    let a_s = k.shared_tile("a_s", SharedTile::with_swizzle(dt, BM, ks, swz), ring);
    let b_s = k.shared_tile("b_s", SharedTile::with_swizzle(dt, bn, ks, swz), ring);
    let acc = k.tile("acc", F32, 16, bn, Layout::Row, BaseShape::S16X16);
    let scratch = decl
        .scales
        .map(|_| k.tile("scale", F32, 16, bn, Layout::Row, BaseShape::S16X16));
    let (row, col) = (k.block(0), k.block(1));
    let nt = kd.ceil_div(ks as i64);
    let cw = k.wave() - 4; // consumer wave, 0..8
    k.roles(
        |k| {
            k.for_range("t", 0, &nt, |k, t| {
                let slot = &t % STAGES;
                k.load_async_by(
                    Scope::WarpGroup,
                    k.smem(a_s, slot.clone()),
                    k.gtile(a, BM, ks, &row, &t),
                );
                k.load_async_by(
                    Scope::WarpGroup,
                    k.smem(b_s, slot),
                    k.gtile(b, bn, ks, &col, &t),
                );
                k.wait_async(0);
                k.barrier(); // slot t % STAGES to the consumers
            });
        },
        |k| {
            k.zero(acc);
            k.for_range("t", 0, &nt, |k, t| {
                k.barrier(); // K step t has landed
                let a_v = MmaOperand::Shared(k.smem(a_s, &t % STAGES).sub(16, ks, &cw, 0));
                let b_v = MmaOperand::Shared(k.smem(b_s, &t % STAGES));
                k.mma(MmaForm::Abt, acc, a_v, b_v, Some(acc));
            });
            store_scaled(k, &decl, scratch, acc, 16, bn, &row * 8 + &cw, col.clone());
        },
    );
    Ok(k.finish()?)
}
