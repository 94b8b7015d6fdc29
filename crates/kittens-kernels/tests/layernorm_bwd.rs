//! `layernorm_bwd` on the CPU interpreter against its f64 reference at odd shapes (rows that fill no
//! block and no loop of 16 rows, row lengths that are not whole strips: 1000, 3080, or split over
//! several waves: 3080, 8192), with and without dropout (the mask drawn again must be the forward's:
//! a flipped bit moves `dx` by a whole `dh/(1 − p)`), on 32- and 64-lane configurations; inputs of ±4.
//! The f64 reference itself is checked against central differences of the forward's f64 reference.

use kittens_hw::Target;
use kittens_kernels::by_name;
use kittens_kernels::layernorm::{bwd, LayerNormConfig};
use kittens_kernels::problem::{Launch, NamedArgs, Stage};
use kittens_kernels::reference;
use kittens_kernels::rows::{NormShape, RowLoop};

mod common;
use common::{check_with, plan_error, problem};

fn with_p(rows: usize, dim: usize, p: f32) -> NamedArgs {
    problem(rows, dim).with("p", p)
}

#[test]
fn layernorm_backward_at_odd_shapes() {
    for (rows, dim) in [(37, 1000), (37, 768), (5, 3080), (3, 8192)] {
        for p in [0.0, 0.1, 0.5] {
            check_with("layernorm_bwd", &with_p(rows, dim, p), None);
        }
    }
    // Many rows: every block loops over ~200 rows; rows past 4096 on 32 lanes (a wave's share in two
    // chunks, walked twice) over several steps.
    check_with("layernorm_bwd", &with_p(1029, 776, 0.25), None);
    for dim in [5128, 8192] {
        for p in [0.0, 0.1] {
            check_with("layernorm_bwd", &with_p(23, dim, p), None);
        }
    }
}

/// Grids of 1, 2, 7 and 64 blocks over 45 rows (every block visiting 45 rows down to one, the last
/// round partial; at every prefetch level, level 2 only without dropout; the partial sums in
/// registers and in shared memory, `RowLoop::shared_acc`; a row's later inputs loaded with its first
/// or where used, `RowLoop::late_loads`), 32 lanes with one and two chunks per wave (the latter without dropout, as sm_90a
/// takes it), 64 lanes with two rows per block.
#[test]
fn layernorm_backward_with_any_grid() {
    for (dim, lanes, p) in [
        (1000u32, 32u32, 0.1),
        (1000, 32, 0.0),
        (5128, 32, 0.0),
        (768, 64, 0.1),
    ] {
        let cfg = LayerNormConfig::new(dim, p, lanes);
        assert_eq!(bwd::chunks(&cfg), 1 + u32::from(dim > 4096), "{dim}");
        let cases = [
            (1, 1, false, false),
            (2, 0, false, false),
            (2, 1, false, false),
        ];
        let more = [
            (2, 2, false, false),
            (7, 1, false, false),
            (64, 2, false, false),
        ];
        let shared_late = [(2, 0, true, false), (7, 1, true, false), (2, 0, true, true)];
        let late = [(7, 1, false, true), (7, 2, true, true)];
        let all = cases.into_iter().chain(more).chain(shared_late).chain(late);
        for (blocks, prefetch, shared_acc, late_loads) in all {
            let lp = RowLoop {
                blocks,
                waves_per_row: None,
                prefetch,
                resident: 1,
                index32: false,
                shared_acc,
                late_loads,
                one_sum: false,
                stage: 0,
            };
            let p = with_p(45, dim as usize, p);
            check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
        }
    }
}

