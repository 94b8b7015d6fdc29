//! What the schedule analysis covers: long loops are shortened only where the skipped iterations
//! provably repeat the kept ones, and every distinct block of a launch is analysed.

use kittens_hw::dtype::DType;
use kittens_ir::analysis::{
    analyze, analyze_launch, verify, AnalysisError, Hazard, LaunchReport, Options, Periodicity,
    Report, ScheduleError,
};
use kittens_ir::{
    Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, Schedule, SharedId,
};
use kittens_tile::{BaseShape, Layout, Swizzle};

const ROWS: u32 = 32;
const COLS: u32 = 64;
const TRIP: i64 = 32;

struct Decls {
    s: SharedId,
    g: GlobalId,
    r: RegId,
}

/// A two-wave kernel with a double-buffered shared ring of 32×64 bf16 tiles, a global source and a
/// register tile; `f` writes the body.
fn build(name: &str, f: impl FnOnce(&mut KernelBuilder, &Decls)) -> Kernel {
    let mut b = KernelBuilder::new(name, Schedule::Plain { waves: 2 });
    let s = b.shared("S", DType::Bf16, ROWS, COLS, Swizzle::None, 2);
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

/// `TRIP` steps of: both waves copy tile t into slot t % 2, wait, barrier, read it, wait, barrier.
/// `publish(t)` decides whether step t has its publishing barrier; `drain(t)` how many copies the
/// wait before it may leave in flight.
fn ring(publish: impl Fn(&Expr) -> Option<kittens_ir::Cond>, weak_wait_at: Option<i64>) -> Kernel {
    build("ring", |b, d| {
        b.for_range("t", 0, TRIP, |b, t| {
            b.load_async(b.smem(d.s, &t % 2), b.gtile(d.g, ROWS, COLS, &t, 0));
            match weak_wait_at {
                Some(bad) => b.if_else(t.eq(bad), |b| b.wait_async(1), |b| b.wait_async(0)),
                None => b.wait_async(0),
            }
            match publish(&t) {
                Some(c) => b.if_(c, |b| b.barrier()),
                None => b.barrier(),
            }
            b.load(d.r, b.smem(d.s, &t % 2));
            b.wait_shared(0);
            b.barrier();
        });
    })
}

fn run(k: &Kernel) -> Report {
    analyze(k, &Options::default()).expect("analysis runs")
}

fn full(k: &Kernel) -> Report {
    analyze(
        k,
        &Options {
            head_iters: Some(1000),
            ..Options::default()
        },
    )
    .expect("analysis runs")
}

#[test]
fn an_intact_ring_is_shortened_by_the_program_proof() {
    let r = run(&ring(|_| None, None));
    assert!(r.hazards.is_empty(), "{r}");
    assert_eq!(r.unrolled.len(), 1, "{r}");
    assert_eq!(r.unrolled[0].proof, Periodicity::Program);
    assert!(r.unrolled[0].skipped > 0);
}

/// The barrier that publishes step 16 of 32 is missing: step 16 lies in the middle a shortened loop
/// would skip, so the analysis must see that the iterations do not repeat and analyse them all.
#[test]
fn a_barrier_missing_in_one_middle_iteration_is_caught() {
    let k = ring(|t| Some(t.ne(16)), None);
    let r = run(&k);
    assert!(
        r.hazards
            .iter()
            .any(|h| matches!(h, Hazard::MissingBarrier { first, .. }
                if first.iter == vec![("t".to_string(), 16)])),
        "{r}"
    );
    assert!(r.unrolled.is_empty(), "not periodic: run in full");
    assert_eq!(r.hazards, full(&k).hazards);
}

/// The wait before step 16's barrier leaves the copy in flight in that step only.
#[test]
fn a_wait_weakened_in_one_middle_iteration_is_caught() {
    let k = ring(|_| None, Some(16));
    let r = run(&k);
    assert!(
        r.hazards
            .iter()
            .any(|h| matches!(h, Hazard::MissingWait { pending, .. }
                if pending.iter == vec![("t".to_string(), 16)])),
        "{r}"
    );
    assert_eq!(r.hazards, full(&k).hazards);
}

/// A guard on the last step (`t + 1 < n`) is not periodic by the program, but the skipped steps all
/// repeat: the loop is still shortened, proved by tracing them.
#[test]
fn a_last_step_guard_is_shortened_by_the_traced_proof() {
    let k = ring(|t| Some((t + 1).lt(TRIP).or(t.eq(TRIP - 1))), None);
    let r = run(&k);
    assert!(r.hazards.is_empty(), "{r}");
    assert_eq!(r.unrolled.len(), 1, "{r}");
    assert_eq!(r.unrolled[0].proof, Periodicity::Traced);
}

/// A two-wave kernel over a grid of `ceil(m / 32)` × `cols` blocks (grid order `remap`): each block
/// copies its tile into shared memory, waits, publishes it with a barrier when `publish(row, col, m)`
/// holds, and reads it.
fn blocked(
    cols: i64,
    remap: GridOrder,
    publish: impl Fn(&Expr, &Expr, &Expr) -> kittens_ir::Cond,
) -> Kernel {
    let mut b = KernelBuilder::new("blocked", Schedule::Plain { waves: 2 });
    let m = b.param("m");
    let s = b.shared("S", DType::Bf16, ROWS, COLS, Swizzle::None, 1);
    let g = b.global(
        "g",
        DType::Bf16,
        &[("m", m.clone()), ("n", Expr::c(COLS as i64 * cols))],
        Access::Read,
    );
    let r = b.tile("r", DType::Bf16, ROWS, COLS, Layout::Row, BaseShape::S16X32);
    b.grid(vec![m.ceil_div(ROWS as i64), Expr::c(cols)], remap);
    let (row, col) = (b.block(0), b.block(1));
    b.load_async(b.smem(s, 0), b.gtile(g, ROWS, COLS, &row, &col));
    b.wait_async(0);
    let c = publish(&row, &col, &m);
    b.if_(c, |b| b.barrier());
    b.load(r, b.smem(s, 0));
    b.finish().expect("test kernel builds")
}

fn launch(k: &Kernel, m: i64) -> LaunchReport {
    analyze_launch(
        k,
        &Options {
            params: vec![m],
            ..Options::default()
        },
    )
    .expect("analysis runs")
}

/// Blocks (as reported) with a missing barrier.
fn racing_blocks(r: &LaunchReport) -> Vec<Vec<i64>> {
    r.hazards()
        .filter(|(_, h)| matches!(h, Hazard::MissingBarrier { .. }))
        .map(|(rep, _)| rep.block.clone())
        .collect()
}

#[test]
fn a_race_only_in_block_1_is_caught() {
    let k = blocked(1, GridOrder::RowMajor, |row, _, _| row.ne(1));
    let one = analyze(
        &k,
        &Options {
            params: vec![128],
            ..Options::default()
        },
    )
    .unwrap();
    assert!(one.hazards.is_empty(), "block 0 alone is clean: {one}");
    let r = launch(&k, 128);
    assert_eq!(r.blocks, 4);
    assert_eq!(r.block_dims, vec![0]);
    assert!(r.exhaustive);
    assert_eq!(racing_blocks(&r), vec![vec![1, 0]]);
    // Blocks 0, 2, 3 share one schedule; block 1 has its own.
    let mut sizes: Vec<u64> = r.classes.iter().map(|c| c.blocks).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![1, 3]);
}

