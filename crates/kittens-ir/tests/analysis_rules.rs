//! The schedule analysis on small hand-built programs: one test per rule (waits, barriers, count-matched
//! conditional barriers, wave exits, deadlock, loop shortening), plus automatic waits checked against an
//! independent queue simulation on random pipelines.

use kittens_hw::dtype::DType;
use kittens_ir::analysis::{analyze, apply_auto_waits, Hazard, Options, Report};
use kittens_ir::{
    Access, Expr, GlobalId, Kernel, KernelBuilder, Op, RegId, Schedule, SharedId, WaitCount,
    WaitQueue,
};
use kittens_tile::{BaseShape, Layout, Swizzle};
use rand::{rngs::SmallRng, seq::SliceRandom, Rng, SeedableRng};

const ROWS: u32 = 32;
const COLS: u32 = 64;

struct Decls {
    s: SharedId,
    g: GlobalId,
    r: RegId,
}

/// A kernel with `waves` waves, one shared ring of `slots` 32×64 bf16 tiles, a global source and a
/// register tile of the same shape.
fn build(
    name: &str,
    schedule: Schedule,
    slots: u32,
    f: impl FnOnce(&mut KernelBuilder, &Decls),
) -> Kernel {
    let mut b = KernelBuilder::new(name, schedule);
    let s = b.shared("S", DType::Bf16, ROWS, COLS, Swizzle::None, slots);
    let g = b.global(
        "g",
        DType::Bf16,
        &[("m", Expr::c(4096)), ("n", Expr::c(COLS as i64))],
        Access::Read,
    );
    let r = b.tile("r", DType::Bf16, ROWS, COLS, Layout::Row, BaseShape::S16X32);
    f(&mut b, &Decls { s, g, r });
    b.finish().expect("test kernel builds")
}

fn plain(waves: u32) -> Schedule {
    Schedule::Plain { waves }
}

fn run(k: &Kernel) -> Report {
    analyze(k, &Options::default()).expect("analysis runs")
}

/// (kind, first op, second op) of every hazard.
fn kinds(r: &Report) -> Vec<(&'static str, usize, usize)> {
    r.hazards
        .iter()
        .map(|h| match h {
            Hazard::MissingWait {
                pending, access, ..
            } => ("wait", pending.op, access.op),
            Hazard::MissingBarrier { first, second, .. } => ("barrier", first.op, second.op),
            Hazard::Deadlock { .. } => ("deadlock", 0, 0),
        })
        .collect()
}

/// Ops of a kernel whose name starts with `prefix`, in order.
fn ops_named(k: &Kernel, prefix: &str) -> Vec<usize> {
    k.ops()
        .into_iter()
        .filter(|r| r.op.name().starts_with(prefix))
        .map(|r| r.index)
        .collect()
}

/// load → wait → barrier → read by every wave: the canonical correct pattern.
fn produce_consume(wait: bool, barrier: bool) -> Kernel {
    build("pc", plain(2), 1, |b, d| {
        b.load_async(b.smem(d.s, 0), b.gtile(d.g, ROWS, COLS, 0, 0));
        if wait {
            b.wait_async(0);
        }
        if barrier {
            b.barrier();
        }
        b.load(d.r, b.smem(d.s, 0));
    })
}

#[test]
fn load_wait_barrier_read_is_clean() {
    let r = run(&produce_consume(true, true));
    assert!(r.hazards.is_empty(), "{r}");
}

#[test]
fn a_read_before_the_wait_is_a_missing_wait_naming_both_ops() {
    let k = produce_consume(false, true);
    let r = run(&k);
    let (load, read) = (
        ops_named(&k, "load_async")[0],
        ops_named(&k, "load (shared")[0],
    );
    assert_eq!(kinds(&r), vec![("wait", load, read)], "{r}");
    let Hazard::MissingWait {
        queue,
        pending,
        access,
        instances,
    } = &r.hazards[0]
    else {
        unreachable!()
    };
    assert_eq!(*queue, WaitQueue::Async);
    assert_eq!(pending.access.as_deref(), Some("write"));
    assert_eq!(access.access.as_deref(), Some("read"));
    // Each of 2 waves reads the whole tile; each of the 2 bands is un-waited for both readers.
    assert_eq!(*instances, 4);
}

