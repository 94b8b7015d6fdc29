//! The bank solver on the shipped kernels: every shared access of every registry kernel's hot loop is
//! modelled and conflict-free on both AMD targets under the chosen swizzles, where the unswizzled tiles
//! are not (HipKittens §3.2.2, Appendix D.1).

use kittens_hw::{Arch, Target};
use kittens_ir::banks;
use kittens_kernels::registry;
use kittens_tile::{amd_instr, analyze, SharedTile, Swizzle};

fn has_loop(body: &[kittens_ir::Stmt]) -> bool {
    use kittens_ir::Stmt;
    body.iter().any(|s| match s {
        Stmt::For { .. } => true,
        Stmt::If { then, els, .. } => has_loop(then) || has_loop(els),
        Stmt::Cluster { body, .. } | Stmt::Staggered { body } | Stmt::LastArrival { body, .. } => {
            has_loop(body)
        }
        Stmt::Roles { producer, consumer } => has_loop(producer) || has_loop(consumer),
        Stmt::Op { .. } => false,
    })
}

#[test]
fn every_hot_loop_access_is_conflict_free_on_both_amd_targets() {
    for e in &registry::ALL {
        for arch in [Arch::Cdna3, Arch::Cdna4] {
            // A kernel the registry says does not lower to this target yet (attn_varlen on CDNA: index
            // reads) has no program to judge; the registry's own test checks that refusal names why.
            if !e
                .plan(Target::from(arch))
                .is_some_and(|p| p.status.available())
            {
                continue;
            }
            let k = e.build_for(Target::from(arch)).unwrap();
            let plan = banks::plan(&k, arch).unwrap();
            let hot = plan.hot();
            // The memory-bound kernels (layernorm, rotary, rmsnorm, swiglu: strip registers only)
            // have no hot shared access to judge: their shared memory is the partial sums of rows
            // split over waves, one f32 per wave and row, which the bank model (matrix tiles' LDS
            // instructions) does not take; the rmsnorm backward reads them in its row loop.
            let strip = k.regs.iter().all(|r| match r.kind {
                kittens_ir::RegKind::Tile(t) => t.base == kittens_tile::BaseShape::STRIP,
                kittens_ir::RegKind::Vec(v) => v.base == kittens_tile::BaseShape::STRIP,
            });
            if strip {
                continue;
            }
            if !has_loop(&k.body) {
                assert!(hot.is_empty(), "{} {arch:?}", e.name);
                continue;
            }
            assert!(
                !hot.is_empty(),
                "{} on {arch:?}: no hot-loop shared access found",
                e.name
            );
            for a in hot {
                assert!(
                    a.instr.is_some(),
                    "{} {arch:?}: {} unmodelled",
                    e.name,
                    a.access
                );
                assert_eq!(
                    a.max_conflict,
                    Some(1),
                    "{} {arch:?}: {} under {}",
                    e.name,
                    a.access,
                    a.swizzle
                );
            }
        }
    }
}

/// The answer is re-checked against the bank model directly, and the unswizzled tiles of the same
/// accesses are conflicted (so the solver, not luck, made them 1-way).
#[test]
fn solved_swizzles_check_out_and_beat_no_swizzle() {
    let k = registry::by_name("gemm_bf16")
        .unwrap()
        .build_for(Target::Gfx950)
        .unwrap();
    let plan = banks::plan(&k, Arch::Cdna4).unwrap();
    let mut worst_plain = 0;
    for t in &plan.tiles {
        let decl = &k.shared[t.id.0 as usize];
        assert_eq!(
            decl.tile.swizzle,
            Swizzle::None,
            "the kernel types no swizzle"
        );
        let solved =
            SharedTile::with_swizzle(decl.tile.dtype, decl.tile.rows, decl.tile.cols, t.swizzle)
                .unwrap();
        let plain = SharedTile::with_swizzle(
            decl.tile.dtype,
            decl.tile.rows,
            decl.tile.cols,
            Swizzle::None,
        )
        .unwrap();
        k.for_each_op(|o| {
            if let kittens_ir::Op::LoadShared { dst, src } = o.op {
                if src.buf == t.id {
                    let reg = *k.reg(*dst).tile().unwrap();
                    let instr = amd_instr(&reg, Arch::Cdna4, false).unwrap();
                    assert_eq!(analyze(&solved, &reg, instr).unwrap().max_conflict, 1);
                    worst_plain =
                        worst_plain.max(analyze(&plain, &reg, instr).unwrap().max_conflict);
                }
            }
        });
    }
    assert_eq!(
        worst_plain, 4,
        "the unswizzled GEMM reads are 4-way by the bank model"
    );
}

#[test]
fn applying_the_plan_changes_only_swizzles() {
    let k = registry::by_name("attn_fwd")
        .unwrap()
        .build_for(Target::Gfx950)
        .unwrap();
    let s = banks::with_chosen_swizzles(&k, Arch::Cdna4).unwrap();
    assert_eq!(k.body, s.body);
    for (a, b) in k.shared.iter().zip(&s.shared) {
        assert_eq!(
            (a.tile.rows, a.tile.cols, a.tile.dtype, a.count),
            (b.tile.rows, b.tile.cols, b.tile.dtype, b.count)
        );
        assert_ne!(b.tile.swizzle, Swizzle::None, "{}", b.name);
    }
    assert!(matches!(
        banks::plan(&k, Arch::Hopper),
        Err(banks::BankError::NotAmd(_))
    ));
}
