//! `rmsnorm`, `rmsnorm_bwd`, `swiglu`, `swiglu_bwd` on the CPU interpreter against their f64
//! references at odd shapes: rows that fill no block (and, backward, no loop of 16 rows), row lengths
//! that are not whole strips (1000, 5128) or not powers of two (768, 3080), rows split over up to 16
//! waves, 64-lane configurations (two rows per block); inputs of ±4 so that the statistics and the
//! sigmoid's tails are exercised. Every output element is one bf16 rounding of f32 arithmetic, so each
//! is judged element by element: `max_rel` within two bf16 steps of the largest reference value.

use kittens_kernels::by_name;
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{NamedArgs, Stage};
use kittens_kernels::rmsnorm::{self, RmsNormConfig};
use kittens_kernels::swiglu::{self, SwigluConfig};
use rand::rngs::SmallRng;
use rand::SeedableRng;

mod common;
use common::{check_with, plan_error, problem};

fn check(name: &str, p: &NamedArgs) -> Vec<f64> {
    check_with(name, p, None)
}

const NORM_SHAPES: [(usize, usize); 5] = [(37, 1000), (5, 768), (19, 3080), (3, 5128), (2, 8192)];

#[test]
fn rmsnorm_forward_at_odd_shapes() {
    for (rows, dim) in NORM_SHAPES {
        for residual in [true, false] {
            check("rmsnorm", &problem(rows, dim).with("residual", residual));
        }
    }
}

#[test]
fn rmsnorm_backward_at_odd_shapes() {
    for (rows, dim) in NORM_SHAPES {
        for residual in [true, false] {
            check(
                "rmsnorm_bwd",
                &problem(rows, dim).with("residual", residual),
            );
        }
    }
    // Many rows: several blocks of 16-row loops, the scratch wider than one 256-column step.
    check("rmsnorm_bwd", &problem(4133, 776));
}

/// The 64-lane (AMD) configurations on the interpreter: two rows per block at D = 768 and 1000, so
/// the scratch has two rows per block and the partial sums two rows of slots.
#[test]
fn rmsnorm_with_two_rows_per_block() {
    for dim in [768u32, 1000] {
        let cfg = RmsNormConfig::new(dim, true, 64);
        assert_eq!(cfg.rows_per_block(), 2, "{dim}");
        let p = problem(45, dim as usize);
        let fwd = vec![Stage {
            kernel: rmsnorm::build(&cfg).unwrap(),
            launch: by_name("rmsnorm")
                .unwrap()
                .problem(&p)
                .unwrap()
                .launch()
                .unwrap(),
        }];
        check_with("rmsnorm", &p, Some(fwd));
        let lp = kittens_kernels::rows::RowLoop::for_target(kittens_hw::Target::Cpu, cfg.waves);
        let bwd = bwd_stages(&cfg, &lp, &p, 45);
        check_with("rmsnorm_bwd", &p, Some(bwd));
    }
}

/// The backward's two launches at configuration `cfg` and row loop `lp`, for `rows` rows.
fn bwd_stages(
    cfg: &RmsNormConfig,
    lp: &kittens_kernels::rows::RowLoop,
    p: &NamedArgs,
    rows: usize,
) -> Vec<Stage> {
    let l = by_name("rmsnorm_bwd")
        .unwrap()
        .problem(p)
        .unwrap()
        .launch()
        .unwrap();
    let scratch = lp.parts_at(rows, cfg.rows_per_block()).unwrap() * cfg.dim as usize;
    vec![
        Stage {
            kernel: rmsnorm::build_bwd(cfg, lp).unwrap(),
            launch: kittens_kernels::problem::Launch {
                outputs: vec![l.outputs[0], scratch],
                ..l.clone()
            },
        },
        Stage {
            kernel: rmsnorm::build_dweight(cfg, lp).unwrap(),
            launch: kittens_kernels::problem::Launch {
                params: l.params.clone(),
                inputs: vec![scratch],
                outputs: vec![cfg.dim as usize],
            },
        },
    ]
}