/// Every sum of a row at one barrier (`RowLoop::one_sum`: the raw second moment, ring slots by the
/// row's parity) over grids whose blocks visit many rows (one block: 45 steps, the slots reused 22
/// times), at the prefetch levels, with partial sums in shared memory and late loads; one and two
/// chunks per wave, 64 lanes; and a warp per row (`waves_per_row = 1`: no cross-wave sum at all, three
/// and four chunks per lane at D = 768 and 1000).
#[test]
fn layernorm_backward_with_one_sum_and_a_warp_per_row() {
    let one_sum = [
        (1, 0, false, false),
        (2, 1, false, false),
        (7, 2, false, false),
        (7, 1, true, false),
        (2, 0, true, true),
    ];
    for (dim, lanes, p) in [
        (1000u32, 32u32, 0.1),
        (1000, 32, 0.0),
        (5128, 32, 0.0),
        (768, 64, 0.1),
    ] {
        let cfg = LayerNormConfig::new(dim, p, lanes);
        for (blocks, prefetch, shared_acc, late_loads) in one_sum {
            let lp = RowLoop {
                blocks,
                waves_per_row: None,
                prefetch,
                resident: 1,
                index32: false,
                shared_acc,
                late_loads,
                one_sum: true,
                stage: 0,
            };
            let p = with_p(45, dim as usize, p);
            check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
        }
    }
    for (dim, chunks) in [(768u32, 3u32), (1000, 4)] {
        let cfg = LayerNormConfig {
            waves: 4,
            waves_per_row: 1,
            ..LayerNormConfig::new(dim, 0.0, 32)
        };
        assert_eq!(bwd::chunks(&cfg), chunks, "{dim}");
        for (blocks, one_sum, shared_acc) in [(3, false, false), (2, true, true), (1, false, true)]
        {
            let lp = RowLoop {
                blocks,
                waves_per_row: Some(1),
                prefetch: 0,
                resident: 1,
                index32: false,
                shared_acc,
                late_loads: false,
                one_sum,
                stage: 0,
            };
            let p = with_p(45, dim as usize, 0.0);
            check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
        }
    }
}

/// The next rows' x, residual, dy and dh staged in shared memory (`RowLoop::stage`: asynchronous
/// copies, a ring 1 to 4 rows deep, read where used), with one and two barriers a row, late loads and
/// shared partial sums, over grids whose blocks visit many rows; one and two chunks per wave, 64
/// lanes, and a warp per row (four chunks a lane). The interpreter lands each copy at its wait and
/// checks the ring's hazards.
#[test]
fn layernorm_backward_with_staged_rows() {
    let cases = [
        (7, 1, false, false, false),
        (7, 2, true, false, false),
        (1, 3, false, false, true),
        (2, 4, true, true, false),
    ];
    for (dim, lanes, p) in [
        (1000u32, 32u32, 0.1),
        (1000, 32, 0.0),
        (5128, 32, 0.0),
        (768, 64, 0.1),
    ] {
        let cfg = LayerNormConfig::new(dim, p, lanes);
        for (blocks, stage, one_sum, late_loads, shared_acc) in cases {
            let lp = RowLoop {
                blocks,
                stage,
                one_sum,
                late_loads,
                shared_acc,
                ..RowLoop::for_target(Target::Cpu, cfg.waves)
            };
            let k = bwd::build_bwd(&cfg, &lp).unwrap();
            let ops = k.ops();
            let copies = ops
                .iter()
                .filter(|r| matches!(r.op, kittens_ir::Op::LoadAsync { .. }));
            assert_eq!(
                copies.count(),
                4 * (stage as usize + 1),
                "D{dim} stage {stage}"
            );
            let p = with_p(45, dim as usize, p);
            check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
        }
    }
    let cfg = LayerNormConfig {
        waves: 4,
        waves_per_row: 1,
        ..LayerNormConfig::new(1000, 0.0, 32)
    };
    let lp = RowLoop {
        blocks: 3,
        waves_per_row: Some(1),
        stage: 2,
        ..RowLoop::for_target(Target::Cpu, cfg.waves)
    };
    let p = with_p(45, 1000, 0.0);
    check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
}

