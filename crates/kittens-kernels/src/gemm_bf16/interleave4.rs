//! The BF16 GEMM with the 4-wave interleave schedule (HipKittens §3.3.2): one wave per SIMD, each wave
//! issuing both its loads and its matrix work, so the compiler interleaves them inside a wave instead of
//! across a ping-pong pair. Waves sit 2×2 over the `block × block` tile and own four `block/4 × block/4`
//! accumulators. One barrier per K step: after it the step's tiles have landed for every wave, and every
//! wave has finished reading the slot the step's prefetch refills.

use super::{declare, store_scaled, GemmConfig};
use crate::KernelError;
use kittens_hw::dtype::DType::F32;
use kittens_ir::{Expr, Kernel, KernelBuilder, RegId, Schedule};
use kittens_tile::{BaseShape, Layout::Col, Layout::Row, SharedTile};

pub(super) fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    let (bs, ks) = (cfg.block, cfg.k_step);
    if bs % 128 != 0 || ks % 32 != 0 {
        return Err(KernelError::Config(format!(
            "{} (interleave): block {bs} must be a multiple of 128, k_step {ks} of 32",
            cfg.types.kernel_name()
        )));
    }
    let (half, q) = (bs / 2, bs / 4); // half-block rows; per-wave accumulator rows = cols
    let (dt, base) = (cfg.types.input, cfg.types.operand_base());
    let mut k = KernelBuilder::new(cfg.types.kernel_name(), Schedule::Interleave4);
    let decl = declare(&mut k, bs, bs, cfg.remap, &cfg.types, cfg.b_layout);
    let (kd, [a, b, _]) = (decl.kd.clone(), decl.g);
    let a_s = [0, 1].map(|h| k.shared_tile(&format!("a_s{h}"), SharedTile::new(dt, half, ks), 2));
    let b_s = [0, 1].map(|h| k.shared_tile(&format!("b_s{h}"), SharedTile::new(dt, half, ks), 2));
    let a_r = k.tile("a_r", dt, q, ks, Row, base);
    let b_r = [0, 1].map(|j| k.tile(&format!("b_r{j}"), dt, q, ks, Row, base));
    let acc: Vec<RegId> = (0..4)
        .map(|x| {
            k.tile(
                &format!("c{}{}", x / 2, x % 2),
                F32,
                q,
                q,
                Col,
                BaseShape::S16X16,
            )
        })
        .collect();
    let (row, col) = (k.block(0), k.block(1));
    let (wr, wc) = (k.wave() / 2, k.wave() % 2);
    let nt = kd.ceil_div(ks as i64);
    let prefetch = |k: &mut KernelBuilder, t: Expr| {
        for h in [0, 1] {
            k.load_async(
                k.smem(a_s[h], &t % 2),
                k.gtile(a, half, ks, &row * 2 + h as i64, &t),
            );
            k.load_async(
                k.smem(b_s[h], &t % 2),
                k.gtile(b, half, ks, &col * 2 + h as i64, &t),
            );
        }
    };
    acc.iter().for_each(|&r| k.zero(r));
    prefetch(&mut k, Expr::c(0));
    k.for_range("tile", 0, nt, |k, t| {
        let tic = &t % 2;
        k.wait_async(0);
        k.barrier();
        k.memory("prefetch", |k| prefetch(k, &t + 1));
        k.memory("a0 b0 b1", |k| {
            k.load(a_r, k.smem(a_s[0], &tic).sub(q, ks, &wr, 0));
            k.load(b_r[0], k.smem(b_s[0], &tic).sub(q, ks, &wc, 0));
            k.load(b_r[1], k.smem(b_s[1], &tic).sub(q, ks, &wc, 0));
            k.wait_shared(0);
        });
        k.compute("c00 c01", |k| {
            k.mma_abt(acc[0], a_r, b_r[0], acc[0]);
            k.mma_abt(acc[1], a_r, b_r[1], acc[1]);
        });
        k.memory("a1", |k| {
            k.load(a_r, k.smem(a_s[1], &tic).sub(q, ks, &wr, 0));
            k.wait_shared(0);
        });
        k.compute("c10 c11", |k| {
            k.mma_abt(acc[2], a_r, b_r[0], acc[2]);
            k.mma_abt(acc[3], a_r, b_r[1], acc[3]);
        });
    });
    // Accumulator (i, j) of wave (wr, wc) is C tile (row·4 + 2i + wr, col·4 + 2j + wc) of q × q.
    let scratch = decl
        .scales
        .map(|_| k.tile("scale", F32, q, q, Col, BaseShape::S16X16));
    for (x, &r) in acc.iter().enumerate() {
        let (i, j) = ((x / 2) as i64, (x % 2) as i64);
        let (ti, tj) = (&row * 4 + &wr + 2 * i, &col * 4 + &wc + 2 * j);
        store_scaled(&mut k, &decl, scratch, r, q, q, ti, tj);
    }
    Ok(k.finish()?)
}
