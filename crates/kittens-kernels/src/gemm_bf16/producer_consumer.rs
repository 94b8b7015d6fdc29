//! The BF16 GEMM warp-specialised, the Hopper schedule (HipKittens §3.3.1: TMA, `wgmma` from shared memory,
//! register reallocation): one producer warpgroup streams A and B into a ring of `stages` shared slots;
//! one or two consumer warpgroups multiply straight from shared memory. K step `t` lives in slot
//! `t % stages`; the barrier after each load is the hand-off of that slot.
//!
//! One program, three block heights ([`GemmConfig::block_rows`]), each consumer wave owning 16-row
//! slices of C (one `wgmma m64` per warpgroup and slice):
//!
//! | rows | consumer warpgroups | slices per wave | wgmma chains per K step and warpgroup |
//! |---|---|---|---|
//! | 64 | 1 | 1 | 1 (small M: no rows wasted on an 8- or 16-token batch beyond 64) |
//! | 128 | 2 | 1 | 1 |
//! | 256 | 2 | 2 (rows `16w` and `128 + 16w`) | 2, in one commit group |
//!
//! The block's columns are [`GemmConfig::block`] (128 or 256: wgmma's N); each slice holds `block / 2`
//! fp32 per thread, and a wave holds at most 128 of them (the 232 registers of the consumers).
//!
//! The program states the data flow, not the overlap: on the CPU interpreter the producer waits for each
//! load before handing it over. The Hopper lowering (`kittens_codegen::cuda::lower`) turns each hand-off
//! into per-slot full/empty mbarriers, so the producer runs up to `stages` K steps ahead of the
//! consumers, and the consumers keep one wgmma chain in flight. Register split 40 / 232 as in
//! ThunderKittens' H100 GEMM (`warpgroup::decrease_registers<40>` / `increase_registers<232>`) with two
//! consumer warpgroups; with one, nothing to rebalance (every warpgroup keeps the launch's 256).

