//! `rotary` on the CPU interpreter against the f64 reference, both forms, both layouts, at sequence
//! lengths and head counts that do not fill a block.

use kittens_hw::Target;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_kernels::reference::compare;
use kittens_kernels::rotary::problem::{RotaryBwdProblem, RotaryProblem};
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn run(
    sh: AttnShape,
    interleaved: bool,
) -> Result<kittens_kernels::reference::ErrorReport, String> {
    run_named("rotary", sh, interleaved)
}

fn run_named(
    name: &str,
    sh: AttnShape,
    interleaved: bool,
) -> Result<kittens_kernels::reference::ErrorReport, String> {
    let fwd = rotary_at(sh, interleaved, (sh.seq * 13 + sh.dim) as u64);
    let p: Box<dyn KernelProblem> = match name {
        "rotary" => Box::new(fwd),
        "rotary_bwd" => Box::new(RotaryBwdProblem(fwd)),
        other => return Err(format!("not a rotary kernel: {other}")),
    };
    let plan = p.plan(Target::Cpu).map_err(|e| e.to_string())?;
    let kernel = p.build(Target::Cpu).map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(p.settings().seed);
    let inputs = p.draw(&kernel, &plan.launch, &mut rng);
    let (out, _) = interpret(
        &kernel,
        &plan.launch.params,
        inputs.clone(),
        &plan.launch.outputs,
    )
    .map_err(|e| e.to_string())?;
    Ok(compare(&out, &p.reference(&inputs).values))
}

/// The rotary problem at `sh` with the inputs of `seed`.
fn rotary_at(sh: AttnShape, interleaved: bool, seed: u64) -> RotaryProblem {
    RotaryProblem {
        attn: sh,
        interleaved,
        run: RunSettings {
            seed,
            ..RunSettings::default()
        },
    }
}

#[test]
fn both_forms_both_layouts_at_odd_shapes() {
    for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
        for interleaved in [false, true] {
            for (batch, heads, seq, dim) in [
                (1, 3, 37, 64),
                (2, 2, 5, 128),
                (1, 1, 70, 32),
                (1, 2, 9, 256),
            ] {
                let sh = AttnShape {
                    batch,
                    heads,
                    heads_kv: heads,
                    seq,
                    dim,
                    layout,
                };
                let e = run(sh, interleaved).unwrap();
                // One bf16 rounding per output: at most 2^-8 relative to the largest value.
                assert!(
                    e.max_rel < 1.0 / 256.0 && e.rel_err > 0.0,
                    "{sh:?} interleaved={interleaved}: {e:?}"
                );
            }
        }
    }
}

#[test]
fn bad_head_dims_are_refused_with_the_limit() {
    for dim in [8, 24, 100, 1024] {
        let sh = AttnShape {
            batch: 1,
            heads: 1,
            heads_kv: 1,
            seq: 4,
            dim,
            layout: AttnLayout::Bshd,
        };
        let e = run(sh, false).unwrap_err();
        assert!(e.contains("multiple of 16 from 16 to 512"), "{e}");
    }
}

