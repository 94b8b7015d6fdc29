//! HipKittens Table 4 on the MI355X: the cache model's hit rates and Eq. 1 bandwidth beside the paper's,
//! and the paper's directions (which order beats which). Run with `--nocapture` to see the table.

use kittens_grid::l2::{
    simulate, simulate_staggered, GemmShape, L2Report, SEED_000_TABLE4_EQ1_TBPS,
};
use kittens_grid::remap::{xcd_chunk, GridOrder};

const RM: GridOrder = GridOrder::RowMajor;
const W7C216: GridOrder = GridOrder::XcdSwizzle {
    xcds: 8,
    window: 7,
    chunk: 216,
};
const W5C25: GridOrder = GridOrder::XcdSwizzle {
    xcds: 8,
    window: 5,
    chunk: 25,
};
const W8C542: GridOrder = GridOrder::XcdSwizzle {
    xcds: 8,
    window: 8,
    chunk: 542,
};
const W8C64: GridOrder = GridOrder::XcdSwizzle {
    xcds: 8,
    window: 8,
    chunk: 64,
};

/// HipKittens Table 4: (size, order, L2 %, LLC %, Mem. BW TB/s).
const PAPER: [(u64, GridOrder, f64, f64, f64); 6] = [
    (9216, RM, 55.0, 95.0, 15.1),
    (9216, W7C216, 79.0, 24.0, 14.9),
    (9216, W5C25, 75.0, 93.0, 18.3),
    (14592, RM, 36.0, 76.0, 10.7),
    (14592, W8C542, 79.0, 7.0, 13.9),
    (14592, W8C64, 78.0, 55.0, 16.6),
];

/// The stagger docs/grid.md discusses: CUs of an XCD spread over 10% of a block's duration.
const STAGGER: f64 = 0.1;

fn run(size: u64, order: GridOrder, stagger: f64) -> L2Report {
    let gpu = kittens_hw::gpu("mi355x").unwrap();
    simulate_staggered(
        gpu,
        &GemmShape::bf16(size, size, size, (192, 256, 64)),
        order,
        stagger,
    )
    .unwrap()
}

fn table(stagger: f64) -> Vec<L2Report> {
    println!("\nstagger {stagger}: ours (paper)");
    println!(
        "{:>6} {:<14} {:>14} {:>14} {:>18} {:>10}",
        "size", "order", "L2 %", "LLC %", "Eq.1 T4 TB/s", "peak TB/s"
    );
    PAPER
        .iter()
        .map(|&(size, order, l2, llc, bw)| {
            let r = run(size, order, stagger);
            println!(
                "{size:>6} {:<14} {:>6.1} ({l2:>4.0}) {:>6.1} ({llc:>4.0}) {:>9.1} ({bw:>5.1}) {:>10.1}",
                r.order,
                r.l2_hit * 100.0,
                r.llc_hit * 100.0,
                r.bandwidth_tbps_table4.unwrap(),
                r.bandwidth_tbps
            );
            r
        })
        .collect()
}

/// Every direction Table 4 shows: 9216: W5/C25 bandwidth > row-major, W7/C216 LLC below both;
/// 14592: W8/C64 > W8/C542 > row-major bandwidth; row-major the lowest L2 in both. Returns the
/// claims that fail.
fn failed_directions(r: &[L2Report]) -> Vec<&'static str> {
    let bw = |i: usize| r[i].bandwidth_tbps;
    let checks = [
        (bw(2) > bw(0), "9216: W5/C25 bandwidth > row-major"),
        (
            r[1].llc_hit < r[0].llc_hit.min(r[2].llc_hit),
            "9216: W7/C216 lowest LLC",
        ),
        (
            bw(5) > bw(4) && bw(4) > bw(3),
            "14592: W8/C64 > W8/C542 > row-major bandwidth",
        ),
        (
            r[0].l2_hit < r[1].l2_hit.min(r[2].l2_hit),
            "9216: row-major lowest L2",
        ),
        (
            r[3].l2_hit < r[4].l2_hit.min(r[5].l2_hit),
            "14592: row-major lowest L2",
        ),
    ];
    checks.iter().filter(|c| !c.0).map(|c| c.1).collect()
}

/// With CUs out of phase by 10% of a block, every direction of Table 4 holds.
#[test]
fn table_4_directions_staggered() {
    let r = table(STAGGER);
    assert_eq!(failed_directions(&r), Vec::<&str>::new());
    // The bandwidth ordering is the same whichever Eq. 1 constants are used.
    let t4 = |i: usize| r[i].bandwidth_tbps_table4.unwrap();
    assert!(t4(2) > t4(0) && t4(5) > t4(4) && t4(4) > t4(3));
}

