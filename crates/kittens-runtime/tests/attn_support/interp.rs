//! The attention tests on the CPU interpreter (`runner_attn_features.rs`, `runner_attn_alibi.rs`): one
//! problem as a [`Case`] (lengths, heads, mask, options), its registry problems, and the checks that run
//! the forward and the backward through the runner and judge each output by the test rule.
#![allow(dead_code)]

use kittens_kernels::attn::score::{AttnArgs, Logits, Window};
use kittens_kernels::attn::{AttnLayout, AttnShape, BwdShape};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_runtime::runner::{self, Interpreter, RunReport};

/// One problem: lengths, heads, the mask and the options.
#[derive(Clone, Copy)]
pub struct Case {
    pub seq_q: usize,
    pub seq_kv: usize,
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub dim: usize,
    pub layout: AttnLayout,
    /// `None`: no causal mask; `Some(bottom_right)`.
    pub causal: Option<bool>,
    pub logits: Logits,
    pub window: Option<(i64, i64)>,
    pub alibi: bool,
    pub input_scale: f32,
}

/// Batch 1, 4 query heads on 2 key heads (GQA), D64, BSHD, no mask or option, inputs scaled by 4.
pub fn case(seq_q: usize, seq_kv: usize) -> Case {
    Case {
        seq_q,
        seq_kv,
        batch: 1,
        heads: 4,
        heads_kv: 2,
        dim: 64,
        layout: AttnLayout::Bshd,
        causal: None,
        logits: Logits::default(),
        window: None,
        alibi: false,
        input_scale: 4.0,
    }
}

impl Case {
    /// `attn_fwd`'s problem for the case, its inputs drawn from `seed`.
    pub fn problem(&self, seed: u64) -> AttnProblem {
        let c = self;
        AttnProblem {
            args: AttnArgs {
                attn: AttnShape {
                    batch: c.batch,
                    heads: c.heads,
                    heads_kv: c.heads_kv,
                    seq: c.seq_q,
                    dim: c.dim,
                    layout: c.layout,
                },
                seq_kv: Some(c.seq_kv),
                causal: c.causal.is_some(),
                bottom_right: c.causal == Some(true),
                logits: c.logits,
                window: c.window.map(|(l, r)| Window::new(l, r).unwrap()),
                alibi: c.alibi,
            },
            run: RunSettings {
                input_scale: c.input_scale,
                seed,
                ..RunSettings::default()
            },
            ..AttnProblem::default()
        }
    }
}

/// The case and the program, for messages.
pub fn what(c: &Case, program: &str) -> String {
    format!(
        "{program} B{} H{}/{} Nq{} Nkv{} D{} {:?} causal {:?} {:?} window {:?} alibi {} x{}",
        c.batch,
        c.heads,
        c.heads_kv,
        c.seq_q,
        c.seq_kv,
        c.dim,
        c.layout,
        c.causal,
        c.logits,
        c.window,
        c.alibi,
        c.input_scale
    )
}

/// `p`'s attention as registry kernel `kernel`'s problem (`attn_fwd`'s own, or `attn_bwd`'s with
/// the same shape, mask, options and run settings).
pub fn as_kernel(kernel: &str, p: AttnProblem) -> Box<dyn KernelProblem> {
    match kernel {
        "attn_fwd" => Box::new(p),
        "attn_bwd" => Box::new(BwdProblem {
            run: p.run,
            ..BwdProblem::with(p.args)
        }),
        other => panic!("not an attention kernel: {other}"),
    }
}

/// Runs `attn_fwd` on `p` (case `c`'s problem as the caller configured it) on the interpreter and
/// asserts every output passes; the report is the caller's for its own checks.
pub fn check_fwd(c: &Case, p: &AttnProblem, program: &str) -> RunReport {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let r =
        runner::run(entry, p, &Interpreter).unwrap_or_else(|e| panic!("{}: {e}", what(c, program)));
    for o in &r.outputs {
        eprintln!("{}: {} {:?}", what(c, program), o.name, o.error);
    }
    assert!(r.passed, "{}: {:?}", what(c, program), r.failures());
    r
}

/// Runs the backward on `p` (`variant`: one of its CDNA key-block schedules) and asserts that it
/// returns dQ, dK, dV and that they pass.
pub fn check_bwd(c: &Case, p: AttnProblem, variant: Option<&'static str>) {
    let p = AttnProblem {
        run: RunSettings { variant, ..p.run },
        ..p
    };
    let p = as_kernel("attn_bwd", p);
    let entry = kittens_kernels::by_name("attn_bwd").unwrap();
    let program = format!("bwd {variant:?}");
    let r = runner::run(entry, p.as_ref(), &Interpreter)
        .unwrap_or_else(|e| panic!("{}: {e}", what(c, &program)));
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["dq", "dk", "dv"], "{}", what(c, &program));
    for o in &r.outputs {
        eprintln!("{}: {} {:?}", what(c, &program), o.name, o.error);
    }
    assert!(r.passed, "{}: {:?}", what(c, &program), r.failures());
}

/// Q, K, V of `sh` in bf16, scaled by `scale`, from `seed`.
pub fn draw_qkv(sh: &BwdShape, seed: u64, scale: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    let bf16 = kittens_hw::dtype::DType::Bf16;
    let mut draw = |n| kittens_kernels::problem::random_scaled(&mut rng, n, bf16, scale);
    (draw(sh.q_len()), draw(sh.kv_len()), draw(sh.kv_len()))
}

/// `||a - b|| / ||b||`.
pub fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}
