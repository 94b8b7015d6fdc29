//! ALiBi (FlashAttention's `alibi_slopes`, `kittens_kernels::attn::score::Alibi`) on the attention
//! tile programs, on the CPU interpreter (the runner's `cpu` backend) against the f64 references
//! that add `−slope·|i + N_k − N_q − j|` to each logit: forward (the AMD ping-pong, the Hopper
//! producer/consumer program, a key split) and backward (the plain, 4-wave interleave and 8-wave
//! ping-pong key blocks), each output judged by the test rule, at odd lengths (queries ≠ keys, no
//! multiple of the blocks), GQA, both layouts, alone and with a causal mask, a window, a scale and a
//! soft cap. The slopes are drawn fresh per run (f32 of both signs: the kernels read them from a
//! tensor, any values run). Also: the kernels use the slopes (far from the reference without them),
//! and bad slopes are refused naming `alibi_slopes`.

#[path = "attn_support/interp.rs"]
mod interp;

use interp::{draw_qkv, rel_err, what, Case};
use kittens_kernels::attn::score::{AttnOptions, Logits};
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::attn::{BwdShape, Causal};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::AttnConfig;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_kernels::{exec, reference_fwd};
use kittens_runtime::runner::{self, Interpreter};

/// Batch 2 with ALiBi slopes, inputs scaled by 2.
fn case(seq_q: usize, seq_kv: usize) -> Case {
    Case {
        batch: 2,
        alibi: true,
        input_scale: 2.0,
        ..interp::case(seq_q, seq_kv)
    }
}

/// The case's problem, its inputs seeded by its sizes.
fn problem(c: &Case) -> AttnProblem {
    c.problem((c.seq_q * 1013 + c.seq_kv * 11 + c.dim) as u64)
}

/// ALiBi alone and with each other option, at odd lengths.
fn cases() -> Vec<Case> {
    let c = case;
    vec![
        c(77, 77),
        Case {
            causal: Some(true),
            ..c(130, 70)
        },
        Case {
            causal: Some(false),
            layout: AttnLayout::Bhsd,
            ..c(93, 150)
        },
        Case {
            window: Some((40, 3)),
            heads: 2,
            heads_kv: 1,
            ..c(129, 200)
        },
        Case {
            logits: Logits {
                scale: Some(0.2),
                softcap: Some(3.0),
            },
            window: Some((-1, 20)),
            causal: Some(true),
            input_scale: 4.0,
            ..c(111, 97)
        },
    ]
}

fn check_fwd(c: &Case, cfg: AttnConfig, splits: u32, program: &str) {
    let p = AttnProblem {
        attn_cfg: cfg,
        lse: true,
        kv_splits: kittens_kernels::attn_fwd::split::KvSplits::Fixed(splits),
        ..problem(c)
    };
    let r = interp::check_fwd(c, &p, program);
    assert_eq!(r.outputs.len(), 2, "{}", what(c, program));
}

/// The backward's dQ, dK, dV (the shared check asserts there are exactly those three) pass.
fn check_bwd(c: &Case, variant: Option<&'static str>) {
    let p = problem(c);
    assert!(p.args.alibi);
    interp::check_bwd(c, p, variant);
}

#[test]
fn forward_amd_ping_pong_and_key_split() {
    for c in cases() {
        check_fwd(&c, AttnProblem::default().attn_cfg, 1, "ping-pong");
        check_fwd(&c, AttnProblem::default().attn_cfg, 3, "split 3");
    }
}

#[test]
fn forward_hopper_producer_consumer() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cfg = AttnConfig {
        kv_block: 64,
        ..AttnConfig::for_gpu(h100)
    };
    for c in cases() {
        check_fwd(&c, cfg, 1, "producer/consumer");
    }
}

#[test]
fn backward_plain_interleave4_ping_pong8() {
    for c in cases() {
        check_bwd(&c, None);
    }
    for c in cases().into_iter().step_by(2) {
        check_bwd(&c, Some("interleave4"));
        check_bwd(&c, Some("pingpong8"));
    }
}

