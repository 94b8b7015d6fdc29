//! The row-wise kernels on inputs in any row stride (issue 33: "any strides a model passes"): each
//! `[rows, D]` input read in place at a row stride past `D` (the slice `x[:, :D]` of a wider tensor),
//! on the CPU interpreter against the f64 reference of the gathered rows, at odd sizes (37 rows of
//! 1000, not whole strips); and the clear error of a stride the kernels cannot take.

use kittens_kernels::problem::{ArgValue, NamedArgs};

mod common;
use common::{check_with, plan_error, problem};

/// Row strides past `D = 1000`: a wider tensor's (1024) and an odd multiple of 8 (1096).
const STRIDES: [usize; 2] = [1024, 1096];

fn strided(rows: usize, dim: usize, tensors: &[(&str, usize)]) -> NamedArgs {
    tensors.iter().fold(problem(rows, dim), |a, &(t, s)| {
        a.with(&format!("{t}_row_stride"), s)
    })
}

#[test]
fn rmsnorm_reads_rows_in_place() {
    for s in STRIDES {
        for residual in [true, false] {
            // x strided alone, and x and residual in different strides.
            let both = strided(37, 1000, &[("x", s), ("residual", 1000 + 8 * 3)]);
            let x_only = strided(37, 1000, &[("x", s)]);
            for args in [both, x_only] {
                check_with("rmsnorm", &args.with("residual", residual), None);
            }
        }
    }
}

#[test]
fn rmsnorm_backward_reads_rows_in_place() {
    for s in STRIDES {
        for residual in [true, false] {
            let args = strided(
                37,
                1000,
                &[("dy", s), ("r", 1000 + 8 * 5), ("dresidual_out", s)],
            );
            check_with("rmsnorm_bwd", &args.with("residual", residual), None);
        }
    }
}

#[test]
fn layernorm_reads_rows_in_place() {
    for s in STRIDES {
        // Without dropout and with the default 10%: the mask's stream index is the logical
        // `row·D + col`, whatever the stride.
        for p in [0.0f32, 0.1] {
            let args = strided(37, 1000, &[("x", s), ("residual", 1000 + 8 * 3)]);
            check_with("layernorm", &args.with("p", p), None);
        }
    }
}

#[test]
fn layernorm_backward_reads_rows_in_place() {
    for s in STRIDES {
        for p in [0.0f32, 0.1] {
            let args = strided(
                37,
                1000,
                &[("dy", s), ("dh", 1000 + 8), ("x", 2000), ("residual", s)],
            );
            check_with("layernorm_bwd", &args.with("p", p), None);
        }
    }
}

#[test]
fn a_row_stride_the_kernels_cannot_take_is_a_clear_error() {
    let cases = [
        ("rmsnorm", "x"),
        ("rmsnorm_bwd", "dy"),
        ("layernorm", "residual"),
        ("layernorm_bwd", "dh"),
        ("swiglu", "gate"),
        ("swiglu_bwd", "dy"),
    ];
    for (name, t) in cases {
        for bad in [996, 1020] {
            let e = plan_error(name, &strided(37, 1000, &[(t, bad)]));
            assert!(
                e.contains(&format!("{t}_row_stride = {bad}"))
                    && e.contains("multiple of 8")
                    && e.contains("D = 1000"),
                "{name}: {e}"
            );
        }
    }
}

#[test]
fn swiglu_reads_rows_in_place() {
    for (name, dy) in [("swiglu", None), ("swiglu_bwd", Some(("dy", 2000)))] {
        // Split gate and up (one a slice of a wider tensor), and the packed halves of a [rows, 2F]
        // slice of a wider fused projection; the backward's dy at its own stride.
        let split = [("gate", 1024), ("up", 1096)];
        let packed = [("x", 2048)];
        for (ts, is_packed) in [(&split[..], false), (&packed[..], true)] {
            let ts: Vec<(&str, usize)> = ts.iter().copied().chain(dy).collect();
            check_with(
                name,
                &strided(37, 1000, &ts).with("packed", is_packed),
                None,
            );
        }
    }
}

/// `rotary` (and `rotary_bwd`) with the input in its own `[b, h, s]` strides: a q transposed from
/// `[b, h, s, d]` memory beside a BSHD output, q sliced out of a fused QKV projection (row stride
/// `3·H·D`), rows padded past the head dimension; head dimensions 64 (heads along a wave's rows) and
/// 96 (positions along them); both forms.
#[test]
fn rotary_reads_its_input_in_place() {
    let (b, h, n) = (2usize, 3usize, 37usize);
    for (d, layout, strides) in [
        (64, "bshd", [h * n * 64, n * 64, 64]),
        (64, "bshd", [n * 3 * h * 64, 64, 3 * h * 64]),
        (96, "bhsd", [h * n * 128, n * 128, 128]),
        (96, "bshd", [n * 3 * h * 96, 96, 3 * h * 96]),
    ] {
        for (name, input) in [("rotary", "x"), ("rotary_bwd", "dy")] {
            for interleaved in [false, true] {
                let st = strides.iter().map(|&s| s as i64).collect();
                let args = NamedArgs::new()
                    .with("batch", b)
                    .with("heads", h)
                    .with("seq", n)
                    .with("dim", d)
                    .with("layout", layout)
                    .with("interleaved", interleaved)
                    .with("seed", 7 + d as u64)
                    .with("input_scale", 4.0f32)
                    .with(&format!("{input}_strides"), ArgValue::Ints(st));
                check_with(name, &args, None);
            }
        }
    }
    let bad = NamedArgs::new()
        .with("dim", 64usize)
        .with("x_strides", ArgValue::Ints(vec![4096, 68, 204]));
    let e = plan_error("rotary", &bad);
    assert!(
        e.contains("x_strides = [4096, 68, 204]") && e.contains("multiple of 8"),
        "{e}"
    );
}