#[test]
fn both_arrangements_at_odd_shapes() {
    // Heads along the rows with head counts that leave rows of a wave empty; positions along the
    // rows with a ragged last block and a head dimension that is no power of two.
    use kittens_kernels::rotary::{build, RotaryConfig, RotaryRows};
    for (along, rows, (batch, heads, seq, dim)) in [
        (RotaryRows::Heads, 4, (2, 5, 11, 64)),
        (RotaryRows::Heads, 16, (1, 3, 6, 32)),
        (RotaryRows::Heads, 1, (1, 2, 3, 512)),
        (RotaryRows::Positions, 4, (1, 3, 21, 128)),
        (RotaryRows::Positions, 2, (2, 2, 7, 48)),
        (RotaryRows::Positions, 8, (1, 2, 9, 96)),
    ] {
        for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
            for interleaved in [false, true] {
                let sh = AttnShape {
                    batch,
                    heads,
                    heads_kv: heads,
                    seq,
                    dim,
                    layout,
                };
                let cfg = RotaryConfig {
                    along,
                    rows,
                    waves: 2,
                    ..RotaryConfig::new(dim as u32, layout, interleaved)
                };
                let p = rotary_at(sh, interleaved, (seq * 7 + dim) as u64);
                let plan = p.plan(Target::Cpu).unwrap();
                let kernel = build(&cfg).unwrap();
                let mut rng = SmallRng::seed_from_u64(p.run.seed);
                let inputs = p.draw(&kernel, &plan.launch, &mut rng);
                let (out, _) = interpret(
                    &kernel,
                    &plan.launch.params,
                    inputs.clone(),
                    &plan.launch.outputs,
                )
                .unwrap();
                let e = compare(&out, &p.reference(&inputs).values);
                assert!(
                    e.max_rel < 1.0 / 256.0 && e.rel_err > 0.0,
                    "{cfg:?} {sh:?}: {e:?}"
                );
            }
        }
    }
}

#[test]
fn heads_along_rows_need_a_power_of_two_dim() {
    use kittens_kernels::rotary::{build, RotaryConfig, RotaryRows};
    // The default falls back to positions along the rows...
    let cfg = RotaryConfig::new(48, AttnLayout::Bshd, false);
    assert_eq!(cfg.along, RotaryRows::Positions);
    assert!(build(&cfg).is_ok());
    // ...and asking for heads is refused with the reason.
    let e = build(&RotaryConfig {
        along: RotaryRows::Heads,
        ..cfg
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("power-of-two head dimension (not 48)"), "{e}");
}

/// `rotary_bwd` (the rotation by −θ) against its reference at odd shapes, both forms and layouts, the
/// non-power-of-two head dimension (positions along the rows) included.
#[test]
fn backward_at_odd_shapes() {
    for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
        for interleaved in [false, true] {
            for (batch, heads, seq, dim) in [(1, 3, 37, 64), (2, 2, 5, 128), (1, 2, 9, 96)] {
                let sh = AttnShape {
                    batch,
                    heads,
                    heads_kv: heads,
                    seq,
                    dim,
                    layout,
                };
                let e = run_named("rotary_bwd", sh, interleaved).unwrap();
                assert!(
                    e.max_rel < 1.0 / 256.0 && e.rel_err > 0.0,
                    "{sh:?} interleaved={interleaved}: {e:?}"
                );
            }
        }
    }
}

/// The backward's reference is the forward's adjoint: `⟨R x, y⟩ = ⟨x, Rᵀ y⟩` in f64 on random inputs,
/// so the gradient of `Σ dy · rotary(x)` with respect to `x` is `rotary_bwd(dy)`.
#[test]
fn backward_reference_is_the_adjoint() {
    let sh = AttnShape {
        batch: 1,
        heads: 2,
        heads_kv: 2,
        seq: 7,
        dim: 32,
        layout: AttnLayout::Bshd,
    };
    for interleaved in [false, true] {
        let fwd = rotary_at(sh, interleaved, 0);
        let kernel = fwd.build(Target::Cpu).unwrap();
        let launch = fwd.launch().unwrap();
        let mut rng = SmallRng::seed_from_u64(9);
        let ins = fwd.draw(&kernel, &launch, &mut rng);
        let ys = fwd.draw(&kernel, &launch, &mut rng);
        let (x, y) = (&ins[0], &ys[0]);
        let rx = fwd.reference(&ins).values;
        let rty = RotaryBwdProblem(fwd)
            .reference(&[y.clone(), ins[1].clone(), ins[2].clone()])
            .values;
        let dot =
            |a: &[f64], b: &[f32]| -> f64 { a.iter().zip(b).map(|(a, &b)| a * f64::from(b)).sum() };
        let (l, r) = (dot(&rx, y), dot(&rty, x));
        assert!((l - r).abs() < 1e-9 * l.abs().max(1.0), "{l} vs {r}");
    }
}
