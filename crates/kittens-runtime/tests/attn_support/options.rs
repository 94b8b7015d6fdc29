//! FlashAttention's options (`kittens_kernels::attn_score`) as the lowering tests of every target take
//! them: each alone, then all together with a bottom-right causal mask.
#![allow(dead_code)]

use kittens_kernels::attn_score::{Logits, Window};
use kittens_kernels::problem::Problem;

/// `(name, problem)`: a scale, a soft cap, a window whose edges cut 32- and 64-key blocks, and all.
pub fn options() -> Vec<(&'static str, Problem)> {
    let base = Problem::default();
    let logits = |scale, softcap| Logits { scale, softcap };
    vec![
        (
            "scale",
            Problem {
                logits: logits(Some(0.3), None),
                ..base
            },
        ),
        (
            "softcap",
            Problem {
                logits: logits(None, Some(30.0)),
                ..base
            },
        ),
        (
            "window",
            Problem {
                window: Some(Window::new(64, 31).unwrap()),
                ..base
            },
        ),
        (
            "all, causal",
            Problem {
                causal: true,
                bottom_right: true,
                logits: logits(Some(0.1), Some(5.0)),
                window: Some(Window::new(40, -1).unwrap()),
                ..base
            },
        ),
    ]
}
