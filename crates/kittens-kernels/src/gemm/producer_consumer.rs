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

use super::{declare, store_scaled, ALayout, BLayout, GemmConfig, Scales};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Expr, Kernel, KernelBuilder, MmaForm, MmaOperand, Schedule, Scope};
use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};

/// Accumulator floats one consumer thread may hold: 128 (a 64×256 fp32 tile over a warpgroup), the
/// most that fits the consumers' 232 registers beside addresses and descriptors.
const MAX_ACC_PER_THREAD: u32 = 128;
/// The same with promotion ([`GemmConfig::promote`]), counting both accumulators: 2 × 96 (64×192 per
/// warpgroup) compiles for sm_90a without spills with the consumers at 240 registers; 2 × 128 spills.
const MAX_ACC_PROMOTED: u32 = 192;
/// Most K slices of a split-K GEMM.
pub const MAX_SPLIT_K: u32 = 32;

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bm, bn, ks) = (cfg.block_rows, cfg.block, cfg.k_step);
    let name = cfg.types.kernel_name();
    let bad = |why: String| {
        Err(KernelError::Config(format!(
            "{name} (producer/consumer): {why}"
        )))
    };
    if bn % 16 != 0 || bn > 256 || ks % 32 != 0 {
        return bad(format!(
            "block {bn} must be a multiple of 16 up to 256, k_step {ks} of 32"
        ));
    }
    if !matches!(bm, 64 | 128 | 256) {
        return bad(format!("block_rows {bm} must be 64, 128 or 256"));
    }
    if !(2..=super::shapes::MAX_STAGES).contains(&cfg.stages) {
        return bad(format!(
            "stages {} must be 2 to {}",
            cfg.stages,
            super::shapes::MAX_STAGES
        ));
    }
    if !(1..=MAX_SPLIT_K).contains(&cfg.split_k) {
        return bad(format!(
            "split_k {} must be 1 to {MAX_SPLIT_K}",
            cfg.split_k
        ));
    }
    let a_rows = match cfg.a_rows {
        0 => bm,
        r if r == bm => bm,
        r if bm == 64 && matches!(r, 8 | 16 | 32) => r,
        r => {
            return bad(format!(
                "a_rows {r}: 8, 16 or 32 rows of A with 64-row blocks (0: all), got block_rows {bm}"
            ))
        }
    };
    let promote = cfg.promote;
    let consumers = if bm == 64 { 1 } else { 2 };
    let waves = 4 * consumers;
    // 16-row slices of C per consumer wave.
    let slices = bm / (16 * waves);
    let (per_thread, most) = if promote > 0 {
        (2 * slices * bn / 2, MAX_ACC_PROMOTED)
    } else {
        (slices * bn / 2, MAX_ACC_PER_THREAD)
    };
    if per_thread > most {
        return bad(format!(
            "a {bm}x{bn} block needs {per_thread} accumulator floats per thread{}, over {most}",
            if promote > 0 { " (promoted)" } else { "" }
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
        // Promoted sums need every register the consumers can get: 24 for the one TMA thread's
        // warpgroup, 240 for the consumers (128·24 + 256·240 = 64512, the launch's 384 × 168).
        let (producer_regs, consumer_regs) = if promote > 0 { (24, 240) } else { (40, 232) };
        Schedule::ProducerConsumer {
            producers: 1,
            consumers,
            producer_regs,
            consumer_regs,
        }
    };
    let mut k = KernelBuilder::new(name, sched);
    let decl = declare(&mut k, cfg, bm, bn);
    if cfg.cluster > 1 && cfg.split_k > 1 {
        return bad(format!(
            "clusters of {} with split_k {} (a cluster pairs row tiles of one K slice)",
            cfg.cluster, cfg.split_k
        ));
    }
    k.cluster_rows(cfg.cluster);
    let (kd, [a, b, _]) = (decl.kd.clone(), decl.g);
    k.slot_fill(a, cfg.loads);
    k.slot_fill(b, cfg.loads);
    let dt = cfg.types.input;
    // Rows of `ks` operands are 64 or 128 bytes: the matching TMA/wgmma swizzle mode.
    let swz = if (ks * dt.bytes()).is_multiple_of(128) {
        Swizzle::NV_128B
    } else {
        Swizzle::NV_64B
    };
    let stages = i64::from(cfg.stages);
    // Each operand's slot as it is stored: A `bm × ks` (K contiguous) or `ks × bm` (M contiguous), B
    // `bn × ks` or `ks × bn`. An MN-contiguous slot is kept by the Hopper lowering as 64-column atoms in
    // the 128-byte swizzle, one TMA box each, which `wgmma` reads MN-major (bf16 only: fp8 `wgmma`
    // reads K-major operands only, PTX ISA §9.7.15.5.1).
    let (km, kn) = (cfg.a_layout == ALayout::Km, cfg.b_layout == BLayout::Kn);
    if km && a_rows < bm {
        return bad(format!(
            "a_rows {a_rows} with A stored K x M (the box of fewer rows is for A as M x K)"
        ));
    }
    if km && dt.bytes() != 2 {
        return bad(format!(
            "A stored K x M (transposed) needs bf16 operands, got {dt}: fp8 wgmma reads K-major operands only"
        ));
    }
    if kn && (dt.bytes() != 2 || bn % 64 != 0) {
        return bad(format!(
            "B as K x N needs bf16 operands and a block width that is a multiple of 64, got {dt} and {bn}"
        ));
    }
    let a_tile = if km {
        SharedTile::with_swizzle(dt, ks, bm, Swizzle::NV_128B)
    } else {
        SharedTile::with_swizzle(dt, bm, ks, swz)
    };
    let a_s = k.shared_tile("a_s", a_tile, cfg.stages);
    let b_tile = if kn {
        SharedTile::with_swizzle(dt, ks, bn, Swizzle::NV_128B)
    } else {
        SharedTile::with_swizzle(dt, bn, ks, swz)
    };
    let b_s = k.shared_tile("b_s", b_tile, cfg.stages);
    let (b_rows, b_cols) = if kn { (ks, bn) } else { (bn, ks) };
    let form = match (km, kn) {
        (false, false) => MmaForm::Abt,
        (false, true) => MmaForm::Ab,
        (true, true) => MmaForm::Atb,
        (true, false) => MmaForm::Atbt,
    };
    let f32_tile = |k: &mut KernelBuilder, name: &str| {
        k.tile(name, F32, 16, bn, Layout::Row, BaseShape::S16X16)
    };
    // `accs`: the wgmma chains' accumulators; `sums`: what is stored, the same tiles unless promoted.
    let accs: Vec<_> = (0..slices)
        .map(|h| f32_tile(&mut k, &format!("acc{h}")))
        .collect();
    // Promoted chains issued in groups of up to four where the registers hold that many sets of
    // accumulators: every chain of the group is issued before the first is waited for and added, so
    // the waits overlap the group's later chains (with one set, every K step waits for its own chain
    // before the next is issued; at small M that serialises the consumer, docs/performance.md
    // "gemm_fp8"). The sums are added in the same order either way. The group is waited for within
    // one iteration: ptxas serialises the wgmmas (C7514) of a loop whose chains stay in flight across
    // its back edge while another set is read.
    let per_slice = slices * bn / 2;
    let group: u32 = if promote == 0 {
        1
    } else {
        [4, 2, 1]
            .into_iter()
            .find(|g| per_thread + (g - 1) * per_slice <= most)
            .unwrap_or(1)
    };
    let sets: Vec<Vec<_>> = (0..group)
        .map(|g| {
            if g == 0 {
                accs.clone()
            } else {
                (0..slices)
                    .map(|h| f32_tile(&mut k, &format!("acc{h}_{g}")))
                    .collect()
            }
        })
        .collect();
    let sums: Vec<_> = if promote > 0 {
        (0..slices)
            .map(|h| f32_tile(&mut k, &format!("sum{h}")))
            .collect()
    } else {
        accs.clone()
    };
    // Per-tensor scales are read before the K loop into a tile of their product, so the loads'
    // latency overlaps the ring's first fill instead of following the last wgmma: a decode-sized FP8
    // GEMM is an 8-13 µs problem (docs/performance.md, "gemm_fp8"). The register budget counts that
    // tile whole (the compiler keeps its one value in one register), so only blocks whose
    // accumulators leave it room do this. Per-row and per-column scales, and the large 128×192
    // block's, are read in the epilogue, into a dead chain accumulator when promoted (else a tile of
    // their own).
    let held = per_thread + (group - 1) * per_slice;
    let early = cfg.types.scales == Some(Scales::PerTensor) && held + bn / 2 <= most;
    let scratch = decl.scales.map(|_| {
        if promote > 0 && !early {
            accs[0]
        } else {
            f32_tile(&mut k, "scale")
        }
    });
    let (row, col) = (k.block(0), k.block(1));
    let nt = kd.ceil_div(ks as i64);
    // K steps of this block: all of them, or its slice's `⌈nt / split_k⌉` from `first`, in both
    // cases rounded up to whole groups of chains of `promote` steps (slices must
    // not overlap: the rounding comes before `first`). Steps past K load zeros (TMA and the
    // interpreter read out-of-range elements as zero).
    let chain = i64::from(promote.max(1));
    let unit = i64::from(group) * chain;
    let (steps, first) = match &decl.split {
        Some(s) => {
            let per = nt.ceil_div(i64::from(cfg.split_k)).ceil_div(unit) * unit;
            (per.clone(), s.clone() * per)
        }
        None => (nt.ceil_div(unit) * unit, Expr::c(0)),
    };
    let chains = steps.ceil_div(chain);
    let cw = k.wave() - 4; // consumer wave, 0..waves
                           // Slice `h` of consumer wave `cw`: 16-row block `h·waves + cw` of the block's rows.
    let slice = |h: u32| &cw + i64::from(h * waves);
    // One K step's multiplies into `set`: local step `t` from slot `t % stages`, accumulating unless
    // `fresh`.
    let multiply = |k: &mut KernelBuilder, t: &Expr, fresh: bool, set: &[kittens_ir::RegId]| {
        k.barrier(); // K step t has landed
        let b_v = MmaOperand::Shared(k.smem(b_s, t % stages));
        for (h, &acc) in set.iter().enumerate() {
            let a_v = if km {
                k.smem(a_s, t % stages).sub(ks, 16, 0, slice(h as u32))
            } else {
                k.smem(a_s, t % stages).sub(16, ks, slice(h as u32), 0)
            };
            let c = (!fresh).then_some(acc);
            k.mma(form, acc, MmaOperand::Shared(a_v), b_v.clone(), c);
        }
    };
    k.roles(
        |k| {
            k.for_range("t", 0, &steps, |k, t| {
                let slot = &t % stages;
                let kt = &first + &t;
                let a_g = if km {
                    k.gtile(a, ks, bm, &kt, &row)
                } else {
                    k.gtile(a, a_rows, ks, &row, &kt)
                };
                // With fewer rows of A than the block's (`GemmConfig::a_rows`), the box fills the
                // slot's first rows; M ≤ a_rows, so the block is row tile 0.
                let a_v = if a_rows < bm {
                    k.smem(a_s, slot.clone()).sub(a_rows, ks, 0, 0)
                } else {
                    k.smem(a_s, slot.clone())
                };
                k.load_async_by(Scope::WarpGroup, a_v, a_g);
                let b_g = if kn {
                    k.gtile(b, b_rows, b_cols, &kt, &col)
                } else {
                    k.gtile(b, b_rows, b_cols, &col, &kt)
                };
                k.load_async_by(Scope::WarpGroup, k.smem(b_s, slot), b_g);
                k.wait_async(0);
                k.barrier(); // slot t % stages to the consumers
            });
        },
        |k| {
            if let (true, Some([sa, sb]), Some(s)) = (early, decl.scales, scratch) {
                // One scalar each: any tile of the broadcast view reads it.
                let ti = &row * i64::from(bm / 16) + slice(0);
                k.load_global(s, k.gtile(sa, 16, bn, ti.clone(), col.clone()));
                k.load_global(accs[0], k.gtile(sb, 16, bn, ti, col.clone()));
                k.mul(s, s, accs[0]);
            }
            for &sum in &sums {
                k.zero(sum);
            }
            // A chain of `promote` K steps into `set` starts from zero (wgmma's scale-d off); it is
            // then added into the f32 sums.
            let chain_into = |k: &mut KernelBuilder, g: &Expr, set: &[kittens_ir::RegId]| {
                let t0 = g * chain;
                multiply(k, &t0, true, set);
                if chain > 1 {
                    k.for_range("j", 1, chain, |k, j| multiply(k, &(&t0 + &j), false, set));
                }
            };
            let add_into_sums = |k: &mut KernelBuilder, set: &[kittens_ir::RegId]| {
                for (&sum, &acc) in sums.iter().zip(set) {
                    k.add(sum, sum, acc);
                }
            };
            if promote == 0 {
                k.for_range("t", 0, &steps, |k, t| multiply(k, &t, false, &accs));
            } else if group > 1 {
                // Chains in groups (their count is a multiple of the group's): all issued, then
                // added oldest first, each while the later ones run.
                let g = i64::from(group);
                k.for_range("p", 0, chains.ceil_div(g), |k, p| {
                    let first = &p * g;
                    for (i, set) in sets.iter().enumerate() {
                        chain_into(k, &(&first + i as i64), set);
                    }
                    for set in &sets {
                        add_into_sums(k, set);
                    }
                });
            } else {
                k.for_range("g", 0, &chains, |k, g| {
                    chain_into(k, &g, &accs);
                    add_into_sums(k, &accs);
                });
            }
            for (h, &sum) in sums.iter().enumerate() {
                let ti = &row * i64::from(bm / 16) + slice(h as u32);
                let late = match scratch {
                    Some(s) if early => {
                        k.mul(sum, sum, s);
                        None
                    }
                    other => other,
                };
                store_scaled(k, &decl, late, sum, 16, bn, ti, col.clone());
            }
            if let Some(fix) = &decl.fixup {
                let rows: Vec<Expr> = (0..slices)
                    .map(|h| (&row * i64::from(bm / 16) + slice(h)) * 16)
                    .collect();
                let col0 = &col * i64::from(bn);
                let part = decl.g[2];
                fix.reduce(k, part, cfg.split_k, (&row, &col), &rows, &col0, bn);
            }
        },
    );
    Ok(k.finish()?)
}