#[test]
fn a_read_without_barrier_is_a_missing_barrier_across_waves_only() {
    let k = produce_consume(true, false);
    let r = run(&k);
    assert_eq!(
        kinds(&r),
        vec![(
            "barrier",
            ops_named(&k, "load_async")[0],
            ops_named(&k, "load (shared")[0]
        )],
        "{r}"
    );
    let Hazard::MissingBarrier {
        first,
        second,
        instances,
    } = &r.hazards[0]
    else {
        unreachable!()
    };
    // Wave w's own band is ordered by its wait; only the other wave's band races.
    assert_ne!(first.wave, second.wave);
    assert_eq!(*instances, 2);
}

/// Reads of slot 0, then a reload of slot 0: the reload must wait for every wave's reads.
fn read_then_reload(wait_shared: bool, barrier: bool) -> Kernel {
    build("war", plain(4), 1, |b, d| {
        b.load_async(b.smem(d.s, 0), b.gtile(d.g, ROWS, COLS, 0, 0));
        b.wait_async(0);
        b.barrier();
        b.load(d.r, b.smem(d.s, 0));
        if wait_shared {
            b.wait_shared(0);
        }
        if barrier {
            b.barrier();
        }
        b.load_async(b.smem(d.s, 0), b.gtile(d.g, ROWS, COLS, 1, 0));
        b.wait_async(0);
    })
}

#[test]
fn overwriting_data_other_waves_read_needs_their_wait_and_a_barrier() {
    assert!(run(&read_then_reload(true, true)).hazards.is_empty());
    let k = read_then_reload(true, false);
    let (read, reload) = (
        ops_named(&k, "load (shared")[0],
        ops_named(&k, "load_async")[1],
    );
    assert_eq!(kinds(&run(&k)), vec![("barrier", reload, read)]);
    // With the barrier but no lgkmcnt wait the reads may still be in flight when the barrier releases.
    let r = run(&read_then_reload(false, true));
    assert_eq!(kinds(&r), vec![("wait", read, reload)], "{r}");
    assert!(matches!(
        r.hazards[0],
        Hazard::MissingWait {
            queue: WaitQueue::Shared,
            ..
        }
    ));
}

/// The stagger: group 1 takes a barrier first, so group 0's k-th barrier meets group 1's k-th — one
/// statement later in the program. Wave 0 stores (before or after the shared barrier `B`), group 1
/// reads right after its conditional barrier.
fn staggered(store_after_b: bool) -> Kernel {
    build("stagger", plain(8), 1, |b, d| {
        let wg = || Expr::Wave / 4;
        let store = |b: &mut KernelBuilder| {
            b.if_(Expr::Wave.eq(0), |b| {
                b.store_shared(b.smem(d.s, 0), d.r);
                b.wait_shared(0);
            })
        };
        b.if_(wg().eq(1), |b| b.barrier());
        if !store_after_b {
            store(b);
        }
        b.if_(wg().eq(1), |b| b.load(d.r, b.smem(d.s, 0)));
        b.barrier(); // B
        if store_after_b {
            store(b);
        }
        b.if_(wg().eq(0), |b| b.barrier());
    })
}

#[test]
fn conditional_barriers_pair_by_count_as_s_barrier_does() {
    // Store before B: group 0's B is its 1st barrier and meets group 1's conditional one, which
    // precedes the read — ordered, although the read sits textually before B.
    let r = run(&staggered(false));
    assert!(r.hazards.is_empty(), "{r}");
    assert_eq!(r.block_barriers, vec![2; 8]);
    // Store after B: group 0 is past its 1st barrier, group 1's read past its 1st: same interval.
    let k = staggered(true);
    let r = run(&k);
    let (store, read) = (
        ops_named(&k, "store (reg")[0],
        ops_named(&k, "load (shared")[0],
    );
    assert_eq!(kinds(&r), vec![("barrier", store, read)], "{r}");
    let Hazard::MissingBarrier { first, second, .. } = &r.hazards[0] else {
        unreachable!()
    };
    assert!(first.wave == 0 && second.wave >= 4);
    assert_eq!((first.interval, second.interval), (1, 1));
}

