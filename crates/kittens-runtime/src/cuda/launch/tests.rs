//! The launch checks against a registry kernel's declarations (no GPU needed: everything here is
//! refused or accepted before the driver).

use super::*;
use kittens_hw::Target;

fn gemm() -> Kernel {
    kittens_kernels::by_name("gemm_bf16")
        .unwrap()
        .build_variant(Target::Sm90a, None)
        .unwrap()
}

const M: u64 = 40;
const N: u64 = 24;
const K: u64 = 64;

fn params() -> Vec<(&'static str, i64)> {
    vec![("m", M as i64), ("n", N as i64), ("k", K as i64)]
}

/// Row-major tensors a (m×k), b (n×k), c (m×n) at aligned addresses.
fn dense<'a>(shapes: &'a [[u64; 2]; 3], strides: &'a [[u64; 2]; 3]) -> Vec<TensorArg<'a>> {
    ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, name)| TensorArg {
            name,
            ptr: 0x10000 * (i as u64 + 1),
            shape: &shapes[i],
            strides: &strides[i],
            dtype: DType::Bf16,
        })
        .collect()
}

const SHAPES: [[u64; 2]; 3] = [[M, K], [N, K], [M, N]];
const STRIDES: [[u64; 2]; 3] = [[K, 1], [K, 1], [N, 1]];

#[test]
fn the_declared_layout_is_accepted_with_its_spans() {
    let k = gemm();
    let names: Vec<&str> = k.globals.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let placed = check_args(&k, &params(), &dense(&SHAPES, &STRIDES)).unwrap();
    // Span of a dense m×k bf16 matrix: m·k·2 bytes.
    assert_eq!(placed.spans[0], (0x10000, M * K * 2));
    assert_eq!(placed.spans[1], (0x20000, N * K * 2));
    assert_eq!(placed.spans[2], (0x30000, M * N * 2));
}

#[test]
fn every_refusal_names_the_argument_and_the_limit() {
    let k = gemm();
    let err = |p: &[(&str, i64)], t: &[TensorArg]| check_args(&k, p, t).unwrap_err().to_string();

    // A wrong shape: the message has what was given and what the kernel takes.
    let mut shapes = SHAPES;
    shapes[1] = [N, K + 1];
    let e = err(&params(), &dense(&shapes, &STRIDES));
    assert!(
        e.contains("tensor `b`") && e.contains("[24, 65]") && e.contains("[24, 64]"),
        "{e}"
    );

    // A transposed view where the kernel reads rows.
    let mut strides = STRIDES;
    strides[0] = [1, M];
    let e = err(&params(), &dense(&SHAPES, &strides));
    assert!(
        e.contains("tensor `a`") && e.contains("strides [1, 40]") && e.contains("[64, 1]"),
        "{e}"
    );

    // The wrong dtype.
    let mut t = dense(&SHAPES, &STRIDES);
    t[2].dtype = DType::F32;
    let e = err(&params(), &t);
    assert!(
        e.contains("tensor `c`") && e.contains("F32") && e.contains("Bf16"),
        "{e}"
    );

    // A misaligned base.
    let mut t = dense(&SHAPES, &STRIDES);
    t[0].ptr += 2;
    let e = err(&params(), &t);
    assert!(
        e.contains("tensor `a`") && e.contains("16-byte aligned"),
        "{e}"
    );

    // Missing, unknown and repeated tensors.
    let t = dense(&SHAPES, &STRIDES);
    let e = err(&params(), &t[..2]);
    assert!(e.contains("tensor `c`: missing"), "{e}");
    let mut t = dense(&SHAPES, &STRIDES);
    t[1].name = "w";
    let e = err(&params(), &t);
    assert!(
        e.contains("tensor `w`") && e.contains("no such tensor"),
        "{e}"
    );
    let mut t = dense(&SHAPES, &STRIDES);
    t[1].name = "a";
    assert!(err(&params(), &t).contains("given twice"));

    // Parameters: missing, unknown, past 32 bits.
    let e = err(&params()[..2], &dense(&SHAPES, &STRIDES));
    assert!(e.contains("parameter `k`: missing"), "{e}");
    let mut p = params();
    p.push(("heads", 2));
    let e = err(&p, &dense(&SHAPES, &STRIDES));
    assert!(
        e.contains("parameter `heads`") && e.contains("no such parameter"),
        "{e}"
    );
    let mut p = params();
    p[0].1 = 1 << 32;
    let e = err(&p, &dense(&SHAPES, &STRIDES));
    assert!(e.contains("parameter `m`") && e.contains("32-bit"), "{e}");
    let mut p = params();
    p[0].1 = -3;
    let e = err(&p, &dense(&SHAPES, &STRIDES));
    assert!(
        e.contains("tensor `a`") && e.contains("negative or overflows"),
        "{e}"
    );
}

/// A layout whose span passes 2^63 bytes is refused, not wrapped: the largest parameters the
/// kernel takes give at most (2^31)² elements, so the check is reached through a hostile stride.
#[test]
fn spans_past_the_offsets_are_refused() {
    let k = gemm();
    let big = [u64::MAX / 4, 1];
    let strides = [big, STRIDES[1], STRIDES[2]];
    let e = check_args(&k, &params(), &dense(&SHAPES, &strides))
        .unwrap_err()
        .to_string();
    // The strides differ from the declaration first: refused either way, never wrapped.
    assert!(e.contains("tensor `a`"), "{e}");
}

/// Size-one dimensions may carry any stride (what frameworks give them), and an empty tensor has
/// no span and no alignment demand.
#[test]
fn unit_dimensions_ignore_their_stride() {
    let k = gemm();
    let p = [("m", 1i64), ("n", N as i64), ("k", K as i64)];
    let shapes = [[1, K], [N, K], [1, N]];
    let strides = [[12345, 1], [K, 1], [777, 1]];
    let placed = check_args(&k, &p, &dense(&shapes, &strides)).unwrap();
    assert_eq!(placed.spans[0].1, K * 2);
}
