//! The GEMM with the 4-wave interleave schedule (HipKittens §3.3.2): one wave per SIMD, each wave
//! issuing its global loads, its LDS reads and its matrix work in one stream, so the SIMD's MFMA and
//! memory pipes stay busy without a second wave to swap with. Waves sit 2×2 over the `block × block`
//! tile and own four `block/4 × block/4` accumulators `c[i][j]` (rows of A half `i`, columns of B half
//! `j`), 256 f32 registers per lane at the default tiles: the accumulators live in AGPRs (the lowering
//! hands this schedule's MFMAs to the compiler, HipKittens §3.2.1), the operands in VGPRs.
//!
//! What makes it an interleave is that nothing a region's MFMAs need is loaded in that region. The K
//! step is split into two sub-steps of `k_step / 2` (when that is a whole number of operand base
//! tiles), each with its own operand registers (`set 0`, `set 1`): while the MFMAs of one sub-step run,
//! the LDS reads of the other fill its registers, and the global→LDS prefetch of a later K step is in
//! flight in the same region. Per K step and wave (bf16, 256×256×64): 128 MFMAs, 32 LDS reads, 16
//! global loads, in two regions of 64 MFMAs each; a scheduling hint asks for 4 MFMAs per LDS read. The
//! regions end in fences, and every wait is one (the compiler must not lift an MFMA above the wait its
//! operands need).
//!
//! One barrier per K step, between the regions (`M(t)`): before it every wave has read all of step
//! `t`'s slot and its share of step `t + 1` has landed; after it step `t + 1` is visible to all, and
//! slot `t % 2` is free for the prefetch of step `t + 2`:
//!
//! ```text
//! A(t): read set 1 of step t (slot t%2)            || MFMAs of set 0
//! M(t): wait LDS reads, wait global loads, barrier
//! B(t): read set 0 of step t+1 (slot (t+1)%2),
//!       prefetch step t+2 into slot t%2            || MFMAs of set 1
//! ```
//!
//! Where a K step is a single base tile (OCP fp8 at K step 128: one 16×16×128 MFMA's K) it cannot be
//! split; then the one set rolls per operand tile: the four products run in the order c00, c01, c10,
//! c11, and each tile is read for its next use as soon as its last MFMA of the step is issued (b1 and
//! a1 beside c00, a0 of the next step beside c10 with the prefetch, b0 beside c11).