/// The barrier is skipped on a partial last tile (`(row + 1)·32 > m`): only a ragged `m` races, and
/// only in its last block.
#[test]
fn a_race_only_at_a_ragged_last_block_is_caught() {
    let k = blocked(1, GridOrder::RowMajor, |row, _, m| {
        ((row + 1) * ROWS as i64).le(m.clone())
    });
    assert!(launch(&k, 128).hazards().next().is_none());
    assert_eq!(racing_blocks(&launch(&k, 100)), vec![vec![3, 0]]);
    assert_eq!(racing_blocks(&launch(&k, 33)), vec![vec![1, 0]]);
}

/// Under a remapped grid order every logical block is still analysed: a race in the last column.
#[test]
fn a_race_in_the_last_column_of_a_remapped_grid_is_caught() {
    for remap in [
        GridOrder::GroupM { window: 2 },
        GridOrder::XcdSwizzle {
            xcds: 2,
            window: 2,
            chunk: 2,
        },
    ] {
        let k = blocked(5, remap, |_, col, _| col.ne(4));
        let r = launch(&k, 96);
        assert_eq!(r.blocks, 15);
        let mut got = racing_blocks(&r);
        got.sort();
        assert_eq!(got, vec![vec![0, 4]], "{remap:?}: one class, first block");
        let class = r.classes.iter().find(|c| !c.report.hazards.is_empty());
        assert_eq!(class.map(|c| c.blocks), Some(3), "{remap:?}");
    }
}

