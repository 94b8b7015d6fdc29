//! The attention backward on the CPU interpreter (the runner's `cpu` backend) against the f64
//! gradients, each of dQ, dK, dV judged by the test rule (at most 2x the PyTorch-style bf16 backward's
//! error against the same reference, plus a floor), at odd lengths, with query and key lengths that
//! differ both ways, and with logits past ±64.

use kittens_kernels::attn::{AttnArgs, AttnLayout, AttnShape};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{self, About, Backend, Execution, Interpreter, Job, RunError};

struct Case {
    heads: usize,
    heads_kv: usize,
    seq_q: usize,
    seq_kv: usize,
    dim: usize,
    layout: AttnLayout,
    /// `None`: no mask; `Some(bottom_right)`.
    causal: Option<bool>,
    scale: f32,
}

fn problem(c: &Case) -> BwdProblem {
    BwdProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads: c.heads,
                heads_kv: c.heads_kv,
                seq: c.seq_q,
                dim: c.dim,
                layout: c.layout,
            },
            seq_kv: Some(c.seq_kv),
            causal: c.causal.is_some(),
            bottom_right: c.causal == Some(true),
            ..Default::default()
        },
        run: RunSettings {
            input_scale: c.scale,
            seed: (c.seq_q * 131 + c.seq_kv) as u64,
            ..RunSettings::default()
        },
        ..BwdProblem::default()
    }
}

fn entry() -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name("attn_bwd").unwrap()
}

/// Runs one case and asserts every gradient passes the rule; at scale 8 (head dim 64) the logits
/// must reach ±64.
fn check(c: &Case) {
    check_variant(c, None);
}

/// [`check`] of a named variant of the kernel (`None`: the default program).
fn check_variant(c: &Case, variant: Option<&'static str>) {
    let p = BwdProblem {
        run: RunSettings {
            variant,
            ..problem(c).run
        },
        ..problem(c)
    };
    let r = runner::run(entry(), &p, &Interpreter).unwrap();
    let what = format!(
        "{variant:?} H{}/{} Nq{} Nkv{} D{} {:?} causal {:?} scale {}",
        c.heads, c.heads_kv, c.seq_q, c.seq_kv, c.dim, c.layout, c.causal, c.scale
    );
    for o in &r.outputs {
        eprintln!("{what}: {} {:?} baseline {:?}", o.name, o.error, o.baseline);
    }
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["dq", "dk", "dv"], "{what}");
    assert_eq!(
        r.checks.len(),
        6,
        "{what}: rel_err and max_rel per gradient"
    );
    for c in &r.checks {
        assert!(c.verdict.baseline.is_some(), "{what}: judged by the rule");
        assert!(c.verdict.passed, "{what}: {c:?}");
    }
    // A gradient that is all zeros (a fully masked case) would pass with zero error: none is here.
    assert!(r.outputs.iter().all(|o| o.error.rel_err > 0.0), "{what}");
    assert!(r.passed, "{what}");
    if c.scale >= 8.0 {
        let l = r.max_abs_logit.unwrap();
        assert!(l >= 64.0, "{what}: logits reach only {l}");
    }
}

#[test]
fn mha_and_gqa_without_mask() {
    for (heads, heads_kv, seq_q, seq_kv, layout) in [
        (2, 2, 37, 45, AttnLayout::Bshd),
        (4, 2, 45, 37, AttnLayout::Bhsd),
        (3, 1, 70, 19, AttnLayout::Bshd),
    ] {
        check(&Case {
            heads,
            heads_kv,
            seq_q,
            seq_kv,
            dim: 64,
            layout,
            causal: None,
            scale: 1.0,
        });
    }
}

#[test]
fn causal_top_left_and_bottom_right() {
    for (seq_q, seq_kv, bottom_right, layout) in [
        (37, 45, false, AttnLayout::Bhsd),
        (45, 37, false, AttnLayout::Bshd),
        (45, 37, true, AttnLayout::Bhsd),
        // More keys than queries, bottom-right: the first query already sees 40 keys.
        (29, 69, true, AttnLayout::Bshd),
        // More queries than keys, bottom-right: the first 41 queries see no key (lse = +inf).
        (70, 29, true, AttnLayout::Bshd),
    ] {
        check(&Case {
            heads: 2,
            heads_kv: 1,
            seq_q,
            seq_kv,
            dim: 64,
            layout,
            causal: Some(bottom_right),
            scale: 1.0,
        });
    }
}

#[test]
fn head_dim_128() {
    check(&Case {
        heads: 2,
        heads_kv: 1,
        seq_q: 33,
        seq_kv: 47,
        dim: 128,
        layout: AttnLayout::Bhsd,
        causal: Some(false),
        scale: 1.0,
    });
}

