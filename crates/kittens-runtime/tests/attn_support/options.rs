//! FlashAttention's options (`kittens_kernels::attn::score`) as the lowering tests of every target take
//! them: each alone, then all together with a bottom-right causal mask (ALiBi among them: its
//! slopes are an input the run draws).
#![allow(dead_code)]

use kittens_kernels::attn::score::{AttnArgs, Logits, Window};

/// `(name, attention settings)` (each kernel's problem takes them, `AttnProblem::with`,
/// `BwdProblem::with`): a scale, a soft cap, a window whose edges cut 32- and 64-key blocks, and all.
pub fn options() -> Vec<(&'static str, AttnArgs)> {
    let base = AttnArgs::default();
    let logits = |scale, softcap| Logits { scale, softcap };
    vec![
        (
            "scale",
            AttnArgs {
                logits: logits(Some(0.3), None),
                ..base
            },
        ),
        (
            "softcap",
            AttnArgs {
                logits: logits(None, Some(30.0)),
                ..base
            },
        ),
        (
            "window",
            AttnArgs {
                window: Some(Window::new(64, 31).unwrap()),
                ..base
            },
        ),
        (
            "alibi",
            AttnArgs {
                alibi: true,
                ..base
            },
        ),
        (
            "all, causal",
            AttnArgs {
                causal: true,
                bottom_right: true,
                logits: logits(Some(0.1), Some(5.0)),
                window: Some(Window::new(40, -1).unwrap()),
                alibi: true,
                ..base
            },
        ),
    ]
}

/// Registry kernel `kernel`'s problem (`attn_fwd` or `attn_bwd`) with the attention settings `a` and
/// the run settings `run`.
pub fn problem(
    kernel: &str,
    a: AttnArgs,
    run: kittens_kernels::problem::RunSettings,
) -> Box<dyn kittens_kernels::problem::KernelProblem> {
    use kittens_kernels::attn_bwd::problem::BwdProblem;
    use kittens_kernels::attn_fwd::problem::AttnProblem;
    match kernel {
        "attn_fwd" => Box::new(AttnProblem {
            run,
            ..AttnProblem::with(a)
        }),
        "attn_bwd" => Box::new(BwdProblem {
            run,
            ..BwdProblem::with(a)
        }),
        other => panic!("not an attention kernel: {other}"),
    }
}
