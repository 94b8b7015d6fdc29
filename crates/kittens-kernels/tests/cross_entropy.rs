//! `cross_entropy` on the CPU interpreter against its f64 reference, by the test rule against
//! PyTorch's computation on bf16 logits (`cross_entropy::problem::baseline`): 37 rows (no power of
//! two), vocabularies of 1000 (less than one block step), 32000, 50257 (odd: no row starts on a
//! 16-byte boundary) and 128256 (Llama 3), logits of ±12 (softmax probabilities down to e^-24),
//! about one row in eight ignored; label smoothing; f32 logits; 64-lane waves; rows padded to a pitch. Bad labels give a
//! non-finite loss; bad sizes are refused naming the limit.

use kittens_hw::Target;
use kittens_kernels::cross_entropy::problem::{CrossEntropyOptions, CrossEntropyProblem};
use kittens_kernels::cross_entropy::{self, CrossEntropyConfig};
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_kernels::reference::{compare, judge, Tolerance};
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn problem(rows: usize, vocab: usize, opts: CrossEntropyOptions) -> CrossEntropyProblem {
    CrossEntropyProblem {
        rows,
        vocab,
        pitch: None,
        options: opts,
        run: RunSettings {
            seed: rows as u64 * 131 + vocab as u64,
            input_scale: 12.0,
            ..RunSettings::default()
        },
    }
}

/// Runs `cross_entropy` at `p` (with `cfg`'s program, or the problem's own) and judges both outputs;
/// returns the gradient's and the loss's `rel_err`.
fn check(p: &CrossEntropyProblem, cfg: Option<CrossEntropyConfig>) -> [f64; 2] {
    check_drawn(p, cfg, |_| {})
}

/// [`check`] with the drawn inputs changed by `edit` first.
fn check_drawn(
    p: &CrossEntropyProblem,
    cfg: Option<CrossEntropyConfig>,
    edit: impl Fn(&mut Vec<Vec<f32>>),
) -> [f64; 2] {
    let plan = p.plan(Target::Cpu).unwrap();
    let kernel = match cfg {
        Some(c) => cross_entropy::build(&c).unwrap(),
        None => p.build(Target::Cpu).unwrap(),
    };
    let mut rng = SmallRng::seed_from_u64(p.run.seed);
    let mut inputs = p.draw(&kernel, &plan.launch, &mut rng);
    edit(&mut inputs);
    assert!(inputs[1].iter().any(|&l| l < 0.0), "some row ignored");
    let (out, _) = interpret(
        &kernel,
        &plan.launch.params,
        inputs.clone(),
        &plan.launch.outputs,
    )
    .unwrap();
    let r = p.reference(&inputs);
    let m = plan.launch.outputs[0];
    let mut errs = [0.0; 2];
    for (i, (name, range)) in [("grad", 0..m), ("loss", m..out.len())]
        .into_iter()
        .enumerate()
    {
        let e = compare(&out[range.clone()], &r.values[range.clone()]);
        let what = format!("{name} rows {} vocab {} {:?}", p.rows, p.vocab, p.options);
        let b = r.baseline.as_ref().expect("a baseline");
        let be = compare(&b[range.clone()], &r.values[range]);
        eprintln!("{what}: ours {e:?}\n    baseline {be:?}");
        let checks = judge(Tolerance::Rule, &e, Some(&be), None);
        for c in checks {
            assert!(c.verdict.passed, "{what}: {c:?}");
        }
        assert!(e.rel_err > 0.0, "{what}: the rounding must show");
        errs[i] = e.rel_err;
    }
    errs
}

#[test]
fn vocabularies_of_every_shape() {
    for v in [1000, 32000, 50257, 128256] {
        check(&problem(37, v, CrossEntropyOptions::default()), None);
    }
}

#[test]
fn label_smoothing_and_f32_logits() {
    let smooth = CrossEntropyOptions {
        smoothing: 0.1,
        f32_logits: false,
    };
    check(&problem(37, 32000, smooth), None);
    check(&problem(19, 1000, smooth), None);
    let f32_logits = CrossEntropyOptions {
        smoothing: 0.0,
        f32_logits: true,
    };
    check(&problem(37, 50257, f32_logits), None);
    check(
        &problem(
            5,
            3001,
            CrossEntropyOptions {
                smoothing: 0.25,
                f32_logits: true,
            },
        ),
        None,
    );
}

