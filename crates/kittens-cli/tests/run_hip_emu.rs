//! `kittens run --backend hip-emu`: the lowered HIP for an AMD target, run on this CPU through the
//! emulation header, with the same report as `--backend cpu`. The GEMM shape has K = 68, not a multiple
//! of the 8-element chunk a lane loads: before element-granular ragged edges it reported rel_err 0.25.

use serde_json::Value;
use std::process::Command;

fn kittens(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kittens"))
        .args(args)
        .output()
        .expect("kittens runs")
}

#[test]
fn hip_emu_gemm_ragged_k_passes_on_gfx950() {
    let out = kittens(&[
        "run",
        "gemm_bf16",
        "--backend",
        "hip-emu",
        "--target",
        "gfx950",
        "--m",
        "64",
        "--n",
        "64",
        "--k",
        "68",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["passed"], Value::Bool(true), "{doc}");
    assert_eq!(doc["backend"], "hip-emu");
    assert_eq!(doc["target"], "gfx950");
    let e = doc["rel_err"].as_f64().expect("rel_err");
    // bf16 output of an fp32 accumulation: about 2^-9 relative, never exact on random inputs.
    assert!(e > 0.0 && e < 5e-3, "rel_err {e}");
    assert_eq!(doc["shape"]["k"], 68);
}

#[test]
fn hip_emu_needs_an_amd_target() {
    for (args, needle) in [
        (
            &["run", "gemm_bf16", "--backend", "hip-emu"][..],
            "--target",
        ),
        (
            &[
                "run",
                "gemm_bf16",
                "--backend",
                "hip-emu",
                "--target",
                "sm_90a",
            ][..],
            "gfx942 or gfx950",
        ),
    ] {
        let out = kittens(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