#[test]
fn an_exited_wave_releases_later_barriers() {
    // Wave 1 ends after storing; wave 0 takes one more barrier than wave 1 and then reads: the barrier
    // releases when wave 1 has exited, so the store is ordered before the read.
    let k = build("exit", plain(2), 1, |b, d| {
        b.if_(Expr::Wave.eq(1), |b| {
            b.store_shared(b.smem(d.s, 0), d.r);
            b.wait_shared(0);
        });
        b.if_(Expr::Wave.eq(0), |b| {
            b.barrier();
            b.load(d.r, b.smem(d.s, 0));
        });
    });
    let r = run(&k);
    assert!(r.hazards.is_empty(), "{r}");
    assert_eq!(r.block_barriers, vec![1, 0]);
}

#[test]
fn unmatchable_barriers_are_a_deadlock() {
    let k = build("deadlock", plain(8), 1, |b, _| {
        b.if_(Expr::Wave.eq(0), |b| {
            b.barrier_by(kittens_ir::Scope::WarpGroup)
        });
        b.barrier();
    });
    let r = run(&k);
    let Some(Hazard::Deadlock { waiting }) = r.hazards.first() else {
        panic!("{r}")
    };
    // Wave 0 waits at its warpgroup barrier, waves 1..8 at the block barrier.
    assert_eq!(waiting.len(), 8);
    assert_eq!(waiting[0].op, 0);
    assert!(waiting[1..].iter().all(|s| s.op == 1));
}

/// A double-buffered pipeline over `trip` tiles with one load in flight ahead of the reads.
fn pipeline(trip: i64, wait: Option<u32>) -> Kernel {
    build("pipe", plain(4), 2, |b, d| {
        b.load_async(b.smem(d.s, 0), b.gtile(d.g, ROWS, COLS, 0, 0));
        b.for_range("t", 0, trip, |b, t| {
            b.if_((&t + 1).lt(trip), |b| {
                b.load_async(
                    b.smem(d.s, (&t + 1) % 2),
                    b.gtile(d.g, ROWS, COLS, &t + 1, 0),
                )
            });
            b.if_else(
                (&t + 1).lt(trip),
                |b| match wait {
                    Some(n) => b.wait_async(n),
                    None => b.wait_async_auto(),
                },
                |b| b.wait_async(0),
            );
            b.barrier();
            b.load(d.r, b.smem(d.s, &t % 2));
            b.wait_shared(0);
            b.barrier();
        });
    })
}

#[test]
fn long_loops_are_shortened_without_changing_the_verdict() {
    for wait in [Some(1), Some(2), None] {
        let k = pipeline(41, wait);
        let short = run(&k);
        assert_eq!(short.unrolled.len(), 1, "{short}");
        assert!(short.unrolled[0].skipped > 0);
        let full = analyze(
            &k,
            &Options {
                head_iters: Some(100),
                ..Options::default()
            },
        )
        .unwrap();
        assert!(full.unrolled.is_empty());
        assert_eq!(kinds(&short), kinds(&full), "wait {wait:?}");
        assert_eq!(short.waits, full.waits, "wait {wait:?}");
    }
    // wait(1) keeps one load (the prefetch) in flight: correct. wait(2) lets the needed one fly.
    assert!(run(&pipeline(41, Some(1))).hazards.is_empty());
    let two = run(&pipeline(41, Some(2)));
    assert!(
        !two.hazards.is_empty()
            && two
                .hazards
                .iter()
                .all(|h| matches!(h, Hazard::MissingWait { .. })),
        "{two}"
    );
    let auto = run(&pipeline(41, None));
    assert_eq!(
        auto.auto_counts().into_values().collect::<Vec<_>>(),
        vec![1]
    );
}

