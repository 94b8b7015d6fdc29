//! `kittens check`: parameters that make an empty problem are an error (not "no hazards"), every
//! distinct block is analysed, and `--deny-hazards` fails on a removed barrier.

mod common;

use common::{kittens, text};

#[test]
fn empty_problems_are_an_error() {
    for (kernel, param) in [
        ("gemm_bf16", "m=0"),
        ("gemm_bf16", "k=-64"),
        ("attn_fwd", "seq=0"),
        ("attn_fwd", "batch=-1"),
    ] {
        let out = kittens(&["check", kernel, "-p", param]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success(), "{kernel} {param}: exit 0\n{stdout}");
        assert!(!stdout.contains("no hazards"), "{kernel} {param}: {stdout}");
        let name = param.split('=').next().unwrap();
        assert!(
            stderr.contains(&format!("`{name}`")) && stderr.contains("empty"),
            "{kernel} {param}: {stderr}"
        );
    }
}

#[test]
fn every_block_class_is_reported() {
    let out = kittens(&["check", "attn_fwd", "-p", "seq=300", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let classes = doc["classes"].as_array().expect("classes");
    assert!(!classes.is_empty());
    let covered: u64 = classes.iter().map(|c| c["blocks"].as_u64().unwrap()).sum();
    assert_eq!(Some(covered), doc["blocks"].as_u64());
    assert_eq!(doc["exhaustive"], serde_json::Value::Bool(true));
}

#[test]
fn a_removed_barrier_fails_with_deny_hazards() {
    let ops = text(&kittens(&["check", "gemm_bf16", "--ops"]).stdout);
    // The first barrier written in the program (implied ones are marked `*`).
    let line = ops
        .lines()
        .find(|l| l.contains("barrier(Block)") && !l.contains('*'))
        .expect("a written barrier");
    let index = line.trim().trim_start_matches('#');
    let index = index.split_whitespace().next().unwrap();
    let out = kittens(&["check", "gemm_bf16", "--drop-op", index, "--deny-hazards"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("hazard(s)"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("hazard(s) in gemm_bf16"));
}