/// Logits that rise along the row (by 40 over it): every step of every wave raises the running
/// maximum, so the sum must be rescaled at each step and across waves.
#[test]
fn a_rising_row_rescales_every_step() {
    let p = problem(37, 32000, CrossEntropyOptions::default());
    let ramp = |x: &mut Vec<Vec<f32>>| {
        for (i, v) in x[0].iter_mut().enumerate() {
            let j = (i % 32000) as f32;
            *v = kittens_ir::numerics::round(
                *v + 40.0 * j / 32000.0,
                kittens_hw::dtype::DType::Bf16,
                kittens_ir::numerics::Rounding::Rtne,
            );
        }
    };
    check_drawn(&p, None, ramp);
}

/// Rows a pitch apart (the fused loss's padded chunks: GPT-2's 50257 at a pitch of 50264, and an odd
/// pitch): the gaps between the rows stay unwritten (NaN reference entries), every row as if dense.
#[test]
fn padded_rows() {
    for (v, pitch) in [(50257, 50264), (1000, 1003)] {
        let mut p = problem(37, v, CrossEntropyOptions::default());
        p.pitch = Some(pitch);
        check(&p, None);
    }
    let mut p = problem(3, 100, CrossEntropyOptions::default());
    p.pitch = Some(99);
    let msg = p.plan(Target::Cpu).unwrap_err().to_string();
    assert!(
        msg.contains("pitch 99") && msg.contains("vocabulary size 100"),
        "{msg}"
    );
}

/// AMD's configuration (64 lanes, 4 waves of 2048 columns) on the interpreter.
#[test]
fn wide_waves() {
    let p = problem(37, 50257, CrossEntropyOptions::default());
    check(&p, Some(CrossEntropyConfig::new(false, 0.0, 64)));
}

/// The block shapes `KITTENS_CE` selects for a measurement (`CrossEntropyConfig::tuned`), on the
/// interpreter by the same rule; a setting outside the ranges is refused naming the variable.
#[test]
fn tuned_block_shapes() {
    let p = problem(19, 32003, CrossEntropyOptions::default());
    for v in ["chunks=4", "waves=4,chunks=8", "waves=16,chunks=1"] {
        let cfg = CrossEntropyConfig::new(false, 0.0, 32).tuned(v).unwrap();
        check(&p, Some(cfg));
    }
    for v in ["chunks=9", "waves=0", "lanes=2", "chunks"] {
        let msg = CrossEntropyConfig::new(false, 0.0, 32)
            .tuned(v)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(cross_entropy::TUNE_VAR), "{msg}");
    }
}

/// A label past the vocabulary (or not an integer) matches no column: that row's loss is not finite,
/// the others are unchanged; an ignored row's loss and gradient are zero.
#[test]
fn bad_labels_are_not_silent() {
    let p = problem(4, 1000, CrossEntropyOptions::default());
    let plan = p.plan(Target::Cpu).unwrap();
    let kernel = p.build(Target::Cpu).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut inputs = p.draw(&kernel, &plan.launch, &mut rng);
    inputs[1] = vec![3.0, 1000.0, 2.5, -1.0];
    let (out, _) = interpret(
        &kernel,
        &plan.launch.params,
        inputs.clone(),
        &plan.launch.outputs,
    )
    .unwrap();
    let loss = &out[4000..];
    assert!(loss[0].is_finite() && loss[0] > 0.0, "{loss:?}");
    assert!(!loss[1].is_finite() && !loss[2].is_finite(), "{loss:?}");
    assert_eq!(loss[3], 0.0);
    assert!(out[3000..4000].iter().all(|&g| g == 0.0));
}

#[test]
fn bad_sizes_are_refused_with_the_limit() {
    let msg = problem(3, 1, CrossEntropyOptions::default())
        .plan(Target::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("vocabulary size 1") && msg.contains("16777216"),
        "{msg}"
    );
    let msg = problem(3, (1 << 24) + 1, CrossEntropyOptions::default())
        .plan(Target::Cpu)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("16777217"), "{msg}");
    let msg = problem(0, 100, CrossEntropyOptions::default())
        .plan(Target::Cpu)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("rows must be positive"), "{msg}");
    let bad = CrossEntropyOptions {
        smoothing: 1.0,
        f32_logits: false,
    };
    let msg = problem(3, 100, bad)
        .plan(Target::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("label smoothing 1") && msg.contains("[0, 1)"),
        "{msg}"
    );
}
