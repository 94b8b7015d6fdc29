//! `kittens run` as a user runs it: sizes over the CPU run's budget are refused with a message naming
//! the limit and exit status 1 before anything is allocated (the child runs under a 2 GiB address-space
//! limit, so an attempted allocation of the refused size would abort it instead); a run whose error
//! exceeds its tolerance exits non-zero; attention at large logits passes the test rule.

use serde_json::Value;
use std::process::{Command, Output};

/// Runs `kittens run ARGS` under `ulimit -v` (2 GiB of address space).
fn kittens_run(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2097152 && exec "$0" run "$@""#)
        .arg(env!("CARGO_BIN_EXE_kittens"))
        .args(args)
        .output()
        .expect("sh runs kittens")
}

fn refused(args: &[&str], limit: &str) {
    let out = kittens_run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "kittens run {args:?}: status {:?}\n{err}",
        out.status
    );
    assert!(
        err.contains("error:") && err.contains(limit) && !err.contains("panicked"),
        "kittens run {args:?}: message should name `{limit}`:\n{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "kittens run {args:?} printed a report"
    );
}

const HOST: &str = "limit of 4294967296 bytes (4.0 GiB) of host tensors";
const TILE: &str = "limit of 16384 elements per tile side";

#[test]
fn gemm_sizes_over_the_budget_are_refused() {
    refused(
        &[
            "gemm_bf16",
            "--m",
            "100000",
            "--n",
            "100000",
            "--k",
            "100000",
        ],
        HOST,
    );
    refused(
        &["gemm_bf16", "--m", "18446744073709551615"],
        "more than 2^64 bytes",
    );
    refused(&["gemm_bf16", "--m", "4294967296"], HOST);
    refused(&["gemm_bf16", "--k-step", "100000"], TILE);
    refused(&["gemm_bf16", "--block", "1000064"], TILE);
    refused(
        &["gemm_bf16", "--m", "8192", "--n", "8192", "--k", "8192"],
        "limit of 17179869184 multiply-adds",
    );
}

#[test]
fn attention_sizes_over_the_budget_are_refused() {
    refused(&["attn_fwd", "--kv-block", "100000"], TILE);
    refused(&["attn_fwd", "--q-rows", "100000"], TILE);
    refused(&["attn_fwd", "--dim", "4294967360"], TILE);
    refused(
        &["attn_fwd", "--seq", "18446744073709551615"],
        "more than 2^64 bytes",
    );
    refused(&["attn_fwd", "--seq", "4294967296"], HOST);
    refused(&["attn_fwd", "--batch", "100000", "--seq", "100000"], HOST);
    refused(
        &["attn_fwd", "--seq", "65536"],
        "limit of 17179869184 multiply-adds",
    );
    // A 4096x1024 bf16 K tile (8 MiB) is refused by the tile layer's own budget before the CPU run's
    // per-block budget (64 MiB of interpreter state) is reached.
    refused(
        &["attn_fwd", "--kv-block", "4096", "--dim", "1024"],
        "tile layer's budget of 1048576 bytes",
    );
    refused(&["attn_fwd", "--input-scale", "1e9"], "[2^-16, 2^16]");
}

