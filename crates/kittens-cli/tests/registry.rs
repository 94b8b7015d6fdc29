//! The commands that take a kernel name take exactly the registry's names, and say from the registry
//! what exists and what does not lower yet.

mod common;

use common::kittens;

#[test]
fn list_json_names_the_kernels_and_their_targets() {
    let out = kittens(&["list", "--json"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let names: Vec<&str> = doc["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|k| k["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, kittens_kernels::registry::names());
    let attn = doc["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "attn_fwd")
        .expect("attn_fwd is listed");
    assert_eq!(
        attn["lowers_to"],
        serde_json::json!(["gfx942", "gfx950", "sm_90a"])
    );
}

/// An unknown kernel is refused by every command that takes one, with the registry's names listed.
#[test]
fn unknown_kernels_are_refused_with_the_registry_names() {
    for cmd in [
        vec!["run", "gemm_fp4"],
        vec!["check", "gemm_fp4"],
        vec!["compile", "gemm_fp4", "--target", "gfx950"],
        vec!["bench", "gemm_fp4"],
    ] {
        let out = kittens(&cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}");
        for n in kittens_kernels::registry::names() {
            assert!(err.contains(n), "{cmd:?}: {err}");
        }
    }
}

/// attn_fwd lowers to sm_90a (the producer/consumer program: TMA, register-A wgmma); an unknown target
/// is refused with the registry's targets, before any compiler.
#[test]
fn attention_lowers_to_sm_90a() {
    let out = kittens(&[
        "compile", "attn_fwd", "--target", "sm_90a", "--emit", "cuda",
    ]);
    let src = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in ["attn_fwd_sm90_lowered", "kt::tma_load_4d(", "_bf16_rs_tb"] {
        assert!(src.contains(needle), "the CUDA source lacks {needle}");
    }
    let out = kittens(&["compile", "gemm_bf16", "--target", "sm_80"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("gfx942 (HIP)") && err.contains("sm_90a (CUDA)"),
        "{err}"
    );
}