/// Every prefetch level (`RowLoop::prefetch`: inputs loaded a row ahead) over grids of 1 and 7
/// blocks (and the partial sums in shared memory, `RowLoop::shared_acc`; both sums of a row at one
/// barrier, `RowLoop::one_sum`), 45 rows, with and without the residual's gradient; one chunk per lane (D = 1000 on 32
/// lanes: four waves of 256 columns) and a longer share (D = 5128: levels fall back to 0).
#[test]
fn rmsnorm_backward_at_every_prefetch_level() {
    for dim in [1000u32, 5128] {
        for residual in [true, false] {
            let cfg = RmsNormConfig::new(dim, residual, 32);
            let p = problem(45, dim as usize).with("residual", residual);
            let cases = [(1, 2, false), (7, 0, false), (7, 1, false), (7, 2, false)];
            let more = [
                (7, 0, true, false),
                (1, 0, false, true),
                (7, 2, false, true),
            ];
            let cases = cases.into_iter().map(|(b, p, s)| (b, p, s, false));
            for (blocks, prefetch, shared_acc, one_sum) in
                cases.chain(more).chain([(2, 1, true, true)])
            {
                let lp = kittens_kernels::rows::RowLoop {
                    blocks,
                    waves_per_row: None,
                    prefetch,
                    resident: 1,
                    index32: false,
                    shared_acc,
                    late_loads: false,
                    one_sum,
                    stage: 0,
                };
                check_with("rmsnorm_bwd", &p, Some(bwd_stages(&cfg, &lp, &p, 45)));
            }
        }
    }
}

/// The next rows' inputs staged in shared memory (`RowLoop::stage`: asynchronous copies, a ring 1 to 4
/// rows deep) over grids of 1 and 7 blocks, 45 rows, with and without the residual's gradient, one
/// and two barriers a row; one chunk per lane (D = 1000) and a longer share (D = 5128). The
/// interpreter lands each copy only at its wait and checks the ring's hazards.
#[test]
fn rmsnorm_backward_with_staged_rows() {
    for dim in [1000u32, 5128] {
        for residual in [true, false] {
            let cfg = RmsNormConfig::new(dim, residual, 32);
            let p = problem(45, dim as usize).with("residual", residual);
            for (blocks, stage, one_sum) in
                [(7, 1, false), (7, 2, true), (1, 3, false), (2, 4, true)]
            {
                let lp = kittens_kernels::rows::RowLoop {
                    blocks,
                    stage,
                    one_sum,
                    ..kittens_kernels::rows::RowLoop::for_target(kittens_hw::Target::Cpu, cfg.waves)
                };
                let k = rmsnorm::build_bwd(&cfg, &lp).unwrap();
                let ops = k.ops();
                let copies = ops
                    .iter()
                    .filter(|r| matches!(r.op, kittens_ir::Op::LoadAsync { .. }));
                assert!(copies.count() > 0, "stage = {stage}: no asynchronous copy");
                check_with("rmsnorm_bwd", &p, Some(bwd_stages(&cfg, &lp, &p, 45)));
            }
        }
    }
}

/// The staged ring's wait is what orders each copy before its read: without it (the first wait on
/// the async queue, inside the row loop, dropped) the interpreter's race check refuses the program.
#[test]
fn staged_rows_without_their_wait_are_refused() {
    let cfg = RmsNormConfig::new(1000, true, 32);
    let p = problem(45, 1000).with("residual", true);
    let lp = kittens_kernels::rows::RowLoop {
        blocks: 7,
        stage: 2,
        ..kittens_kernels::rows::RowLoop::for_target(kittens_hw::Target::Cpu, cfg.waves)
    };
    let mut stages = bwd_stages(&cfg, &lp, &p, 45);
    let k = &stages[0].kernel;
    let wait = k
        .ops()
        .iter()
        .find(|r| {
            matches!(
                r.op,
                kittens_ir::Op::Wait {
                    queue: kittens_ir::WaitQueue::Async,
                    ..
                }
            )
        })
        .map(|r| r.index)
        .expect("a wait on the copies");
    stages[0].kernel = k.without_op(wait).unwrap();
    let plan = by_name("rmsnorm_bwd").unwrap().problem(&p).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let inputs = plan.draw(&stages[0].kernel, &stages[0].launch, &mut rng);
    let err = common::run_stages(&stages, inputs).expect_err("a read before its copy's wait");
    assert!(err.to_string().contains("racy"), "{err}");
}

