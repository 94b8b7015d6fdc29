//! The key blocks' loop as HipKittens' 4-wave interleave (§3.3.2): one wave per SIMD, each issuing
//! its LDS reads, its global→LDS prefetch and its matrix work in one stream, so that no region's
//! MFMAs wait for a load issued in that region. Two regions per query step, each a compute cluster
//! (ending in a fence), one barrier between them:
//!
//! ```text
//! A(t): column reads of step t (slot t%2)                      || Sᵀ, dPᵀ MFMAs of step t
//!       mask, Pᵀ, dSᵀ of step t
//! M(t): wait LDS reads, wait global loads (step t+1 landed), barrier
//! B(t): prefetch step t+2 into slot t%2, row reads of t+1      || dVᵀ, dKᵀ MFMAs of step t
//!       D and lse of step t+1
//! ```
//!
//! Before M(t) every wave has read all of step t's slot and its share of step t+1 has landed; after
//! it step t+1 is visible to all and slot t%2 is free for step t+2 (the GEMM's interleave,
//! `crate::gemm_bf16`'s `interleave4`, has the same barrier). The last two iterations prefetch steps
//! past the end, whose tiles start past their tensors (a query head past the last): their buffer
//! bound is 0 and they read nothing (the lowering's `rebased_bound`; before it was, the ISA
//! emulator faulted on such a load at BHSD causal D128). The configuration
//! ([`super::BwdConfig::interleave4`]) gives each wave 32 keys, dK and dV in 32×32 accumulators
//! (`32x32x16`, the scores `16x16x32`: HipKittens §4's mixed shapes) and pins K, V, dK, dV to AGPRs
//! (§3.2.1, D.3), where the MFMAs read and accumulate them.

use super::key_block::KeyBlock;
use kittens_ir::{Expr, KernelBuilder};

pub(super) fn key_loop(k: &mut KernelBuilder, kb: &KeyBlock) {
    // Prologue: steps 0 and 1 in flight, step 0 landed and visible; its row reads, D and lse.
    kb.fill(k, Expr::c(0), Expr::c(0));
    kb.fill(k, Expr::c(1), Expr::c(1));
    k.wait_async(3);
    k.barrier();
    kb.read_rows(k, &Expr::c(0));
    kb.delta(k, &Expr::c(0), false);
    kb.lse(k, &Expr::c(0));
    k.for_range("t", 0, kb.steps(), |k, t| {
        let (tic, toc) = (&t % 2, (&t + 1) % 2);
        k.compute("A: column reads of t || S, dP of t", |k| {
            kb.read_cols(k, &tic);
            kb.score_products(k);
        });
        kb.mask(k, &t);
        kb.probs(k);
        // Step t + 1 landed everywhere, and every wave is done with slot t % 2.
        k.wait_shared(0);
        k.wait_async(0);
        k.barrier();
        k.compute("B: prefetch t+2, row reads of t+1 || dV, dK of t", |k| {
            kb.fill(k, tic.clone(), &t + 2);
            kb.read_rows(k, &toc);
            kb.grads(k);
        });
        kb.delta(k, &toc, false);
        kb.lse(k, &(&t + 1));
    });
}
