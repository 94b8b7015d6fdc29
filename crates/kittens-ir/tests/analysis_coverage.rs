//! What the schedule analysis covers: long loops are shortened only where the skipped iterations
//! provably repeat the kept ones, and every distinct block of a launch is analysed.

use kittens_hw::dtype::DType;
use kittens_ir::analysis::{analyze, Hazard, Options, Periodicity, Report};
use kittens_ir::{Access, Expr, GlobalId, Kernel, KernelBuilder, RegId, Schedule, SharedId};
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