use super::{declare, store_scaled, BLayout, GemmConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Kernel, KernelBuilder, MmaForm, MmaOperand, Schedule, Scope};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Accumulator floats one consumer thread may hold: 128 (a 64×256 fp32 tile over a warpgroup), the
/// most that fits the consumers' 232 registers beside addresses and descriptors.
const MAX_ACC_PER_THREAD: u32 = 128;

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bm, bn, ks) = (cfg.block_rows, cfg.block, cfg.k_step);
    let name = cfg.types.kernel_name();
    let bad = |why: String| {
        Err(KernelError::Config(format!(
            "{name} (producer/consumer): {why}"
        )))
    };
    if bn % 64 != 0 || bn > 256 || ks % 32 != 0 {
        return bad(format!(
            "block {bn} must be a multiple of 64 up to 256, k_step {ks} of 32"
        ));
    }
    if !matches!(bm, 64 | 128 | 256) {
        return bad(format!("block_rows {bm} must be 64, 128 or 256"));
    }
    if !(2..=8).contains(&cfg.stages) {
        return bad(format!("stages {} must be 2 to 8", cfg.stages));
    }
    let consumers = if bm == 64 { 1 } else { 2 };
    let waves = 4 * consumers;
    // 16-row slices of C per consumer wave.
    let slices = bm / (16 * waves);
    if slices * bn / 2 > MAX_ACC_PER_THREAD {
        return bad(format!(
            "a {bm}x{bn} block needs {} accumulators per thread, over {MAX_ACC_PER_THREAD}",
            slices * bn / 2
        ));
    }
    let sched = if consumers == 1 {
        Schedule::ProducerConsumer {
            producers: 1,
            consumers,
            producer_regs: 256,
            consumer_regs: 256,
        }
    } else {
        Schedule::ProducerConsumer {
            producers: 1,
            consumers,
            producer_regs: 40,
            consumer_regs: 232,
        }
    };
    let mut k = KernelBuilder::new(name, sched);
    let decl = declare(&mut k, bm, bn, cfg.remap, &cfg.types, cfg.b_layout);
    let (kd, [a, b, _]) = (decl.kd.clone(), decl.g);
    let dt = cfg.types.input;
    // Rows of `ks` operands are 64 or 128 bytes: the matching TMA/wgmma swizzle mode.
    let swz = if (ks * dt.bytes()).is_multiple_of(128) {
        Swizzle::NV_128B
    } else {
        Swizzle::NV_64B
    };
    let stages = i64::from(cfg.stages);
    let a_s = k.shared_tile("a_s", SharedTile::with_swizzle(dt, bm, ks, swz), cfg.stages);
    // B's slot as B is stored: `bn × ks` (K contiguous), or `ks × bn` (N contiguous; the Hopper
    // lowering keeps such a tile as 64-column atoms in the 128-byte swizzle, one TMA box each).
    let kn = cfg.b_layout == BLayout::Kn;
    if kn && (dt.bytes() != 2 || bn % 64 != 0) {
        return bad(format!(
            "B as K x N needs bf16 operands and a block width that is a multiple of 64, got {dt} and {bn}"
        ));
    }
    let b_tile = if kn {
        SharedTile::with_swizzle(dt, ks, bn, Swizzle::NV_128B)
    } else {
        SharedTile::with_swizzle(dt, bn, ks, swz)
    };
    let b_s = k.shared_tile("b_s", b_tile, cfg.stages);
    let (b_rows, b_cols, form) = if kn {
        (ks, bn, MmaForm::Ab)
    } else {
        (bn, ks, MmaForm::Abt)
    };
    let accs: Vec<_> = (0..slices)
        .map(|h| {
            k.tile(
                &format!("acc{h}"),
                F32,
                16,
                bn,
                Layout::Row,
                BaseShape::S16X16,
            )
        })
        .collect();
    let scratch = decl
        .scales
        .map(|_| k.tile("scale", F32, 16, bn, Layout::Row, BaseShape::S16X16));
    let (row, col) = (k.block(0), k.block(1));
    let nt = kd.ceil_div(ks as i64);
    let cw = k.wave() - 4; // consumer wave, 0..waves
                           // Slice `h` of consumer wave `cw`: 16-row block `h·waves + cw` of the block's rows.
    let slice = |h: u32| &cw + i64::from(h * waves);
    k.roles(
        |k| {
            k.for_range("t", 0, &nt, |k, t| {
                let slot = &t % stages;
                k.load_async_by(
                    Scope::WarpGroup,
                    k.smem(a_s, slot.clone()),
                    k.gtile(a, bm, ks, &row, &t),
                );
                let b_g = if kn {
                    k.gtile(b, b_rows, b_cols, &t, &col)
                } else {
                    k.gtile(b, b_rows, b_cols, &col, &t)
                };
                k.load_async_by(Scope::WarpGroup, k.smem(b_s, slot), b_g);
                k.wait_async(0);
                k.barrier(); // slot t % stages to the consumers
            });
        },
        |k| {
            for &acc in &accs {
                k.zero(acc);
            }
            k.for_range("t", 0, &nt, |k, t| {
                k.barrier(); // K step t has landed
                let b_v = MmaOperand::Shared(k.smem(b_s, &t % stages));
                for (h, &acc) in accs.iter().enumerate() {
                    let a_v = k.smem(a_s, &t % stages).sub(16, ks, slice(h as u32), 0);
                    k.mma(form, acc, MmaOperand::Shared(a_v), b_v.clone(), Some(acc));
                }
            });
            for (h, &acc) in accs.iter().enumerate() {
                let ti = &row * i64::from(bm / 16) + slice(h as u32);
                store_scaled(k, &decl, scratch, acc, 16, bn, ti, col.clone());
            }
        },
    );
    Ok(k.finish()?)
}