/// Logits past ±64: the probabilities are near one-hot and `dP − D` cancels, where an error in the
/// log-sum-exp or in D shows first.
#[test]
fn large_logits() {
    for (seq_q, seq_kv, causal, dim, scale) in [
        (37, 53, None, 64, 8.0),
        (53, 37, Some(false), 64, 8.0),
        (41, 77, Some(true), 128, 6.0),
    ] {
        check(&Case {
            heads: 3,
            heads_kv: 1,
            seq_q,
            seq_kv,
            dim,
            layout: AttnLayout::Bshd,
            causal,
            scale,
        });
    }
}

/// The AMD schedules of the key blocks (the registry's `interleave4`: 32 keys per wave, 16-query
/// steps, dK and dV in 32×32 accumulators; `pingpong8`: 8 waves) are the same tile program and pass
/// the rule on the interpreter: odd lengths both ways, GQA, both causal alignments, D64 and D128,
/// logits past ±64, and a query length below one step (a single query).
#[test]
fn amd_schedules_of_the_key_blocks() {
    for variant in ["interleave4", "pingpong8"] {
        for (heads, heads_kv, seq_q, seq_kv, dim, causal, scale) in [
            (4, 2, 77, 45, 64, None, 8.0),
            (2, 1, 45, 77, 128, Some(false), 6.0),
            (3, 1, 77, 45, 128, Some(true), 6.0),
            (2, 2, 45, 70, 64, Some(true), 8.0),
            (2, 2, 70, 29, 64, Some(true), 1.0),
            (2, 1, 1, 33, 64, None, 1.0),
        ] {
            let c = Case {
                heads,
                heads_kv,
                seq_q,
                seq_kv,
                dim,
                layout: if dim == 64 {
                    AttnLayout::Bshd
                } else {
                    AttnLayout::Bhsd
                },
                causal,
                scale,
            };
            check_variant(&c, Some(variant));
        }
    }
}

/// The interpreter with part of its output changed afterwards.
struct Tampered(fn(&mut Vec<f32>));

impl Backend for Tampered {
    fn about(&self) -> About {
        About {
            name: "tampered",
            ..Interpreter.about()
        }
    }
    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let mut e = Interpreter.execute(job)?;
        (self.0)(&mut e.output);
        Ok(e)
    }
}

/// Each gradient is judged on its own: a wrong dK fails dK's checks alone, and the run.
#[test]
fn each_gradient_is_judged_separately() {
    let c = Case {
        heads: 2,
        heads_kv: 1,
        seq_q: 21,
        seq_kv: 19,
        dim: 64,
        layout: AttnLayout::Bshd,
        causal: None,
        scale: 1.0,
    };
    let (q_len, kv_len) = (2 * 21 * 64, 19 * 64);
    // dQ, dK, dV are concatenated: negate dK's first row.
    let r = runner::run(
        entry(),
        &problem(&c),
        &Tampered(|o| {
            let at = 2 * 21 * 64;
            o[at..at + 64].iter_mut().for_each(|x| *x = -*x);
        }),
    )
    .unwrap();
    assert!(!r.passed);
    let passed: Vec<(&str, bool)> = r
        .outputs
        .iter()
        .map(|o| (o.name.as_str(), o.passed))
        .collect();
    assert_eq!(passed, [("dq", true), ("dk", false), ("dv", true)]);
    assert!(
        r.failures().iter().all(|f| f.starts_with("dk ")),
        "{:?}",
        r.failures()
    );
    let e = runner::run(entry(), &problem(&c), &Tampered(|o| o.truncate(7))).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("the problem has {}", q_len + 2 * kv_len)),
        "{e}"
    );
}

/// Sizes and shapes are refused with errors that name them, before anything runs.
#[test]
fn bad_problems_are_refused() {
    let c = Case {
        heads: 3,
        heads_kv: 2,
        seq_q: 8,
        seq_kv: 8,
        dim: 64,
        layout: AttnLayout::Bshd,
        causal: None,
        scale: 1.0,
    };
    let e = runner::validate(entry(), &problem(&c), &Interpreter).unwrap_err();
    assert!(
        e.to_string().contains("heads_kv 2 must divide heads 3"),
        "{e}"
    );
    let mut p = problem(&Case { heads_kv: 1, ..c });
    p.args.seq_kv = Some(0);
    let e = runner::validate(entry(), &p, &Interpreter).unwrap_err();
    assert!(e.to_string().contains("seq_kv must be positive"), "{e}");
    let p = BwdProblem {
        args: AttnArgs {
            attn: AttnShape {
                dim: 48,
                ..p.args.attn
            },
            seq_kv: None,
            ..p.args
        },
        ..p
    };
    let e = runner::run(entry(), &p, &Interpreter).unwrap_err();
    assert!(e.to_string().contains("dim 48"), "{e}");
}