/// Random straight-line pipelines: segments of loads into random slots, an automatic wait, a barrier,
/// reads of random slots, a shared wait and a barrier.
fn random_pipeline(rng: &mut SmallRng, slots: u32) -> (Kernel, Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let segments = rng.gen_range(2..6);
    let mut loads = vec![];
    let mut reads = vec![];
    let mut loaded = vec![false; slots as usize];
    for _ in 0..segments {
        // Distinct slots within a segment: two loads of one slot with no wait between them race.
        let mut l: Vec<u32> = (0..slots).collect();
        l.shuffle(rng);
        l.truncate(rng.gen_range(0..=slots as usize));
        l.iter().for_each(|&s| loaded[s as usize] = true);
        let ready: Vec<u32> = (0..slots).filter(|&s| loaded[s as usize]).collect();
        let m = rng.gen_range(0..3).min(ready.len());
        let r: Vec<u32> = (0..m)
            .map(|_| ready[rng.gen_range(0..ready.len())])
            .collect();
        loads.push(l);
        reads.push(r);
    }
    let k = build("rand", plain(2), slots, |b, d| {
        for (l, r) in loads.iter().zip(&reads) {
            for (i, &s) in l.iter().enumerate() {
                b.load_async(b.smem(d.s, s as i64), b.gtile(d.g, ROWS, COLS, i as i64, 0));
            }
            b.wait_async_auto();
            b.barrier();
            for &s in r {
                b.load(d.r, b.smem(d.s, s as i64));
            }
            b.wait_shared(0);
            b.barrier();
        }
    });
    (k, loads, reads)
}

/// The reference: simulate the in-order queue; at each wait the loads that must land are the newest
/// load of every slot read before the next wait, and every load whose slot is loaded again before the
/// next wait; the count is the number of loads issued after the newest of those (all if none).
fn reference_counts(loads: &[Vec<u32>], reads: &[Vec<u32>]) -> Vec<u32> {
    let mut queue: Vec<u32> = vec![]; // slots of outstanding loads, oldest first
    let mut out = vec![];
    for (i, l) in loads.iter().enumerate() {
        queue.extend(l);
        let next_loads: &[u32] = loads.get(i + 1).map_or(&[], |v| v.as_slice());
        let must = |pos: usize| {
            let s = queue[pos];
            let newest = queue.iter().rposition(|&x| x == s) == Some(pos);
            (newest && reads[i].contains(&s)) || next_loads.contains(&s)
        };
        let n = match (0..queue.len()).rev().find(|&p| must(p)) {
            Some(newest) => queue.len() - 1 - newest,
            None => queue.len(),
        };
        queue.drain(..queue.len() - n);
        out.push(n as u32);
    }
    out
}

#[test]
fn automatic_waits_match_an_independent_queue_simulation() {
    let mut rng = SmallRng::seed_from_u64(2026);
    for case in 0..60 {
        let (k, loads, reads) = random_pipeline(&mut rng, 3);
        let r = run(&k);
        assert!(r.hazards.is_empty(), "case {case}: {r}");
        let got: Vec<u32> = r.auto_counts().into_values().collect();
        assert_eq!(
            got,
            reference_counts(&loads, &reads),
            "case {case}: loads {loads:?} reads {reads:?}\n{r}"
        );
        // Writing the counts in keeps the kernel clean, and each is then the largest safe one.
        let fixed = apply_auto_waits(&k, &r.auto_counts());
        let again = run(&fixed);
        assert!(again.hazards.is_empty());
        for w in again.waits.iter().filter(|w| w.queue == WaitQueue::Async) {
            assert_eq!(WaitCount::Outstanding(w.computed), w.written, "case {case}");
        }
        // One more outstanding load at any auto wait that needed something is a hazard.
        for w in r
            .waits
            .iter()
            .filter(|w| w.written == WaitCount::Auto && w.computed < w.max_outstanding)
        {
            let mut c = r.auto_counts();
            c.insert(w.op, w.computed + 1);
            assert!(
                !run(&apply_auto_waits(&k, &c)).hazards.is_empty(),
                "case {case} op {}",
                w.op
            );
        }
    }
}

