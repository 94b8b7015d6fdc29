//! `kittens run --backend hip-emu`: the lowered HIP for an AMD target, run on this CPU through the
//! emulation header, with the same report as `--backend cpu` (one runner: same inputs, references,
//! verdicts, budget). The GEMM shape has K = 68, not a multiple
//! of the 8-element chunk a lane loads: before element-granular ragged edges it reported rel_err 0.25.

mod common;

use common::kittens;

use serde_json::Value;

/// `kittens run <kernel> --backend hip-emu --target gfx950` and then `rest`.
const GFX950: [&str; 5] = ["run", "--backend", "hip-emu", "--target", "gfx950"];

fn emu_args<'a>(kernel: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = GFX950.to_vec();
    args.insert(1, kernel);
    args.extend_from_slice(rest);
    args
}

#[test]
fn hip_emu_gemm_ragged_k_passes_on_gfx950() {
    let doc = json(&emu_args(
        "gemm_bf16",
        &["--m", "64", "--n", "64", "--k", "68", "--json"],
    ));
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

fn json(args: &[&str]) -> Value {
    let out = kittens(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// Attention at logits past ±64 on both backends: the same JSON keys, both judged by the test rule on
/// the same inputs (so the same baseline error and the same largest logit), both passing.
#[test]
fn hip_emu_and_cpu_give_the_same_report() {
    let run = |backend: &[&str]| {
        let mut args = vec!["run", "attn_fwd", "--seq", "77", "--input-scale", "8"];
        args.extend_from_slice(backend);
        args.push("--json");
        json(&args)
    };
    let emu = run(&["--backend", "hip-emu", "--target", "gfx942"]);
    let cpu = run(&["--backend", "cpu"]);
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&emu), keys(&cpu));
    assert_eq!(
        (&emu["backend"], &emu["target"]),
        (&"hip-emu".into(), &"gfx942".into())
    );
    assert_eq!(
        (&cpu["backend"], &cpu["target"]),
        (&"cpu".into(), &"cpu".into())
    );
    for doc in [&emu, &cpu] {
        assert_eq!(doc["passed"], true, "{doc}");
        assert!(doc["max_abs_logit"].as_f64().unwrap() >= 64.0, "{doc}");
        let checks = doc["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 2, "{doc}");
        assert!(checks.iter().all(|c| c["baseline"].is_number()), "{doc}");
    }
    assert_eq!(emu["baseline"], cpu["baseline"]);
    assert_eq!(emu["max_abs_logit"], cpu["max_abs_logit"]);
}

/// `--tolerance` applies on hip-emu as on cpu: a bound below the error fails with exit status 1, and
/// a size over the host budget is refused before anything is built.
#[test]
fn hip_emu_honours_tolerance_and_budget() {
    let tight: Vec<&str> = "--m 40 --n 40 --k 40 --tolerance 1e-9 --json"
        .split(' ')
        .collect();
    let out = kittens(&emu_args("gemm_bf16", &tight));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("failed its error check"), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(
        (&doc["passed"], &doc["tolerance"]),
        (&false.into(), &1e-9.into())
    );
    let big = ["--m", "100000", "--n", "100000", "--k", "100000"];
    let out = kittens(&emu_args("gemm_bf16", &big));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("limit of 4294967296 bytes (4.0 GiB) of host tensors"),
        "{err}"
    );
}

/// `--schedule interleave4` on hip-emu runs the target's 4-wave interleave variant (the shape names the
/// schedule it ran), right at a ragged shape; `--schedule ws` (Hopper's) is refused on hip-emu.
#[test]
fn hip_emu_runs_the_interleave_variant() {
    let doc = json(&emu_args(
        "gemm_bf16",
        &[
            "--schedule",
            "interleave4",
            "--m",
            "77",
            "--n",
            "40",
            "--k",
            "131",
            "--json",
        ],
    ));
    assert_eq!(doc["passed"], Value::Bool(true), "{doc}");
    assert_eq!(doc["shape"]["schedule"], "4-wave interleave", "{doc}");
    let e = doc["rel_err"].as_f64().expect("rel_err");
    assert!(e > 0.0 && e < 5e-3, "rel_err {e}");
    let out = kittens(&emu_args("gemm_bf16", &["--schedule", "ws"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Hopper"), "{err}");
}