/// The backward from the forward's `h` (`from_h`: inputs dy, dh, h, weight; without dropout one row
/// output, dresidual, which is dx too): at odd shapes with and without dropout, and over grids at each
/// prefetch level, with one barrier a row, staged rows and shared partial sums, one and two chunks per
/// wave and 64 lanes, against the f64 reference of the same gradients.
#[test]
fn layernorm_backward_from_h() {
    for (rows, dim) in [(37, 1000), (37, 768), (5, 3080), (3, 8192)] {
        for p in [0.0, 0.1] {
            check_with(
                "layernorm_bwd",
                &with_p(rows, dim, p).with("from_h", true),
                None,
            );
        }
    }
    let cases = [
        // (blocks, prefetch, one_sum, stage, shared_acc)
        (2, 0, false, 0, false),
        (7, 1, false, 0, false),
        (7, 2, true, 0, false),
        (1, 2, true, 0, true),
        (7, 0, true, 2, false),
        (2, 0, false, 1, true),
    ];
    for (dim, lanes, p) in [
        (1000u32, 32u32, 0.1),
        (1000, 32, 0.0),
        (5128, 32, 0.0),
        (768, 64, 0.1),
    ] {
        let cfg = LayerNormConfig {
            from_h: true,
            ..LayerNormConfig::new(dim, p, lanes)
        };
        for (blocks, prefetch, one_sum, stage, shared_acc) in cases {
            let lp = RowLoop {
                blocks,
                prefetch,
                one_sum,
                stage,
                shared_acc,
                ..RowLoop::for_target(Target::Cpu, cfg.waves)
            };
            if stage > 0 {
                let k = bwd::build_bwd(&cfg, &lp).unwrap();
                let copies = k
                    .ops()
                    .iter()
                    .filter(|r| matches!(r.op, kittens_ir::Op::LoadAsync { .. }))
                    .count();
                // h, dy and dh: three tensors staged, not four.
                assert_eq!(copies, 3 * (stage as usize + 1), "D{dim} stage {stage}");
            }
            let p = with_p(45, dim as usize, p).with("from_h", true);
            check_with("layernorm_bwd", &p, Some(stages(&cfg, &lp, &p, 45)));
        }
    }
}

fn stages(cfg: &LayerNormConfig, lp: &RowLoop, p: &NamedArgs, rows: usize) -> Vec<Stage> {
    let l = by_name("layernorm_bwd")
        .unwrap()
        .problem(p)
        .unwrap()
        .launch()
        .unwrap();
    let scratch = bwd::parts_at(cfg, lp, rows).unwrap() * cfg.dim as usize;
    // dx and dresidual (only dresidual from h without dropout), then dweight and dbias.
    let n = l.outputs.len() - 2;
    assert_eq!(n, if cfg.from_h && cfg.p == 0.0 { 1 } else { 2 });
    vec![
        Stage {
            kernel: bwd::build_bwd(cfg, lp).unwrap(),
            launch: Launch {
                outputs: l.outputs[..n]
                    .iter()
                    .copied()
                    .chain([scratch, scratch])
                    .collect(),
                ..l.clone()
            },
        },
        Stage {
            kernel: bwd::build_dweight(cfg, lp).unwrap(),
            launch: Launch {
                params: l.params[..1].to_vec(),
                inputs: vec![scratch, scratch],
                outputs: l.outputs[n..].to_vec(),
            },
        },
    ]
}

/// The 64-lane (AMD) configurations on the interpreter: two rows per block at D = 768 and 1000, so
/// the scratches have two rows per block.
#[test]
fn layernorm_backward_with_two_rows_per_block() {
    for dim in [768u32, 1000] {
        let cfg = LayerNormConfig::new(dim, 0.1, 64);
        assert_eq!(cfg.rows_per_block(), 2, "{dim}");
        let p = with_p(45, dim as usize, 0.1);
        let stages = stages(&cfg, &RowLoop::for_target(Target::Cpu, cfg.waves), &p, 45);
        check_with("layernorm_bwd", &p, Some(stages));
    }
}