/// A warp per row (`waves_per_row = 1`: four rows a block, no cross-wave sum; a row of 768 or 1000 is
/// 24 or 32 values a lane), with and without the residual's gradient, over grids whose blocks visit
/// many rows, the partial sums in registers and in shared memory.
#[test]
fn rmsnorm_backward_with_a_warp_per_row() {
    for dim in [768u32, 1000] {
        for residual in [true, false] {
            let cfg = RmsNormConfig {
                waves: 4,
                waves_per_row: 1,
                ..RmsNormConfig::new(dim, residual, 32)
            };
            let p = problem(45, dim as usize).with("residual", residual);
            for (blocks, shared_acc) in [(3, false), (1, true)] {
                let lp = kittens_kernels::rows::RowLoop {
                    blocks,
                    waves_per_row: Some(1),
                    prefetch: 0,
                    resident: 1,
                    index32: false,
                    shared_acc,
                    late_loads: false,
                    one_sum: false,
                    stage: 0,
                };
                check_with("rmsnorm_bwd", &p, Some(bwd_stages(&cfg, &lp, &p, 45)));
            }
        }
    }
}

#[test]
fn swiglu_forward_and_backward_at_odd_shapes() {
    for (rows, f) in [(37, 1000), (5, 2816), (3, 11008), (2, 14344), (9, 8)] {
        for packed in [false, true] {
            let p = problem(rows, f).with("packed", packed);
            check("swiglu", &p);
            check("swiglu_bwd", &p);
        }
    }
}

/// Other block shapes (more chunks per lane, more or fewer waves per block), as `KITTENS_SWIGLU` selects
/// them for a measurement: the same check against f64 at widths no strip divides.
#[test]
fn swiglu_with_any_block_shape() {
    for (waves, chunks) in [(4, 2), (2, 4), (8, 1), (1, 2)] {
        for (rows, f) in [(5usize, 1000usize), (3, 2824)] {
            for packed in [false, true] {
                let p = problem(rows, f).with("packed", packed);
                let cfg = SwigluConfig::new(f as u32, packed, 32)
                    .tuned(&format!("waves={waves},chunks={chunks}"))
                    .unwrap();
                for (name, k) in [
                    ("swiglu", swiglu::build(&cfg).unwrap()),
                    ("swiglu_bwd", swiglu::build_bwd(&cfg).unwrap()),
                ] {
                    let launch = by_name(name)
                        .unwrap()
                        .problem(&p)
                        .unwrap()
                        .launch()
                        .unwrap();
                    check_with(name, &p, Some(vec![Stage { kernel: k, launch }]));
                }
            }
        }
    }
    let e = SwigluConfig::new(1000, false, 32)
        .tuned("chunks=3")
        .unwrap_err()
        .to_string();
    assert!(e.contains("KITTENS_SWIGLU = \"chunks=3\""), "{e}");
}

