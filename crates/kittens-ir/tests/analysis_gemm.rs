//! The schedule analysis on the real BF16 GEMM (HipKittens E.1's 8-wave ping-pong, small tiles).

use kittens_ir::analysis::{analyze, resolve_auto_waits, Hazard, Options, Report};
use kittens_ir::{Kernel, Op, Stmt, WaitCount, WaitQueue};
use kittens_kernels::gemm::{build, GemmConfig};

fn gemm() -> Kernel {
    build(&GemmConfig::small()).expect("gemm_bf16 builds")
}

/// m = n = 2 blocks, k = `steps` K steps of the small config.
fn check(k: &Kernel, steps: i64) -> Report {
    let cfg = GemmConfig::small();
    let p = vec![
        2 * cfg.block as i64,
        2 * cfg.block as i64,
        steps * cfg.k_step as i64,
    ];
    analyze(
        k,
        &Options {
            params: p,
            ..Options::default()
        },
    )
    .expect("analysis runs")
}

/// Rewrites waits for which `pick(queue, index)` holds to `Auto`; ops keep their indices.
fn make_auto(k: &Kernel, pick: &dyn Fn(WaitQueue, usize) -> bool) -> Kernel {
    fn walk(body: &mut [Stmt], next: &mut usize, pick: &dyn Fn(WaitQueue, usize) -> bool) {
        for s in body {
            match s {
                Stmt::Op { op, .. } => {
                    if let Op::Wait { queue, count } = op {
                        if pick(*queue, *next) {
                            *count = WaitCount::Auto;
                        }
                    }
                    *next += 1;
                }
                Stmt::For { body, .. }
                | Stmt::Cluster { body, .. }
                | Stmt::Staggered { body }
                | Stmt::LastArrival { body, .. } => walk(body, next, pick),
                Stmt::If { then, els, .. } => {
                    walk(then, next, pick);
                    walk(els, next, pick);
                }
                Stmt::Roles { producer, consumer } => {
                    walk(producer, next, pick);
                    walk(consumer, next, pick);
                }
            }
        }
    }
    let mut out = k.clone();
    walk(&mut out.body, &mut 0, pick);
    out
}

/// The pre-order index of the last op in the cluster labelled `label` that satisfies `pred`.
fn op_in_cluster(k: &Kernel, label: &str, pred: &dyn Fn(&Op) -> bool) -> Option<usize> {
    fn walk(
        body: &[Stmt],
        next: &mut usize,
        inside: bool,
        label: &str,
        pred: &dyn Fn(&Op) -> bool,
        hit: &mut Option<usize>,
    ) {
        for s in body {
            match s {
                Stmt::Op { op, .. } => {
                    if inside && pred(op) {
                        *hit = Some(*next);
                    }
                    *next += 1;
                }
                Stmt::Cluster { label: l, body, .. } => {
                    walk(body, next, inside || l == label, label, pred, hit)
                }
                Stmt::For { body, .. }
                | Stmt::Staggered { body }
                | Stmt::LastArrival { body, .. } => walk(body, next, inside, label, pred, hit),
                Stmt::If { then, els, .. } => {
                    walk(then, next, inside, label, pred, hit);
                    walk(els, next, inside, label, pred, hit);
                }
                Stmt::Roles { producer, consumer } => {
                    walk(producer, next, inside, label, pred, hit);
                    walk(consumer, next, inside, label, pred, hit);
                }
            }
        }
    }
    let mut hit = None;
    walk(&k.body, &mut 0, false, label, pred, &mut hit);
    hit
}

#[test]
fn the_gemm_has_no_hazards_with_short_and_shortened_loops() {
    let k = gemm();
    for steps in [1, 2, 3, 6, 40] {
        let r = check(&k, steps);
        assert!(r.hazards.is_empty(), "k = {steps} steps:\n{r}");
        assert_eq!(r.unrolled.is_empty(), steps < 20, "{r}");
        // The ping-pong: from the first cluster on, the two warpgroups are one cluster apart.
        let first = |w: usize| {
            r.timeline[w]
                .iter()
                .position(|c| !c.is_empty())
                .expect("clusters run")
        };
        assert_eq!(first(4), first(0) + 1);
        assert!(r.block_barriers.iter().all(|&b| b == r.block_barriers[0]));
    }
}