#[test]
fn a_grid_the_schedule_does_not_read_is_one_block() {
    let k = blocked(3, GridOrder::RowMajor, |_, _, _| Expr::c(0).eq(0));
    let r = launch(&k, 1000);
    assert_eq!((r.blocks, r.traced_blocks, r.classes.len()), (96, 1, 1));
    assert!(r.block_dims.is_empty());
}

#[test]
fn empty_problems_are_refused() {
    let k = blocked(1, GridOrder::RowMajor, |_, _, _| Expr::c(0).eq(0));
    for m in [0, -5] {
        let opts = Options {
            params: vec![m],
            ..Options::default()
        };
        let e = analyze(&k, &opts).unwrap_err();
        assert_eq!(
            e,
            AnalysisError::EmptyProblem {
                name: "m".into(),
                value: m
            }
        );
        assert!(analyze_launch(&k, &opts).is_err());
    }
}

#[test]
fn verify_refuses_a_block_dependent_race_and_names_where() {
    let k = blocked(1, GridOrder::RowMajor, |row, _, m| {
        ((row + 1) * ROWS as i64).le(m.clone())
    });
    let e = verify(&k).unwrap_err();
    let ScheduleError::Hazard { at, hazard, .. } = &e else {
        panic!("{e}")
    };
    assert!(matches!(**hazard, Hazard::MissingBarrier { .. }), "{e}");
    assert!(at.starts_with("m="), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("missing barrier") && text.contains("`blocked`"),
        "{text}"
    );
    let clean = blocked(1, GridOrder::RowMajor, |row, _, _| row.le(1_000_000));
    let v = verify(&clean).unwrap();
    assert!(v.param_sets > 10 && v.classes >= 1, "{v:?}");
}

/// A race only when the K loop runs exactly 13 steps (just past where shortening starts), at step 6
/// (one the shortened loop would skip): the sizes `verify` chooses reach it.
#[test]
fn verify_reaches_a_race_at_one_trip_count() {
    let mut b = KernelBuilder::new("trip13", Schedule::Plain { waves: 2 });
    let kk = b.param("k");
    let s = b.shared("S", DType::Bf16, ROWS, COLS, Swizzle::None, 2);
    let g = b.global(
        "g",
        DType::Bf16,
        &[("m", Expr::c(ROWS as i64)), ("k", kk.clone())],
        Access::Read,
    );
    let r = b.tile("r", DType::Bf16, ROWS, COLS, Layout::Row, BaseShape::S16X32);
    let steps = kk.ceil_div(COLS as i64);
    b.for_range("t", 0, &steps, |b, t| {
        b.load_async(b.smem(s, &t % 2), b.gtile(g, ROWS, COLS, 0, &t));
        b.wait_async(0);
        b.if_(steps.ne(13).or(t.ne(6)), |b| b.barrier());
        b.load(r, b.smem(s, &t % 2));
        b.wait_shared(0);
        b.barrier();
    });
    let k = b.finish().unwrap();
    let e = verify(&k).unwrap_err();
    let ScheduleError::Hazard { at, hazard, .. } = &e else {
        panic!("{e}")
    };
    let Hazard::MissingBarrier { first, .. } = &**hazard else {
        panic!("{e}")
    };
    assert_eq!(first.iter, vec![("t".to_string(), 6)], "{e}");
    let size: i64 = at["k=".len()..].split(' ').next().unwrap().parse().unwrap();
    assert_eq!((size + COLS as i64 - 1) / COLS as i64, 13, "{e}");
}

/// Wave 0 passes 32 barriers one per step, wave 1 the same 32 two per step in a 16-step loop; then
/// wave 0 hands a tile to wave 1 behind one more barrier. Shortening both loops would skip different
/// numbers of barriers and pair the hand-off barrier with a loop barrier: the loops must run in full,
/// and the verdict is that of the full trace (clean).
#[test]
fn loops_that_would_skip_different_barriers_run_in_full() {
    let k = build("uneven", |b, d| {
        b.if_else(
            Expr::Wave.eq(0),
            |b| {
                b.for_range("i", 0, 32, |b, _| b.barrier());
                b.store_shared(b.smem(d.s, 0), d.r);
                b.wait_shared(0);
                b.barrier();
            },
            |b| {
                b.for_range("j", 0, 16, |b, _| {
                    b.barrier();
                    b.barrier();
                });
                b.barrier();
                b.load(d.r, b.smem(d.s, 0));
                b.wait_shared(0);
            },
        );
    });
    let r = run(&k);
    assert!(r.unrolled.is_empty(), "{r}");
    assert!(r.hazards.is_empty(), "{r}");
    assert_eq!(r.hazards, full(&k).hazards);
}