/// The packed form reads the same numbers as the split one: `x = [gate | up]` row by row gives the
/// split run's output bit for bit.
#[test]
fn packed_swiglu_is_the_split_one() {
    let (rows, f) = (7usize, 1000usize);
    let mut rng = SmallRng::seed_from_u64(3);
    let draw = |rng: &mut SmallRng| {
        kittens_kernels::problem::random_scaled(rng, rows * f, kittens_hw::dtype::DType::Bf16, 6.0)
    };
    let (gate, up, dy) = (draw(&mut rng), draw(&mut rng), draw(&mut rng));
    let x: Vec<f32> = gate
        .chunks(f)
        .zip(up.chunks(f))
        .flat_map(|(g, u)| g.iter().chain(u).copied())
        .collect();
    let params = [rows as i64];
    let m = rows * f;
    let run = |k, ins, outs: &[usize]| interpret(&k, &params, ins, outs).unwrap().0;
    let cfg = |packed| SwigluConfig::new(f as u32, packed, 32);
    let split = run(
        swiglu::build(&cfg(false)).unwrap(),
        vec![gate.clone(), up.clone()],
        &[m],
    );
    let packed = run(swiglu::build(&cfg(true)).unwrap(), vec![x.clone()], &[m]);
    assert_eq!(split, packed);
    let split = run(
        swiglu::build_bwd(&cfg(false)).unwrap(),
        vec![dy.clone(), gate, up],
        &[m, m],
    );
    let packed = run(
        swiglu::build_bwd(&cfg(true)).unwrap(),
        vec![dy, x],
        &[2 * m],
    );
    let (dg, du) = split.split_at(m);
    let repacked: Vec<f32> = dg
        .chunks(f)
        .zip(du.chunks(f))
        .flat_map(|(a, b)| a.iter().chain(b).copied())
        .collect();
    assert_eq!(repacked, packed);
}

#[test]
fn bad_sizes_are_refused_with_the_limit() {
    for name in ["rmsnorm", "rmsnorm_bwd"] {
        for dim in [764, 1004, 8200] {
            let e = plan_error(name, &problem(2, dim));
            assert!(
                e.contains("multiple of 8 from 768 to 8192") && e.contains(&dim.to_string()),
                "{e}"
            );
        }
        let e = plan_error(name, &problem(0, 1024));
        assert!(e.contains("rows must be positive"), "{e}");
        let p = problem(2, 1024).with("eps", -1.0f32);
        let e = plan_error(name, &p);
        assert!(e.contains("eps = -1 must be positive"), "{e}");
    }
    for name in ["swiglu", "swiglu_bwd"] {
        for f in [12, 1001, 131_080] {
            let e = plan_error(name, &problem(2, f));
            assert!(
                e.contains("multiple of 8 from 8 to 131072") && e.contains(&f.to_string()),
                "{e}"
            );
        }
    }
}

/// 32-bit offsets where the rows fit `kittens_ir::INDEX32_MAX_SPAN` elements at the widest row (the
/// packed `x`'s `2F`), 64-bit past it; and `KITTENS_SWIGLU`'s `index32=0|1` for a measurement.
#[test]
fn swiglu_takes_32_bit_offsets_where_its_rows_fit() {
    use kittens_hw::Target;
    use kittens_kernels::swiglu::problem::{config, SwigluProblem};
    let at = |rows: usize, f: usize, packed: bool| SwigluProblem {
        rows,
        dim: f,
        packed,
        ..SwigluProblem::default()
    };
    let max = kittens_ir::INDEX32_MAX_SPAN as usize;
    for t in [Target::Sm90a, Target::Cpu] {
        assert!(config(&at(16384, 14336, true), t).index32);
        // 2F a row: the split form fits where the packed one does not.
        assert!(config(&at(max / 1024, 1024, false), t).index32);
        assert!(!config(&at(max / 1024, 1024, true), t).index32);
        assert!(!config(&at(max / 1024 + 1, 1024, false), t).index32);
    }
    let tuned = |v: &str| SwigluConfig::new(1024, false, 32).tuned(v).unwrap();
    assert!(!swiglu::build(&tuned("index32=0")).unwrap().grid.index32);
    let cfg = tuned("index32=1");
    assert!(swiglu::build(&cfg).unwrap().grid.index32);
}