#[test]
fn apply_auto_waits_rewrites_only_auto_waits() {
    let k = pipeline(4, None);
    let r = run(&k);
    let fixed = apply_auto_waits(&k, &r.auto_counts());
    let counts = |k: &Kernel| -> Vec<WaitCount> {
        k.ops()
            .iter()
            .filter_map(|o| {
                if let Op::Wait { count, .. } = o.op {
                    Some(*count)
                } else {
                    None
                }
            })
            .collect()
    };
    let (before, after) = (counts(&k), counts(&fixed));
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        match b {
            WaitCount::Auto => assert!(matches!(a, WaitCount::Outstanding(_))),
            _ => assert_eq!(a, b),
        }
    }
}

/// Load a tile into registers, then use the registers (store them to another slot).
fn load_then_use(wait: bool) -> Kernel {
    build("reg", plain(1), 2, |b, d| {
        b.load(d.r, b.smem(d.s, 0));
        if wait {
            b.wait_shared(0);
        }
        b.store_shared(b.smem(d.s, 1), d.r);
        b.wait_shared(0);
    })
}

#[test]
fn using_registers_before_their_shared_load_lands_is_a_missing_wait() {
    assert!(run(&load_then_use(true)).hazards.is_empty());
    let k = load_then_use(false);
    let r = run(&k);
    let (load, store) = (
        ops_named(&k, "load (shared")[0],
        ops_named(&k, "store (reg")[0],
    );
    assert_eq!(kinds(&r), vec![("wait", load, store)], "{r}");
    let Hazard::MissingWait { queue, access, .. } = &r.hazards[0] else {
        unreachable!()
    };
    assert_eq!(*queue, WaitQueue::Shared);
    assert_eq!(access.target.as_deref(), Some("register r"));
    assert_eq!(access.access.as_deref(), Some("read"));
}

#[test]
fn trusting_lds_latency_accepts_only_reads_racing_a_later_async_copy() {
    let trust = Options {
        trust_lds_latency: true,
        ..Options::default()
    };
    // A shared read still in flight at the barrier, then another wave's async reload: accepted.
    assert!(analyze(&read_then_reload(false, true), &trust)
        .unwrap()
        .hazards
        .is_empty());
    // Without the barrier it is still a race, and so is a register use before the wait.
    assert_eq!(
        analyze(&read_then_reload(true, false), &trust)
            .unwrap()
            .hazards
            .len(),
        1
    );
    assert_eq!(
        analyze(&load_then_use(false), &trust)
            .unwrap()
            .hazards
            .len(),
        1
    );
}

#[test]
fn loops_with_wave_dependent_bounds_run_in_full() {
    // Wave w runs 20 + w iterations of a barrier-free loop: shortening would be unsafe, so none is.
    let k = build("wave_loop", plain(2), 1, |b, d| {
        b.for_range("i", 0, Expr::Wave + 20, |b, _| b.load(d.r, b.smem(d.s, 0)));
        b.wait_shared(0);
    });
    let r = run(&k);
    assert!(r.unrolled.is_empty());
    assert!(r.hazards.is_empty(), "{r}");
    let k = pipeline(41, Some(1));
    assert_eq!(run(&k).unrolled.len(), 1);
}

