//! `layernorm` on the CPU interpreter against the f64 reference at odd shapes: rows that do not fill a
//! block, row lengths that are not whole strips, rows split over several waves; the dropout mask checked
//! element by element against the Philox stream (through the residual plane, where a flipped mask bit
//! moves an element by |x|/(1 − p), far over bf16 rounding).

use kittens_hw::Target;
use kittens_kernels::exec::interpret;
use kittens_kernels::layernorm::problem::LayerNormProblem;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_kernels::reference::compare;
use kittens_kernels::rows::NormShape;
use kittens_kernels::KernelError;
use rand::rngs::SmallRng;
use rand::SeedableRng;

struct Run {
    out: Vec<f32>,
    reference: Vec<f64>,
    inputs: Vec<Vec<f32>>,
}

fn run(norm: NormShape) -> Result<Run, KernelError> {
    let p = LayerNormProblem {
        norm,
        eps: None,
        run: RunSettings {
            seed: norm.rows as u64 * 7 + norm.dim as u64,
            ..RunSettings::default()
        },
        ..LayerNormProblem::default()
    };
    let plan = p.plan(Target::Cpu)?;
    let kernel = p.build(Target::Cpu)?;
    let mut rng = SmallRng::seed_from_u64(p.run.seed);
    let inputs = p.draw(&kernel, &plan.launch, &mut rng);
    let (out, _) = interpret(
        &kernel,
        &plan.launch.params,
        inputs.clone(),
        &plan.launch.outputs,
    )?;
    let reference = p.reference(&inputs).values;
    Ok(Run {
        out,
        reference,
        inputs,
    })
}

/// bf16's unit roundoff: each output element is one rounding of a value the f64 reference holds.
const BF16_STEP: f64 = 1.0 / 256.0;

fn check(norm: NormShape) -> Run {
    let r = run(norm).unwrap_or_else(|e| panic!("{norm:?}: {e}"));
    let half = norm.rows * norm.dim;
    let (y, h) = r.out.split_at(half);
    let (ry, rh) = r.reference.split_at(half);
    let ey = compare(y, ry);
    let eh = compare(h, rh);
    assert!(
        ey.rel_err < 1e-2 && ey.max_rel < 2.0 * BF16_STEP,
        "{norm:?} out: {ey:?}"
    );
    assert!(eh.max_rel < BF16_STEP, "{norm:?} residual: {eh:?}");
    assert!(ey.rel_err > 0.0, "bf16 output rounding must show");
    r
}

#[test]
fn plain_residual_layernorm_at_odd_shapes() {
    for (rows, dim) in [(1, 768), (5, 1000), (9, 2056), (3, 4104), (2, 8192)] {
        check(NormShape {
            rows,
            dim,
            p: 0.0,
            ..NormShape::default()
        });
    }
}

#[test]
fn dropout_mask_is_the_philox_stream() {
    for (rows, dim, p) in [(7, 776, 0.1), (3, 3000, 0.5), (2, 8184, 0.25)] {
        let norm = NormShape {
            rows,
            dim,
            p,
            dropout_seed: 0x0123_4567_89ab_cdef ^ dim as u64,
            offset: 1 << 40 | rows as u64,
        };
        let r = check(norm);
        // The dropped fraction, read off the residual plane (h = residual exactly where dropped).
        let (x, res) = (&r.inputs[0], &r.inputs[1]);
        let h = &r.out[rows * dim..];
        let dropped = (0..rows * dim)
            .filter(|&i| x[i] != 0.0 && h[i] == res[i])
            .count() as f64
            / (rows * dim) as f64;
        assert!(
            (dropped - f64::from(p)).abs() < 0.03,
            "{norm:?}: dropped {dropped}"
        );
    }
}

/// `p = 0` is plain residual + layernorm whatever the seed: the program draws nothing.
#[test]
fn p_zero_ignores_the_seed() {
    let a = run(NormShape {
        rows: 4,
        dim: 1024,
        p: 0.0,
        dropout_seed: 1,
        offset: 0,
    })
    .unwrap();
    let b = run(NormShape {
        rows: 4,
        dim: 1024,
        p: 0.0,
        dropout_seed: 2,
        offset: 99,
    })
    .unwrap();
    assert_eq!(a.out, b.out);
}

#[test]
fn bad_row_lengths_are_refused_with_the_limit() {
    for dim in [764, 1004, 8200, 0] {
        let e = run(NormShape {
            rows: 2,
            dim,
            ..NormShape::default()
        })
        .err()
        .unwrap_or_else(|| panic!("D = {dim} ran"))
        .to_string();
        assert!(
            e.contains("multiple of 8 from 768 to 8192") || e.contains("dim must be positive"),
            "{e}"
        );
    }
    let e = run(NormShape {
        p: 1.0,
        ..NormShape::default()
    })
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("[0, 1)"), "{e}");
}