/// Lockstep rounds (the default) reproduce the 14592 rows within 3 points and the W7/C216 LLC
/// collapse, but 9216 row-major ties with W5/C25 (36 columns ≡ 4 mod 8 hand each XCD 7 rows × 9
/// columns, as compact as a W5 window): exactly two claims fail, both by less than 2% — a tie, not a
/// reversal.
#[test]
fn table_4_lockstep() {
    let r = table(0.0);
    let failed = failed_directions(&r);
    assert_eq!(
        failed,
        vec![
            "9216: W5/C25 bandwidth > row-major",
            "9216: row-major lowest L2"
        ]
    );
    assert!((r[2].bandwidth_tbps / r[0].bandwidth_tbps - 1.0).abs() < 0.02);
    assert!((r[2].l2_hit - r[0].l2_hit).abs() < 0.02);
    for i in [3, 5] {
        assert!(
            (r[i].l2_hit * 100.0 - PAPER[i].2).abs() < 3.0,
            "{}",
            r[i].order
        );
        assert!(
            (r[i].llc_hit * 100.0 - PAPER[i].3).abs() < 3.0,
            "{}",
            r[i].order
        );
    }
}

/// Table 4's "Mem. BW" column is Eq. 1 with fixed L2 and LLC bandwidths: the least-squares fit over
/// its six rows gives the constants the crate uses, and reproduces each row within 0.05 TB/s.
#[test]
fn table_4_bandwidth_column_is_eq1() {
    let (mut s11, mut s12, mut s22, mut t1, mut t2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(_, _, l2, llc, bw) in &PAPER {
        let (a, b) = (l2 / 100.0, llc / 100.0);
        (s11, s12, s22, t1, t2) = (
            s11 + a * a,
            s12 + a * b,
            s22 + b * b,
            t1 + a * bw,
            t2 + b * bw,
        );
    }
    let det = s11 * s22 - s12 * s12;
    let (l2_bw, llc_bw) = ((t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det);
    println!("fit: L2 {l2_bw:.3} TB/s, LLC {llc_bw:.3} TB/s");
    assert!(
        (l2_bw - SEED_000_TABLE4_EQ1_TBPS.0).abs() < 0.01
            && (llc_bw - SEED_000_TABLE4_EQ1_TBPS.1).abs() < 0.01
    );
    for &(_, _, l2, llc, bw) in &PAPER {
        assert!((l2_bw * l2 / 100.0 + llc_bw * llc / 100.0 - bw).abs() < 0.06);
    }
}

/// Why our W8/C542 is not the paper's: 76×57 = 4332 blocks < 8·542 = 4336, so Algorithm 1's aligned
/// prefix is empty and every id keeps its order — C542 is group-M W8 alone. Dropping the guard maps
/// ids outside the grid (the paper's 79% L2 / 7% LLC fit that unguarded assignment).
#[test]
fn chunk_542_is_identity_on_14592() {
    let blocks = 76 * 57;
    assert!((0..blocks).all(|id| xcd_chunk(id, blocks, 8, 542) == id));
    let unguarded = |id: u64| (id / 8 / 542) * 8 * 542 + (id % 8) * 542 + (id / 8) % 542;
    assert!((0..blocks).any(|id| unguarded(id) >= blocks));
    let gm = run(14592, GridOrder::GroupM { window: 8 }, 0.0);
    let c542 = run(14592, W8C542, 0.0);
    assert_eq!((gm.l2_hit, gm.llc_hit), (c542.l2_hit, c542.llc_hit));
}

/// A 14592³ GEMM with 192×256×64 tiles runs through the model: ⌈14592/192⌉·⌈14592/256⌉ = 76·57 = 4332
/// blocks in ⌈4332/256⌉ = 17 rounds of the MI355X's 256 CUs. (How long it takes is printed, not
/// asserted: a wall-clock bound fails on a loaded machine without anything being wrong.)
#[test]
fn big_gemm_runs_through_the_model() {
    let t = std::time::Instant::now();
    let r = run(14592, W8C64, STAGGER);
    assert_eq!((r.blocks, r.rounds), (4332, 17));
    eprintln!("14592³ through the cache model in {:?}", t.elapsed());
}

/// Exact accounting on a GPU whose single L2 holds the whole problem (H100, 50 MB): every slice
/// misses once and hits afterwards, so HBM bytes equal the compulsory bytes and the hit rate is
/// 1 − compulsory / requested.
#[test]
fn everything_fits_means_compulsory_only() {
    let h100 = kittens_hw::gpu("h100").unwrap();
    let s = GemmShape::bf16(1000, 1500, 2000, (128, 256, 64));
    let r = simulate(h100, &s, RM).unwrap();
    let (rows, cols) = s.grid();
    let requested = (s.m * cols + s.n * rows) * s.k * 2;
    assert_eq!(r.l2_request_bytes, requested);
    assert_eq!(r.hbm_bytes, r.compulsory_bytes);
    assert!((r.l2_hit - (1.0 - r.compulsory_bytes as f64 / requested as f64)).abs() < 1e-12);
    assert_eq!(r.llc_hit, 0.0);
}