#[test]
fn removing_the_barrier_after_the_first_memory_cluster_is_a_missing_barrier() {
    let k = gemm();
    let bar = op_in_cluster(&k, "load a0 b0", &|op| matches!(op, Op::Barrier { .. }))
        .expect("cluster barrier");
    let r = check(&k.without_op(bar).expect("op exists"), 6);
    let barrier_hazards: Vec<_> = r
        .hazards
        .iter()
        .filter_map(|h| match h {
            Hazard::MissingBarrier { first, second, .. } => Some((first, second)),
            _ => None,
        })
        .collect();
    assert!(!barrier_hazards.is_empty(), "{r}");
    // The race: one group's async reload of a slot the other group is still reading.
    assert!(
        barrier_hazards
            .iter()
            .any(|(w, rd)| w.op_name == "load_async"
                && rd.op_name.starts_with("load (shared")
                && (w.wave < 4) != (rd.wave < 4)),
        "{r}"
    );
}

#[test]
fn removing_the_loop_wait_is_a_missing_wait() {
    let k = gemm();
    let wait = op_in_cluster(&k, "prefetch b1", &|op| {
        matches!(
            op,
            Op::Wait {
                queue: WaitQueue::Async,
                ..
            }
        )
    })
    .expect("the loop's async wait");
    let r = check(&k.without_op(wait).expect("op exists"), 6);
    assert!(!r.hazards.is_empty(), "{r}");
    assert!(
        r.hazards.iter().all(|h| matches!(
            h,
            Hazard::MissingWait {
                queue: WaitQueue::Async,
                ..
            }
        )),
        "{r}"
    );
}

#[test]
fn a_wait_is_needed_exactly_when_removing_it_reports_a_hazard() {
    let k = gemm();
    let r = check(&k, 6);
    for w in &r.waits {
        let without = check(&k.without_op(w.op).expect("op exists"), 6);
        let needed = w.computed < w.max_outstanding;
        assert_eq!(
            !without.hazards.is_empty(),
            needed,
            "wait op #{}: {w}\n{without}",
            w.op
        );
        if needed {
            assert!(
                without
                    .hazards
                    .iter()
                    .all(|h| matches!(h, Hazard::MissingWait { .. })),
                "{without}"
            );
        }
    }
}

#[test]
fn automatic_waits_reproduce_the_hand_written_counts() {
    let k = gemm();
    let written = check(&k, 6);
    for queues in [
        &[WaitQueue::Async][..],
        &[WaitQueue::Async, WaitQueue::Shared][..],
    ] {
        let auto = make_auto(&k, &|q, _| queues.contains(&q));
        for steps in [6, 40] {
            let r = check(&auto, steps);
            assert!(r.hazards.is_empty(), "{r}");
            let chosen = r.auto_counts();
            assert_eq!(
                chosen.len(),
                written
                    .waits
                    .iter()
                    .filter(|w| queues.contains(&w.queue))
                    .count()
            );
            for w in written.waits.iter().filter(|w| queues.contains(&w.queue)) {
                assert_eq!(
                    WaitCount::Outstanding(chosen[&w.op]),
                    w.written,
                    "wait op #{} ({steps} steps)",
                    w.op
                );
            }
        }
    }
}

#[test]
fn auto_waits_resolved_over_several_sizes_are_safe_for_each() {
    let k = gemm();
    let auto = make_auto(&k, &|_, _| true);
    let cfg = GemmConfig::small();
    let runs: Vec<Options> = [1i64, 2, 3, 6, 40]
        .iter()
        .map(|&s| Options {
            params: vec![256, 256, s * cfg.k_step as i64],
            ..Options::default()
        })
        .collect();
    let (counts, resolved) = resolve_auto_waits(&auto, &runs).expect("analysis runs");
    assert_eq!(counts.len(), check(&k, 6).waits.len());
    for opts in &runs {
        let r = analyze(&resolved, opts).unwrap();
        assert!(r.hazards.is_empty(), "{r}");
        assert!(r.auto_counts().is_empty(), "every auto wait is resolved");
    }
    // The hand-written kernel's counts are what the sizes need.
    for w in check(&k, 6).waits {
        assert_eq!(
            WaitCount::Outstanding(counts[&w.op]),
            w.written,
            "op #{}",
            w.op
        );
    }
}