/// An error over the tolerance: exit status 1, and the JSON report (still printed) says `passed:
/// false` with the tolerance that was applied.
#[test]
fn out_of_tolerance_run_exits_non_zero() {
    let out = kittens_run(&[
        "gemm_bf16",
        "--m",
        "64",
        "--n",
        "64",
        "--k",
        "64",
        "--block",
        "128",
        "--k-step",
        "32",
        "--tolerance",
        "1e-9",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("failed its error check"), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["passed"], false);
    assert_eq!(doc["tolerance"], 1e-9);
    assert!(doc["rel_err"].as_f64().unwrap() > 1e-9);
}

/// Attention with inputs scaled by 8 (logits past ±64 at head dim 64): passes the test rule, and the
/// JSON carries the baseline's error and the rule's bound, 2 × baseline + floor.
#[test]
fn attention_at_large_logits_passes_the_rule() {
    let out = kittens_run(&[
        "attn_fwd",
        "--seq",
        "100",
        "--causal",
        "--input-scale",
        "8",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["passed"], true);
    assert!(doc["max_abs_logit"].as_f64().unwrap() >= 64.0, "{doc}");
    let base = doc["baseline"]["rel_err"].as_f64().expect("baseline error");
    let tol = doc["tolerance"].as_f64().unwrap();
    assert!((tol - (2.0 * base + 1.0 / 4096.0)).abs() < 1e-12, "{doc}");
    let rel = doc["rel_err"].as_f64().unwrap();
    assert!(rel > 0.0 && rel <= tol, "{doc}");
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert!(checks
        .iter()
        .all(|c| c["passed"] == true && c["baseline"].is_number()));
}

/// `kittens run gemm_fp8` on the interpreter: fp8 operands with gemm_fp8's own K step (128, one OCP
/// MFMA's K) unless `--k-step` says otherwise, passing against f64 at a ragged shape.
#[test]
fn gemm_fp8_runs_with_its_own_k_step() {
    for (extra, k_step) in [(&[][..], 128), (&["--k-step", "256"][..], 256)] {
        let mut args = vec!["gemm_fp8", "--m", "72", "--n", "40", "--k", "150", "--json"];
        args.extend_from_slice(extra);
        let out = kittens_run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["shape"]["k_step"], k_step, "{v}");
        assert_eq!(v["shape"]["input"], "fp8e4m3", "{v}");
        assert_eq!(v["passed"], true, "{v}");
    }
}

/// An explicit K step that is not whole fp8 base tiles is refused, naming the limit.
#[test]
fn gemm_fp8_k_step_must_hold_whole_base_tiles() {
    refused(&["gemm_fp8", "--k-step", "64"], "multiple of 128");
}

/// `kittens run attn_fwd --variant seed001`: MI300X-attn's configuration on the interpreter (its V
/// drawn transposed, as the kernel reads it) passes the rule at logits past ±64; an unknown variant
/// is refused naming the kernel's variants, and so is `--variant` with `--schedule`.
#[test]
fn attention_variant_seed001_runs_and_unknown_variants_are_refused() {
    let out = kittens_run(&[
        "attn_fwd",
        "--variant",
        "seed001",
        "--seq",
        "77",
        "--dim",
        "128",
        "--causal",
        "--input-scale",
        "11",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["passed"], true, "{doc}");
    assert_eq!(doc["kernel"], "attn_fwd_mi300x_causal");
    assert_eq!(doc["shape"]["v_layout"], "bhds");
    assert_eq!(doc["shape"]["q_rows"], 48);
    assert!(doc["max_abs_logit"].as_f64().unwrap() >= 64.0, "{doc}");
    refused(&["attn_fwd", "--variant", "nope"], "seed001");
    refused(
        &[
            "gemm_bf16",
            "--variant",
            "interleave4",
            "--schedule",
            "interleave",
        ],
        "give one",
    );
}

/// `--kv-splits`: decoding (one query against 3001 keys) split in 4 on the interpreter passes the rule,
/// and the report names the split and the merge launch; `auto` reports the planner's count and
/// reason; a count out of range and the flag on another kernel are refused with a message.
#[test]
fn attention_key_split_reports_its_parts() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "attn_fwd",
            "--seq",
            "1",
            "--seq-kv",
            "3001",
            "--input-scale",
            "8",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = kittens_run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        serde_json::from_slice::<Value>(&out.stdout).expect("one JSON document")
    };
    let v = run(&["--kv-splits", "4"]);
    assert_eq!(v["shape"]["kv_splits"], 4);
    assert_eq!(v["then"], serde_json::json!(["attn_fwd_merge4"]));
    assert_eq!(v["kernel"], "attn_fwd_split4");
    assert_eq!(v["passed"], true);
    // B1 H4 against 3001 keys: 4 blocks of 94 key blocks on MI300X's 304 CUs (the CPU runs the
    // ping-pong, so it plans for gfx942's GPU).
    let v = run(&["--kv-splits", "auto", "--lse"]);
    let g = v["shape"]["kv_splits"].as_u64().unwrap();
    assert!(g > 1, "{v}");
    assert!(
        v["shape"]["kv_split_reason"]
            .as_str()
            .unwrap()
            .contains("split"),
        "{v}"
    );
    assert_eq!(v["passed"], true);
    for (args, needle) in [
        (&["attn_fwd", "--kv-splits", "17"][..], "from 1 to 16"),
        (&["attn_fwd", "--kv-splits", "0"][..], "from 1 to 16"),
        (
            &["gemm_bf16", "--kv-splits", "2"][..],
            "--kv-splits does not apply to gemm_bf16",
        ),
    ] {
        let out = kittens_run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