use super::{declare, store_scaled, GemmConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Expr, GlobalId, Kernel, KernelBuilder, RegId, Schedule, SharedId};
use kittens_tile::{BaseShape, Layout::Col, Layout::Row, SharedTile};

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bs, ks) = (cfg.block, cfg.k_step);
    let kb = cfg.types.operand_base().cols;
    if bs % 128 != 0 || ks % kb != 0 {
        return Err(KernelError::Config(format!(
            "{} (interleave): block {bs} must be a multiple of 128, k_step {ks} of {kb}",
            cfg.types.kernel_name()
        )));
    }
    // Two sub-steps where half a K step is whole base tiles, else one.
    let subs: u32 = if (ks / 2) % kb == 0 { 2 } else { 1 };
    let sub_k = ks / subs;
    let (half, q) = (bs / 2, bs / 4); // half-block rows; per-wave accumulator rows = cols
    let (dt, base) = (cfg.types.input, cfg.types.operand_base());
    let mut k = KernelBuilder::new(cfg.types.kernel_name(), Schedule::Interleave4);
    let decl = declare(&mut k, cfg, bs, bs);
    let (kd, [a, b, _]) = (decl.kd.clone(), decl.g);
    let tile = || SharedTile::new(dt, half, ks);
    let ops = Ops {
        g: [a, b],
        s: ["a", "b"].map(|op| [0, 1].map(|h| k.shared_tile(&format!("{op}_s{h}"), tile(), 2))),
        half,
        ks,
    };
    // Operand registers per sub-step set: the wave's rows of A half i and of B half j, `sub_k` wide.
    let set = |k: &mut KernelBuilder, s: u32| Set {
        a: [0, 1].map(|i| k.tile(&format!("a{i}_k{s}"), dt, q, sub_k, Row, base)),
        b: [0, 1].map(|j| k.tile(&format!("b{j}_k{s}"), dt, q, sub_k, Row, base)),
    };
    let sets: Vec<Set> = (0..subs).map(|s| set(&mut k, s)).collect();
    let acc: [[RegId; 2]; 2] = [0, 1]
        .map(|i| [0, 1].map(|j| k.tile(&format!("c{i}{j}"), F32, q, q, Col, BaseShape::S16X16)));
    let (row, col) = (k.block(0), k.block(1));
    let (wr, wc) = (k.wave() / 2, k.wave() % 2);
    let nt = kd.ceil_div(ks as i64);
    // The hints: MFMAs and 16-byte LDS reads per K step (a base tile's lane holds one or two 16-byte
    // runs: bf16 16×32, OCP fp8 16×128); bf16 256×256×64: 128 MFMAs and 32 reads.
    let runs = (base.rows * base.cols * dt.bytes() / 64).div_ceil(16);
    let mfmas = 4 * (q / 16) * (q / 16) * (sub_k / kb);
    let reads = 4 * (q / 16) * (sub_k / kb) * runs;
    let mma = |k: &mut KernelBuilder, s: &Set| {
        for (i, j) in [(0, 0), (0, 1), (1, 1), (1, 0)] {
            k.mma_abt(acc[i][j], s.a[i], s.b[j], acc[i][j]);
        }
    };
    let read = |k: &mut KernelBuilder, s: &Set, t: &Expr, sub: u32| {
        for h in [0, 1] {
            let slot = |buf: SharedId| k.smem(buf, t % 2).sub(q, sub_k, &wr, i64::from(sub));
            k.load(s.a[h], slot(ops.s[0][h]));
            let slot = |buf: SharedId| k.smem(buf, t % 2).sub(q, sub_k, &wc, i64::from(sub));
            k.load(s.b[h], slot(ops.s[1][h]));
        }
    };
    acc.iter().flatten().for_each(|&r| k.zero(r));

    if subs == 2 {
        let (s0, s1) = (&sets[0], &sets[1]);
        // Prologue: steps 0 and 1 in flight, step 0 landed and visible, set 0 of step 0 read.
        ops.prefetch(&mut k, Expr::c(0), (&row, &col));
        ops.prefetch(&mut k, Expr::c(1), (&row, &col));
        k.wait_async(4);
        k.barrier();
        read(&mut k, s0, &Expr::c(0), 0);
        k.wait_shared(0);
        k.for_range("tile", 0, nt, |k, t| {
            k.compute("A: set 1 reads || set 0 MFMAs", |k| {
                read(k, s1, &t, 1);
                mma(k, s0);
                k.sched_mma_reads(mfmas / reads, 1, reads);
            });
            k.wait_shared(0);
            k.wait_async(0);
            k.barrier();
            k.compute("B: prefetch t+2, set 0 reads of t+1 || set 1 MFMAs", |k| {
                ops.prefetch(k, &t + 2, (&row, &col));
                read(k, s0, &(&t + 1), 0);
                mma(k, s1);
                k.sched_mma_reads(mfmas / reads, 1, reads);
            });
            k.wait_shared(0);
        });
    } else {
        // One set, rolled per operand tile: each tile is read as soon as its last MFMA of the step
        // has been issued, beside the next product's MFMAs (c00 · c01 · c10 · c11).
        let s0 = &sets[0];
        let one = |k: &mut KernelBuilder, r: RegId, buf: SharedId, w: &Expr, t: &Expr| {
            k.load(r, k.smem(buf, t % 2).sub(q, sub_k, w, 0));
        };
        let per_tile = reads / 4;
        // Prologue: steps 0 and 1 in flight, step 0 landed and visible, a0 and b0 of step 0 read.
        ops.prefetch(&mut k, Expr::c(0), (&row, &col));
        ops.prefetch(&mut k, Expr::c(1), (&row, &col));
        k.wait_async(4);
        k.barrier();
        one(&mut k, s0.a[0], ops.s[0][0], &wr, &Expr::c(0));
        one(&mut k, s0.b[0], ops.s[1][0], &wc, &Expr::c(0));
        k.wait_shared(0);
        k.for_range("tile", 0, nt, |k, t| {
            k.compute("c00 || b1, a1 reads", |k| {
                one(k, s0.b[1], ops.s[1][1], &wc, &t);
                one(k, s0.a[1], ops.s[0][1], &wr, &t);
                k.mma_abt(acc[0][0], s0.a[0], s0.b[0], acc[0][0]);
                k.sched_mma_reads(mfmas / 4 / (2 * per_tile), 1, 2 * per_tile);
            });
            k.wait_shared(1);
            k.compute("c01", |k| k.mma_abt(acc[0][1], s0.a[0], s0.b[1], acc[0][1]));
            // Step t + 1 landed everywhere, and every wave is done with slot t % 2.
            k.wait_shared(0);
            k.wait_async(0);
            k.barrier();
            k.compute("c10 || prefetch t+2, a0 read of t+1", |k| {
                ops.prefetch(k, &t + 2, (&row, &col));
                one(k, s0.a[0], ops.s[0][0], &wr, &(&t + 1));
                k.mma_abt(acc[1][0], s0.a[1], s0.b[0], acc[1][0]);
                k.sched_mma_reads(mfmas / 4 / per_tile, 1, per_tile);
            });
            k.compute("c11 || b0 read of t+1", |k| {
                one(k, s0.b[0], ops.s[1][0], &wc, &(&t + 1));
                k.mma_abt(acc[1][1], s0.a[1], s0.b[1], acc[1][1]);
                k.sched_mma_reads(mfmas / 4 / per_tile, 1, per_tile);
            });
            k.wait_shared(0);
        });
    }

    // Accumulator (i, j) of wave (wr, wc) is C tile (row·4 + 2i + wr, col·4 + 2j + wc) of q × q.
    let scratch = decl
        .scales
        .map(|_| k.tile("scale", F32, q, q, Col, BaseShape::S16X16));
    for (i, accs) in acc.iter().enumerate() {
        for (j, &r) in accs.iter().enumerate() {
            let (i, j) = (i as i64, j as i64);
            let (ti, tj) = (&row * 4 + &wr + 2 * i, &col * 4 + &wc + 2 * j);
            store_scaled(&mut k, &decl, scratch, r, q, q, ti, tj);
        }
    }
    Ok(k.finish()?)
}

/// One sub-step's operand registers.
struct Set {
    a: [RegId; 2],
    b: [RegId; 2],
}

/// The block's operands on their way to LDS: half-block tiles `s[op][h]`, two ring slots each.
struct Ops {
    g: [GlobalId; 2],
    s: [[SharedId; 2]; 2],
    half: u32,
    ks: u32,
}

impl Ops {
    /// Global→LDS copy of K step `t` into slot `t % 2`, split among the four waves (4 IR ops).
    fn prefetch(&self, k: &mut KernelBuilder, t: Expr, (row, col): (&Expr, &Expr)) {
        for h in [0, 1] {
            for (op, blk) in [(0, row), (1, col)] {
                let src = k.gtile(self.g[op], self.half, self.ks, blk * 2 + h as i64, &t);
                k.load_async(k.smem(self.s[op][h], &t % 2), src);
            }
        }
    }
}