/// The analytic f64 backward is the f64 forward's derivative: central differences of the loss
/// `Σ dy·out + Σ dh·h` (both forward planes) at a few coordinates of `x`, `residual`, `weight` and
/// `bias`, with dropout so that dropped and kept elements of `x` both appear.
#[test]
fn backward_reference_matches_finite_differences() {
    let (rows, dim, eps) = (3usize, 24usize, 1e-5);
    let sh = NormShape {
        rows,
        dim,
        p: 0.3,
        ..NormShape::default()
    };
    // Multiples of 2^-10, so that a step of 2^-10 is exact in f32.
    let val =
        |i: usize, s: f32| (((i * 7919 % 1000) as f32 / 500.0 - 1.0) * s * 1024.0).round() / 1024.0;
    let x: Vec<f32> = (0..rows * dim).map(|i| val(i, 2.0)).collect();
    let res: Vec<f32> = (0..rows * dim).map(|i| val(i + 11, 1.0)).collect();
    let w: Vec<f32> = (0..dim).map(|i| val(i + 333, 1.5)).collect();
    let b: Vec<f32> = (0..dim).map(|i| val(i + 444, 0.5)).collect();
    let dy: Vec<f32> = (0..rows * dim).map(|i| val(i + 77, 1.0)).collect();
    let dh: Vec<f32> = (0..rows * dim).map(|i| val(i + 555, 1.0)).collect();
    let loss = |x: &[f32], res: &[f32], w: &[f32], b: &[f32]| -> f64 {
        let out = reference::layernorm(x, res, w, b, &sh, eps);
        let g: Vec<f32> = dy.iter().chain(&dh).copied().collect();
        out.iter().zip(&g).map(|(o, &g)| o * f64::from(g)).sum()
    };
    let grads = reference::layernorm_backward(&dy, &dh, &x, &res, &w, &sh, eps);
    let m = rows * dim;
    let (dx, rest) = grads.split_at(m);
    let (dres, rest) = rest.split_at(m);
    let (dw, db) = rest.split_at(dim);
    let step = 1.0 / 1024.0;
    let fd = |which: usize, i: usize| {
        let mut args = [x.clone(), res.clone(), w.clone(), b.clone()];
        args[which][i] += step;
        let up = loss(&args[0], &args[1], &args[2], &args[3]);
        args[which][i] -= 2.0 * step;
        let down = loss(&args[0], &args[1], &args[2], &args[3]);
        (up - down) / (2.0 * f64::from(step))
    };
    let mut dropped = 0;
    for i in 0..m {
        let (f, a) = (fd(0, i), dx[i]);
        assert!(
            (f - a).abs() < 1e-4 * (1.0 + f.abs()),
            "dx[{i}]: {f} vs {a}"
        );
        dropped += usize::from(a == 0.0 && dres[i] != 0.0);
    }
    assert!(dropped > 0 && dropped < m, "{dropped} of {m} dropped");
    for i in [0, 5, dim + 3, m - 1] {
        let (f, a) = (fd(1, i), dres[i]);
        assert!(
            (f - a).abs() < 1e-4 * (1.0 + f.abs()),
            "dresidual[{i}]: {f} vs {a}"
        );
    }
    for j in [0, 7, dim - 1] {
        let (f, a) = (fd(2, j), dw[j]);
        assert!(
            (f - a).abs() < 1e-4 * (1.0 + f.abs()),
            "dweight[{j}]: {f} vs {a}"
        );
        let (f, a) = (fd(3, j), db[j]);
        assert!(
            (f - a).abs() < 1e-4 * (1.0 + f.abs()),
            "dbias[{j}]: {f} vs {a}"
        );
    }
}

#[test]
fn bad_sizes_are_refused_with_the_limit() {
    for dim in [764, 1004, 8200] {
        let e = plan_error("layernorm_bwd", &problem(2, dim));
        assert!(
            e.contains("multiple of 8 from 768 to 8192") && e.contains(&dim.to_string()),
            "{e}"
        );
    }
    let e = plan_error("layernorm_bwd", &problem(0, 1024));
    assert!(e.contains("rows must be positive"), "{e}");
    let e = plan_error("layernorm_bwd", &with_p(2, 1024, 1.0));
    assert!(e.contains("dropout p = 1 must be in [0, 1)"), "{e}");
}
