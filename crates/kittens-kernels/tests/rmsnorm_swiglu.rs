//! `rmsnorm`, `rmsnorm_bwd`, `swiglu`, `swiglu_bwd` on the CPU interpreter against their f64
//! references at odd shapes: rows that fill no block (and, backward, no loop of 16 rows), row lengths
//! that are not whole strips (1000, 5128) or not powers of two (768, 3080), rows split over up to 16
//! waves, 64-lane configurations (two rows per block); inputs of ±4 so that the statistics and the
//! sigmoid's tails are exercised. Every output element is one bf16 rounding of f32 arithmetic, so each
//! is judged element by element: `max_rel` within two bf16 steps of the largest reference value.

use kittens_hw::Target;
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{NormShape, Problem, Stage};
use kittens_kernels::reference::compare;
use kittens_kernels::rmsnorm::{self, RmsNormConfig};
use kittens_kernels::swiglu::{self, SwigluConfig};
use kittens_kernels::{by_name, KernelError};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// bf16's unit roundoff.
const BF16_STEP: f64 = 1.0 / 256.0;

fn problem(rows: usize, dim: usize) -> Problem {
    Problem {
        norm: NormShape {
            rows,
            dim,
            ..NormShape::default()
        },
        seed: rows as u64 * 31 + dim as u64,
        input_scale: 4.0,
        ..Problem::default()
    }
}

/// Runs the stages on the interpreter, each launch's inputs by name from the tensors before it;
/// returns the outputs no later launch reads (in launch order), and the drawn inputs.
fn run_stages(stages: &[Stage], inputs: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, KernelError> {
    let mut pool: Vec<(String, Vec<f32>, bool)> = stages[0]
        .kernel
        .globals
        .iter()
        .zip(inputs)
        .map(|(g, t)| (g.name.clone(), t, true))
        .collect();
    for st in stages {
        let ins: Vec<Vec<f32>> = st.kernel.globals[..st.launch.inputs.len()]
            .iter()
            .map(|g| {
                let t = pool.iter_mut().rev().find(|t| t.0 == g.name).unwrap();
                t.2 = true;
                t.1.clone()
            })
            .collect();
        let (out, _) = interpret(&st.kernel, &st.launch.params, ins, &st.launch.outputs)?;
        let mut at = 0;
        for (g, &n) in st.kernel.globals[st.launch.inputs.len()..]
            .iter()
            .zip(&st.launch.outputs)
        {
            pool.push((g.name.clone(), out[at..at + n].to_vec(), false));
            at += n;
        }
    }
    Ok(pool.into_iter().filter(|t| !t.2).map(|t| t.1).collect())
}

/// Runs registry kernel `name` at `p` on the interpreter (with the configuration `stages` builds, or
/// the problem's own) and compares each output with the f64 reference.
fn check_with(name: &str, p: &Problem, stages: Option<Vec<Stage>>) -> Vec<f64> {
    let def = by_name(name).unwrap().problem();
    let plan = def
        .plan(p, Target::Cpu)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let stages = stages.unwrap_or_else(|| def.stages(p, Target::Cpu, &plan).unwrap());
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let inputs = def.draw(p, &stages[0].kernel, &plan.launch, &mut rng);
    let outs = run_stages(&stages, inputs.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let reference = def.reference(p, &inputs).values;
    assert_eq!(outs.len(), plan.launch.outputs.len(), "{name}");
    let mut at = 0;
    let mut errs = Vec::new();
    for (i, (o, &n)) in outs.iter().zip(&plan.launch.outputs).enumerate() {
        assert_eq!(o.len(), n);
        let e = compare(o, &reference[at..at + n]);
        at += n;
        let what = format!("{name} output {i} rows {} dim {}", p.norm.rows, p.norm.dim);
        eprintln!("{what}: {e:?}");
        assert!(
            e.rel_err < 1e-2 && e.max_rel < 2.0 * BF16_STEP,
            "{what}: {e:?}"
        );
        assert!(e.rel_err > 0.0, "{what}: bf16 output rounding must show");
        errs.push(e.rel_err);
    }
    errs
}

fn check(name: &str, p: &Problem) -> Vec<f64> {
    check_with(name, p, None)
}

const NORM_SHAPES: [(usize, usize); 5] = [(37, 1000), (5, 768), (19, 3080), (3, 5128), (2, 8192)];

#[test]
fn rmsnorm_forward_at_odd_shapes() {
    for (rows, dim) in NORM_SHAPES {
        for residual in [true, false] {
            check(
                "rmsnorm",
                &Problem {
                    residual,
                    ..problem(rows, dim)
                },
            );
        }
    }
}

#[test]
fn rmsnorm_backward_at_odd_shapes() {
    for (rows, dim) in NORM_SHAPES {
        for residual in [true, false] {
            check(
                "rmsnorm_bwd",
                &Problem {
                    residual,
                    ..problem(rows, dim)
                },
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
            launch: by_name("rmsnorm").unwrap().problem().launch(&p).unwrap(),
        }];
        check_with("rmsnorm", &p, Some(fwd));
        let l = by_name("rmsnorm_bwd")
            .unwrap()
            .problem()
            .launch(&p)
            .unwrap();
        let scratch = cfg.parts_at(45).unwrap() * dim as usize;
        let bwd = vec![
            Stage {
                kernel: rmsnorm::build_bwd(&cfg).unwrap(),
                launch: kittens_kernels::problem::Launch {
                    outputs: vec![l.outputs[0], scratch],
                    ..l.clone()
                },
            },
            Stage {
                kernel: rmsnorm::build_dweight(&cfg).unwrap(),
                launch: kittens_kernels::problem::Launch {
                    params: l.params.clone(),
                    inputs: vec![scratch],
                    outputs: vec![dim as usize],
                },
            },
        ];
        check_with("rmsnorm_bwd", &p, Some(bwd));
    }
}

#[test]
fn swiglu_forward_and_backward_at_odd_shapes() {
    for (rows, f) in [(37, 1000), (5, 2816), (3, 11008), (2, 14344), (9, 8)] {
        for packed in [false, true] {
            let p = Problem {
                packed,
                ..problem(rows, f)
            };
            check("swiglu", &p);
            check("swiglu_bwd", &p);
        }
    }
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
            let e = by_name(name)
                .unwrap()
                .problem()
                .plan(&problem(2, dim), Target::Cpu)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("multiple of 8 from 768 to 8192") && e.contains(&dim.to_string()),
                "{e}"
            );
        }
        let e = by_name(name)
            .unwrap()
            .problem()
            .plan(&problem(0, 1024), Target::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rows must be positive"), "{e}");
        let p = Problem {
            eps: Some(-1.0),
            ..problem(2, 1024)
        };
        let e = by_name(name)
            .unwrap()
            .problem()
            .plan(&p, Target::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("eps = -1 must be positive"), "{e}");
    }
    for name in ["swiglu", "swiglu_bwd"] {
        for f in [12, 1001, 131_080] {
            let e = by_name(name)
                .unwrap()
                .problem()
                .plan(&problem(2, f), Target::Cpu)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("multiple of 8 from 8 to 131072") && e.contains(&f.to_string()),
                "{e}"
            );
        }
    }
}