/// Warp specialisation: the producer warpgroup copies tiles into a double buffer, the consumer reads
/// them; block barriers hand slots over in both directions.
fn producer_consumer(producer_waits: bool) -> Kernel {
    let schedule = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 1,
        producer_regs: 40,
        consumer_regs: 232,
    };
    build("pc_roles", schedule, 2, |b, d| {
        b.roles(
            |b| {
                b.for_range("t", 0, 6, |b, t| {
                    b.load_async_by(
                        kittens_ir::Scope::WarpGroup,
                        b.smem(d.s, &t % 2),
                        b.gtile(d.g, ROWS, COLS, &t, 0),
                    );
                    if producer_waits {
                        b.wait_async(0);
                    }
                    b.barrier(); // slot t full
                    b.barrier(); // slot t consumed
                });
                b.wait_async(0);
            },
            |b| {
                b.for_range("t", 0, 6, |b, t| {
                    b.barrier();
                    b.load(d.r, b.smem(d.s, &t % 2));
                    b.wait_shared(0);
                    b.barrier();
                });
            },
        )
    })
}

#[test]
fn producer_consumer_roles_hand_slots_over_through_barriers() {
    let r = run(&producer_consumer(true));
    assert!(r.hazards.is_empty(), "{r}");
    let k = producer_consumer(false);
    let r = run(&k);
    assert!(!r.hazards.is_empty(), "{r}");
    for h in &r.hazards {
        let Hazard::MissingWait {
            queue,
            pending,
            access,
            ..
        } = h
        else {
            panic!("{h}")
        };
        assert_eq!(*queue, WaitQueue::Async);
        // The producer (waves 0-3) did not wait; the consumer (waves 4-7) read, or the producer reloaded.
        assert!(pending.wave < 4 && pending.op_name == "load_async", "{h}");
        assert!(access.wave >= 4 || access.op_name == "load_async", "{h}");
    }
}

/// Two consumer warpgroups exchanging a tile in shared memory (the atomic-dQ backward's dSᵀ): each
/// stores its 16-row slice per wave, then every consumer wave reads the whole tile. `scope` orders
/// the stores before the reads.
fn consumers_exchange(scope: kittens_ir::Scope) -> Kernel {
    let schedule = Schedule::ProducerConsumer {
        producers: 1,
        consumers: 2,
        producer_regs: 40,
        consumer_regs: 232,
    };
    let mut b = KernelBuilder::new("exchange", schedule);
    // 8 consumer waves × 16 rows.
    let s = b.shared("S", DType::Bf16, 128, COLS, Swizzle::None, 1);
    let part = b.tile(
        "part",
        DType::Bf16,
        16,
        COLS,
        Layout::Row,
        BaseShape::S16X32,
    );
    let whole = b.tile(
        "whole",
        DType::Bf16,
        128,
        COLS,
        Layout::Row,
        BaseShape::S16X32,
    );
    b.roles(
        |_| {},
        |b| {
            b.fill(part, 1.0);
            let cw = Expr::Wave - 4;
            b.store_shared(b.smem(s, 0).sub(16, COLS, &cw, 0), part);
            b.wait_shared(0);
            b.barrier_by(scope);
            b.load(whole, b.smem(s, 0));
            b.wait_shared(0);
        },
    );
    b.finish().expect("test kernel builds")
}

#[test]
fn consumers_barrier_orders_both_warpgroups() {
    let r = run(&consumers_exchange(kittens_ir::Scope::Consumers));
    assert!(r.hazards.is_empty(), "{r}");
    // A warpgroup's own barrier orders only its four waves' slices: the other warpgroup's race.
    let r = run(&consumers_exchange(kittens_ir::Scope::WarpGroup));
    assert!(
        kinds(&r).iter().any(|k| k.0 == "barrier"),
        "a warpgroup barrier must not order the other warpgroup's stores: {r}"
    );
    // The interpreter releases the consumers without the producer (which never reaches a barrier).
    let k = consumers_exchange(kittens_ir::Scope::Consumers);
    kittens_ir::interp::run(&k, &[], &mut []).expect("the consumers barrier releases");
}

#[test]
fn consumers_barrier_needs_roles() {
    let mut b = KernelBuilder::new("plain_consumers", plain(4));
    b.barrier_by(kittens_ir::Scope::Consumers);
    let e = b.finish().expect_err("a consumers barrier without roles");
    assert!(e.to_string().contains("producer/consumer"), "{e}");
}
