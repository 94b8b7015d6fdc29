//! The BF16 GEMM with the 8-wave ping-pong schedule of HipKittens E.1 (Fig. 21).
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
//! has read the current step (HipKittens E.1, MI325X paragraph). Same clusters, same reads, same MFMAs.
//!
//! Waits count IR load ops per wave (the seed's `vmcnt(4)`/`vmcnt(6)` count two `buffer_load`s per tile
//! load, i.e. 2 and 3 ops). Each memory cluster drains its shared→register loads (`wait_shared(0)`)
//! before its closing barrier: the seed waits `lgkmcnt(0)` at the start of the next compute cluster
//! instead, but with the stagger the other warpgroup's async load into the slot just read is issued in
//! that same barrier interval, which the schedule analysis reports as a race. Where the seed peels the
//! last two K steps into an epilogue, this kernel runs the loop over every K step: the loads it issues
//! past the end of K read zeros into buffers no later step reads, which keeps the whole schedule on one
//! screen.

use super::{declare, store_scaled, GemmConfig, Staging};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Expr, GlobalId, Kernel, KernelBuilder, RegId, Schedule, SharedId, SharedView};
use kittens_tile::{BaseShape, Layout::Col, Layout::Row, SharedTile};

/// Base tile of the accumulators (HipKittens `rt_16x16_s`, HipKittens E.1); the operands' comes from
/// the element types (`GemmTypes::operand_base`: `rt_16x32_s` for bf16).
const ACC: BaseShape = BaseShape::S16X16;

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bs, ks) = (cfg.block, cfg.k_step);
    if bs % 128 != 0 || ks % 32 != 0 {
        return Err(KernelError::Config(format!(
            "{}: block {bs} must be a multiple of 128, k_step {ks} of 32",
            cfg.types.kernel_name()
        )));
    }
    let (hm, hn) = (bs / 4, bs / 8); // per-wave accumulator rows and cols
    let (dt, base) = (cfg.types.input, cfg.types.operand_base());
    let mut k = KernelBuilder::new(cfg.types.kernel_name(), Schedule::PingPong8);
    let decl = declare(&mut k, cfg, bs, bs);
    let (kd, g) = (decl.kd.clone(), decl.g);
    let ops = Operands::new(&mut k, cfg, g)?;
    let a_r = k.tile("a_r", dt, hm, ks, Row, base);
    let b_r = [0, 1].map(|j| k.tile(&format!("b_r{j}"), dt, hn, ks, Row, base));
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
    let scratch = decl.scales.map(|_| k.tile("scale", F32, hm, hn, Col, ACC));
    for (x, &r) in acc.iter().enumerate() {
        let (i, j) = ((x / 2) as i64, (x % 2) as i64);
        let (ti, tj) = (&row * 4 + &wr + 2 * i, &col * 8 + &wc + 4 * j);
        store_scaled(&mut k, &decl, scratch, r, hm, hn, ti, tj);
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
        let (dt, base) = (cfg.types.input, cfg.types.operand_base());
        let tile = || SharedTile::new(dt, half, ks);
        let s =
            ["a", "b"].map(|op| [0, 1].map(|h| k.shared_tile(&format!("{op}_s{h}"), tile(), ring)));
        let stage = if cfg.staging == Staging::Registers {
            // Eight waves share the copy; a band must hold whole 16-row base tiles.
            if half % (8 * 16) != 0 {
                return Err(KernelError::Config(format!(
                    "{}: register staging needs a block that is a multiple of 256, got {}",
                    cfg.types.kernel_name(),
                    cfg.block
                )));
            }
            let band =
                |k: &mut KernelBuilder, name: String| k.tile(&name, dt, half / 8, ks, Row, base);
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
