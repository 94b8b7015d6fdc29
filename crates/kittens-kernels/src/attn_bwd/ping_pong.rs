//! The key blocks' loop as HipKittens' 8-wave ping-pong (§3.3.2): two groups of four waves, one of
//! each per SIMD, the second held back by one cluster, so that while one group issues a compute
//! cluster (MFMAs and the softmax's vector work) the other issues a memory cluster (LDS reads and
//! global→LDS prefetches), and they swap at every cluster-end barrier (`kittens_ir::schedule`):
//!
//! ```text
//! memory:  row reads of step t (slot t%2), prefetch step t+1 (slot (t+1)%2), D and lse of step t
//! compute: Sᵀ, dPᵀ; mask; Pᵀ, dSᵀ
//! memory:  column reads of step t; step t+1 landed
//! compute: dVᵀ, dKᵀ
//! ```
//!
//! Slot (t+1)%2 last held step t−1, whose column reads both groups finished before the first group's
//! first memory cluster of step t (the other group's ran beside the first group's last compute
//! cluster of step t−1); step t+1, prefetched by each group in its first memory cluster of step t and
//! waited for in its second, is visible to both from the barrier that ends the later group's second
//! memory cluster on. The configuration ([`super::BwdConfig::pingpong8`]) keeps the plain
//! program's tiles: two waves per SIMD share its 512 registers per lane.

use super::key_block::KeyBlock;
use kittens_ir::{Expr, KernelBuilder};

pub(super) fn key_loop(k: &mut KernelBuilder, kb: &KeyBlock) {
    kb.fill(k, Expr::c(0), Expr::c(0));
    k.wait_async(0);
    k.barrier();
    k.staggered(|k| {
        k.for_range("t", 0, kb.steps(), |k, t| {
            let (tic, toc) = (&t % 2, (&t + 1) % 2);
            k.memory("row reads of t, prefetch t+1, D and lse of t", |k| {
                kb.delta(k, &tic, true);
                kb.lse(k, &t);
                kb.read_rows(k, &tic);
                kb.fill(k, toc.clone(), &t + 1);
                k.wait_shared(0);
            });
            k.compute("S, dP of t; P, dS", |k| {
                kb.scores(k, &t);
                kb.probs(k);
            });
            k.memory("column dO of t", |k| {
                kb.read_col_do(k, &tic);
                k.wait_shared(0);
            });
            k.compute("dV of t", |k| kb.grad_v(k));
            k.memory("column Q of t; t+1 landed", |k| {
                kb.read_col_q(k, &tic);
                k.wait_async(0);
                k.wait_shared(0);
            });
            k.compute("dK of t", |k| kb.grad_k(k));
        });
    });
}
