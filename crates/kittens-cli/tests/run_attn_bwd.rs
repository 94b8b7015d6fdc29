//! `kittens run attn_bwd` and `kittens check attn_bwd` as a user runs them: the JSON report carries each
//! gradient's error, the baseline's and `passed`; a bottom-right causal run with fewer keys than
//! queries passes the rule; `--bottom-right` without `--causal`, and `--seq-kv` for the forward, are
//! refused; the schedule analysis
//! finds no hazard in either kind of block.

mod common;

use common::kittens;

use serde_json::Value;

#[test]
fn json_reports_each_gradient() {
    let out = kittens(&[
        "run",
        "attn_bwd",
        "--backend",
        "cpu",
        "--heads",
        "4",
        "--heads-kv",
        "2",
        "--seq",
        "45",
        "--seq-kv",
        "29",
        "--dim",
        "64",
        "--causal",
        "--bottom-right",
        "--layout",
        "bhsd",
        "--input-scale",
        "8",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["kernel"], "attn_bwd_causal_br");
    assert_eq!(doc["passed"], true);
    assert_eq!(doc["shape"]["seq_kv"], 29);
    assert!(doc["max_abs_logit"].as_f64().unwrap() >= 64.0, "{doc}");
    let outs = doc["outputs"].as_array().expect("per-gradient reports");
    let names: Vec<&str> = outs.iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["dq", "dk", "dv"]);
    for o in outs {
        let (e, b) = (
            o["rel_err"].as_f64().unwrap(),
            o["baseline"]["rel_err"].as_f64().unwrap(),
        );
        assert!(e > 0.0 && b > 0.0 && o["passed"] == true, "{o}");
    }
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 6);
    assert!(checks
        .iter()
        .all(|c| c["output"].is_string() && c["passed"] == true));
}

#[test]
fn bottom_right_needs_causal() {
    let out = kittens(&["run", "attn_bwd", "--bottom-right", "--seq", "8"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses the flag");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--causal"), "{err}");
}

#[test]
fn key_length_is_refused_outside_attention() {
    let out = kittens(&["run", "gemm_bf16", "--seq", "40", "--seq-kv", "30"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--seq, --seq-kv do not apply to gemm_bf16"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn check_finds_no_hazard() {
    let out = kittens(&["check", "attn_bwd"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("no hazards") && text.contains("2 distinct schedule(s)"),
        "{text}"
    );
}

/// `--schedule interleave4|pingpong8` runs the backward's AMD schedules (the interpreter runs them as
/// any tile program): the report names the schedule and passes; the Hopper schedule is refused on
/// the AMD emulation.
#[test]
fn schedules_run_from_the_cli() {
    for (flag, name) in [
        ("interleave4", "4-wave interleave"),
        ("pingpong8", "8-wave ping-pong"),
    ] {
        let out = kittens(&[
            "run",
            "attn_bwd",
            "--backend",
            "cpu",
            "--schedule",
            flag,
            "--seq",
            "45",
            "--seq-kv",
            "29",
            "--dim",
            "64",
            "--causal",
            "--json",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(doc["shape"]["schedule"], name, "{doc}");
        assert_eq!(doc["passed"], true);
    }
    let out = kittens(&[
        "run",
        "attn_bwd",
        "--backend",
        "hip-emu",
        "--target",
        "gfx950",
        "--schedule",
        "ws",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Hopper"), "{err}");
}