/// The forward uses the slopes: within bf16 accuracy of the reference with them, far from the
/// reference without them; so does the backward's dQ (through the CPU path the Python package uses).
#[test]
fn kernels_use_the_slopes() {
    let sh = BwdShape {
        batch: 2,
        heads: 2,
        heads_kv: 1,
        seq_q: 67,
        seq_kv: 90,
        dim: 64,
        layout: AttnLayout::Bshd,
    };
    let (q, k, v) = draw_qkv(&sh, 9, 2.0);
    let rel = rel_err;
    let o = AttnOptions {
        alibi: Some(vec![0.5, 0.125, 0.25, 0.0625]),
        ..AttnOptions::default()
    };
    let (out, _) = exec::attention_lse_with(&q, &k, &v, &sh, Causal::No, false, &o).unwrap();
    let (own, _, _) = reference_fwd::forward_with(&q, &k, &v, &sh, Causal::No, &o);
    let (plain, _, _) = reference_fwd::forward(&q, &k, &v, &sh, Causal::No);
    let (e_own, e_plain) = (rel(&out, &own), rel(&out, &plain));
    eprintln!("alibi: vs own reference {e_own:.3e}, vs the plain one {e_plain:.3e}");
    assert!(e_own < 1e-2, "{e_own}");
    assert!(e_plain > 0.1, "{e_plain}");
}

/// Slopes that are not finite, or the wrong count, are refused naming `alibi_slopes`.
#[test]
fn bad_slopes_are_refused_by_name() {
    let sh = BwdShape {
        batch: 1,
        heads: 2,
        heads_kv: 2,
        seq_q: 40,
        seq_kv: 40,
        dim: 64,
        layout: AttnLayout::Bshd,
    };
    let x = vec![0.5f32; sh.q_len()];
    for slopes in [
        vec![f32::NAN, 0.1],
        vec![0.1, f32::INFINITY],
        vec![0.1],
        vec![0.1, 0.2, 0.3],
    ] {
        let o = AttnOptions {
            alibi: Some(slopes.clone()),
            ..AttnOptions::default()
        };
        let err = exec::attention_lse_with(&x, &x, &x, &sh, Causal::No, false, &o)
            .unwrap_err()
            .to_string();
        assert!(err.contains("alibi_slopes"), "{slopes:?}: {err}");
        let lse = vec![0.0f32; sh.lse_len()];
        let t = exec::BwdTensors::new([&x, &x, &x, &x, &x, &lse]);
        let err = exec::attention_bwd_with(t, &sh, Causal::No, &o)
            .unwrap_err()
            .to_string();
        assert!(err.contains("alibi_slopes"), "{slopes:?}: {err}");
    }
}

/// MI300X-attn's schedule does not take ALiBi: refused by name, not silently unbiased.
#[test]
fn mi300x_refuses_alibi() {
    let p = AttnProblem {
        run: RunSettings {
            variant: Some("seed001"),
            ..problem(&case(64, 64)).run
        },
        ..problem(&case(64, 64))
    };
    let err = p.build(kittens_hw::Target::Cpu).unwrap_err().to_string();
    assert!(err.contains("alibi"), "{err}");
}

/// The Hopper backward's two launches as a run builds them (`KernelProblem::stages` for sm_90a, what
/// `kittens run attn_bwd --backend cuda --alibi` executes), on the interpreter: the slopes drawn
/// with the inputs reach both launches by name, and dQ, dK, dV pass the rule.
#[test]
fn hopper_launches_as_a_run_pass_the_slopes_by_name() {
    use kittens_hw::Target;
    use kittens_kernels::reference::compare;
    let c = Case {
        causal: Some(true),
        ..case(130, 70)
    };
    let p = problem(&c);
    let p = BwdProblem {
        run: RunSettings {
            variant: Some("dq"),
            ..p.run
        },
        ..BwdProblem::with(p.args)
    };
    let plan = p.plan(Target::Sm90a).unwrap();
    let stages = p.stages(Target::Sm90a, &plan).unwrap();
    assert_eq!(stages.len(), 2);
    for st in &stages {
        assert!(
            st.kernel.globals.iter().any(|g| g.name == "alibi"),
            "{}",
            st.kernel.name
        );
    }
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(11);
    let inputs = p.draw(&stages[0].kernel, &plan.launch, &mut rng);
    let (e, names) = runner::execute_stages(&Interpreter, &stages, &inputs).unwrap();
    assert_eq!(names, ["dq", "dk", "dv"]);
    let r = p.reference(&inputs);
    let base = r.baseline.expect("a baseline");
    let mut at = 0;
    for (name, &n) in names.iter().zip(&plan.launch.outputs) {
        let ours = compare(&e.output[at..at + n], &r.values[at..at + n]);
        let b = compare(&base[at..at + n], &r.values[at..at + n]);
        eprintln!(
            "hopper launches {name}: {:.3e} vs bf16 {:.3e}",
            ours.rel_err, b.rel_err
        );
        assert!(
            ours.rel_err <= 2.0 * b.rel_err + 1e-4,
            "{name}: {ours:?} vs {b:?}"
        );
        at += n;
    }
}
