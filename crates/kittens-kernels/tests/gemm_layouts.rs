//! The GEMM reading A as `M × K` or transposed (stored `K × M`), B as `N × K` or `K × N`, and A, B, C
//! as slices of bigger matrices (leading dimensions `lda, ldb, ldc` above their rows): the registry
//! problem's launches on the interpreter, at sizes with partial blocks along M, N and K, for every
//! block height the Hopper program has and with split-K, against the f64 product of the operands as
//! stored. Judged by FlashAttention's rule against the best a bf16 output can do (the f64 product
//! rounded once to bf16): at most twice its error plus a small floor. The gaps between C's strided
//! rows must keep the run's NaN poison (the reference marks them NaN; `reference::compare`).

#[path = "common/mod.rs"]
mod common;

use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::gemm::problem::GemmKind;
use kittens_kernels::gemm::problem::GemmProblem;
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::{build, ALayout, BLayout, GemmConfig, GemmTypes, LeadingDims};
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::reference::compare;
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// `rel_err` floor of the rule: far below one bf16 step (2^-9 relative), far above f32 noise.
const FLOOR: f64 = 1e-5;

struct Case {
    m: usize,
    n: usize,
    k: usize,
    a: ALayout,
    b: BLayout,
    /// Elements added to each stored row's length for the leading dimensions (`None`: dense).
    pad: Option<[usize; 3]>,
    rows: u32,
    split_k: u32,
}

fn problem(c: &Case) -> GemmProblem {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let tile = HopperTile {
        rows: c.rows,
        cols: 128,
    };
    let gemm = GemmConfig {
        a_layout: c.a,
        b_layout: c.b,
        split_k: c.split_k,
        ..tile.config(h100)
    };
    let mut p = GemmProblem {
        gemm,
        ..GemmProblem::new(GemmKind::Bf16, c.m, c.n, c.k)
    };
    p.run.seed = (c.m * 131 + c.n * 17 + c.k) as u64 + c.rows as u64;
    p.ld = c.pad.map(|[pa, pb, pc]| {
        let [(_, a), (_, b), (_, cc)] = GemmProblem::stored(&p);
        LeadingDims {
            a: a + pa,
            b: b + pb,
            c: cc + pc,
        }
    });
    p
}

/// Runs the case's launches on the interpreter; returns (our rel_err, the bf16-rounded product's).
fn run(c: &Case) -> (f64, f64) {
    let p = problem(c);
    let what = format!(
        "{}x{}x{} A {:?} B {:?} ld {:?} rows {} split {}",
        c.m, c.n, c.k, c.a, c.b, p.ld, c.rows, c.split_k
    );
    let plan = p
        .plan(Target::Cpu)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let stages = p.stages(Target::Cpu, &plan).unwrap();
    assert_eq!(stages.len(), if c.split_k > 1 { 2 } else { 1 }, "{what}");
    let mut rng = SmallRng::seed_from_u64(p.run.seed);
    let inputs = p.draw(&stages[0].kernel, &plan.launch, &mut rng);
    let out = common::run_stages(&stages, inputs.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let reference = p.reference(&inputs).values;
    assert_eq!(out.len(), 1, "{what}");
    assert_eq!(out[0].len(), reference.len(), "{what}");
    let ours = compare(&out[0], &reference);
    let best: Vec<f32> = reference
        .iter()
        .map(|&r| round(r as f32, DType::Bf16, Rounding::Rtne))
        .collect();
    let base = compare(&best, &reference);
    eprintln!("{what}: ours {ours:?} bf16 {base:?}");
    assert!(
        ours.rel_err <= 2.0 * base.rel_err + FLOOR && ours.max_rel <= 2.0 * base.max_rel + FLOOR,
        "{what}: ours {ours:?}, bf16-rounded product {base:?}"
    );
    assert!(ours.rel_err > 0.0, "{what}: bf16 output rounding must show");
    (ours.rel_err, base.rel_err)
}

const LAYOUTS: [(ALayout, BLayout); 4] = [
    (ALayout::Mk, BLayout::Nk),
    (ALayout::Mk, BLayout::Kn),
    (ALayout::Km, BLayout::Kn),
    (ALayout::Km, BLayout::Nk),
];

/// Every pair of operand orders, dense and strided, at a size with partial blocks along M, N and K.
#[test]
fn every_operand_order_dense_and_strided() {
    for (a, b) in LAYOUTS {
        for pad in [None, Some([24, 8, 40])] {
            run(&Case {
                m: 200,
                n: 136,
                k: 100,
                a,
                b,
                pad,
                rows: 128,
                split_k: 1,
            });
        }
    }
}

/// A transposed across the block heights (one, two and four 64-column atoms of A's slot on Hopper),
/// strided, and with split-K writing a strided C through the reduction.
#[test]
fn transposed_a_on_every_block_height_and_split_k() {
    for rows in [64, 256] {
        for b in [BLayout::Kn, BLayout::Nk] {
            run(&Case {
                m: rows as usize + 40,
                n: 72,
                k: 88,
                a: ALayout::Km,
                b,
                pad: Some([8, 16, 8]),
                rows,
                split_k: 1,
            });
        }
    }
    for (a, b) in LAYOUTS {
        run(&Case {
            m: 72,
            n: 136,
            k: 300,
            a,
            b,
            pad: Some([16, 8, 24]),
            rows: 64,
            split_k: 3,
        });
    }
}

/// Leading dimensions below a stored row, and A transposed on the schedules whose MFMAs read K-major
/// register operands or with fp8 operands, are refused by name.
#[test]
fn bad_layouts_are_refused_by_name() {
    let mut p = problem(&Case {
        m: 64,
        n: 64,
        k: 64,
        a: ALayout::Km,
        b: BLayout::Nk,
        pad: Some([0, 0, 0]),
        rows: 64,
        split_k: 1,
    });
    p.ld = Some(LeadingDims {
        a: 63,
        b: 64,
        c: 64,
    });
    let e = p.plan(Target::Cpu).unwrap_err().to_string();
    assert!(e.contains("lda 63") && e.contains("64 elements"), "{e}");
    // Hopper's TMA needs rows 16 bytes apart.
    p.ld = Some(LeadingDims {
        a: 68,
        b: 64,
        c: 64,
    });
    let e = p.plan(Target::Sm90a).unwrap_err().to_string();
    assert!(e.contains("lda 68") && e.contains("16 bytes"), "{e}");
    let ping_pong = GemmConfig {
        a_layout: ALayout::Km,
        ..GemmConfig::small()
    };
    let e = build(&ping_pong).unwrap_err().to_string();
    assert!(e.contains("K x M") && e.contains("PingPong8"), "{e}");
    let fp8 = GemmConfig {
        a_layout: ALayout::Km,
        types: GemmTypes::fp8(DType::Fp8E4m3),
        k_step: 128,
        ..HopperTile {
            rows: 128,
            cols: 128,
        }
        .config(kittens_hw::gpu("h100").unwrap())
    };
    let e = build(&fp8).unwrap_err().to_string();
    assert!(e.contains("K x M") && e.contains("fp8"), "{e}");
}
