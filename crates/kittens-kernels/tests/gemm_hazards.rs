//! The GEMM's schedule is hazard-free, and removing one barrier or one wait from it makes the schedule
//! analysis report the hazard (and, for a wait, makes the interpreter read stale data).

use kittens_ir::analysis::{analyze, Hazard, Options};
use kittens_ir::{interp, Kernel, Op, WaitQueue};
use kittens_kernels::gemm::{build, GemmConfig};

const M: i64 = 256;
const N: i64 = 256;
const K: i64 = 32 * 6;

fn hazards(k: &Kernel) -> Vec<Hazard> {
    let r = analyze(
        k,
        &Options {
            params: vec![M, N, K],
            ..Default::default()
        },
    )
    .expect("analysis runs");
    r.hazards
}

fn ops_where(k: &Kernel, f: impl Fn(&Op) -> bool) -> Vec<usize> {
    k.ops()
        .into_iter()
        .filter(|r| f(r.op))
        .map(|r| r.index)
        .collect()
}

#[test]
fn intact_gemm_has_no_hazard() {
    let k = build(&GemmConfig::small()).unwrap();
    assert_eq!(hazards(&k), vec![]);
}

#[test]
fn removing_any_async_wait_is_reported() {
    let k = build(&GemmConfig::small()).unwrap();
    let waits = ops_where(&k, |op| {
        matches!(
            op,
            Op::Wait {
                queue: WaitQueue::Async,
                ..
            }
        )
    });
    assert_eq!(waits.len(), 3);
    for i in waits {
        let h = hazards(&k.without_op(i).unwrap());
        assert!(
            h.iter().any(|h| matches!(h, Hazard::MissingWait { .. })),
            "wait #{i} removed: {h:?}"
        );
    }
}

/// The prologue's two barriers publish the first K steps to every wave, and the hot loop's barriers
/// after the clusters that read a ring slot another warpgroup refills next: removing any of them is
/// reported. (The stagger and re-join barriers only offset the warpgroups; removing them is safe.)
#[test]
fn removing_a_needed_barrier_is_reported() {
    let k = build(&GemmConfig::small()).unwrap();
    let reported = |i: usize| !hazards(&k.without_op(i).unwrap()).is_empty();
    let written: Vec<usize> = k
        .ops()
        .into_iter()
        .filter(|r| matches!(r.op, Op::Barrier { .. }) && !r.implied)
        .map(|r| r.index)
        .collect();
    assert_eq!(written.len(), 2);
    assert!(written.iter().all(|&i| reported(i)));
    let in_loop: Vec<usize> = k
        .ops()
        .into_iter()
        .filter(|r| matches!(r.op, Op::Barrier { .. }) && r.depth == 3)
        .map(|r| r.index)
        .collect();
    assert_eq!(in_loop.len(), 8, "one barrier per cluster");
    assert!(in_loop.iter().filter(|&&i| reported(i)).count() >= 4);
}

/// The interpreter lands async loads only at waits: without the hot loop's wait, K steps ≥ 1 read
/// whatever the ring held before, and the result is wrong.
#[test]
fn missing_wait_reads_stale_data() {
    let k = build(&GemmConfig::small()).unwrap();
    let waits = ops_where(&k, |op| {
        matches!(
            op,
            Op::Wait {
                queue: WaitQueue::Async,
                ..
            }
        )
    });
    let run = |k: &Kernel| {
        let (m, n, kk) = (M as usize, N as usize, K as usize);
        let a: Vec<f32> = (0..m * kk)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        let b: Vec<f32> = (0..n * kk)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
            .collect();
        let mut t = vec![a.clone(), b.clone(), vec![0.0; m * n]];
        interp::run_unchecked(k, &[M, N, K], &mut t).unwrap();
        let r = kittens_kernels::reference::gemm_abt(&a, &b, m, n, kk);
        kittens_kernels::reference::compare(&t[2], &r).rel_err
    };
    assert!(run(&k) < 1e-2);
    let broken = k.without_op(*waits.last().unwrap()).unwrap();
    assert!(run(&broken) > 0.1);
}

fn register_staged() -> Kernel {
    build(&GemmConfig {
        staging: kittens_kernels::gemm::Staging::Registers,
        ..GemmConfig::default()
    })
    .unwrap()
}

/// The gfx942 variant (next K step staged in registers, one LDS buffer) is hazard-free too, and removing
/// a barrier that publishes a staged step to the other waves is reported.
#[test]
fn register_staged_gemm_has_no_hazard_and_needs_its_barriers() {
    let k = register_staged();
    assert_eq!(hazards(&k), vec![]);
    let reported = |i: usize| !hazards(&k.without_op(i).unwrap()).is_empty();
    let prologue: Vec<usize> = k
        .ops()
        .into_iter()
        .filter(|r| matches!(r.op, Op::Barrier { .. }) && !r.implied)
        .map(|r| r.index)
        .collect();
    assert_eq!(
        prologue.len(),
        1,
        "one written barrier: after the first commit"
    );
    assert!(reported(prologue[0]));
    let in_loop: Vec<usize> = k
        .ops()
        .into_iter()
        .filter(|r| matches!(r.op, Op::Barrier { .. }) && r.depth == 3)
        .map(|r| r.index)
        .collect();
    assert_eq!(in_loop.len(), 8, "one barrier per cluster");
    // The barriers closing the register→LDS cluster and the compute cluster after it separate one
    // warpgroup's writes of the buffer from the other's reads of it; the earlier six only pace the
    // ping-pong (with them gone, no interval holds a write and a read of the same rows).
    let r: Vec<bool> = in_loop.iter().map(|&i| reported(i)).collect();
    assert_eq!(r, [false, false, false, false, false, false, true, true]);
}

/// Without the wait that drains the register→LDS writes before the barrier, the other waves may read
/// the buffer before the writes land: reported.
#[test]
fn register_staged_gemm_needs_its_store_waits() {
    let k = register_staged();
    let waits = ops_where(&k, |op| {
        matches!(
            op,
            Op::Wait {
                queue: WaitQueue::Shared,
                ..
            }
        )
    });
    let stores = ops_where(&k, |op| matches!(op, Op::StoreShared { .. }));
    assert_eq!(
        stores.len(),
        8,
        "four bands in the prologue, four in the loop"
    );
    // The wait right after each group of stores.
    let after_stores: Vec<usize> = [stores[3], stores[7]]
        .iter()
        .map(|&s| *waits.iter().find(|&&w| w > s).unwrap())
        .collect();
    for i in after_stores {
        let h = hazards(&k.without_op(i).unwrap());
        assert!(!h.is_empty(), "wait #{i} removed: nothing reported");
    }
}
