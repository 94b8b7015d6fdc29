//! `kittens run --backend isa-emu`: the code object clang builds for an AMD target, run by the ISA
//! emulator, with the report of `--backend cpu` plus what the emulator observed (`dynamic`);
//! `--backend hip` launches the same code object through ROCm, and says so where there is none.

mod common;

use common::kittens;

use serde_json::Value;

#[test]
fn isa_emu_report_is_the_cpu_report_plus_dynamic_counts() {
    let out = kittens(&[
        "run",
        "gemm_bf16",
        "--backend",
        "isa-emu",
        "--target",
        "gfx942",
        "--m",
        "40",
        "--n",
        "56",
        "--k",
        "36",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(
        (&doc["backend"], &doc["target"]),
        (&"isa-emu".into(), &"gfx942".into())
    );
    assert_eq!(doc["passed"], true, "{doc}");
    let e = doc["rel_err"].as_f64().unwrap();
    assert!(e > 0.0 && e < 5e-3, "rel_err {e}");
    let stats = &doc["dynamic"]["stats"];
    // gfx942's GEMM: 16x16x16 MFMAs, 8 waves per block, one block.
    assert!(stats["instructions"]["mfma"].as_u64().unwrap() >= 8 * 4 * 4);
    assert!(stats["waits"].as_u64().unwrap() > 0);
    assert!(!stats["ds"].as_object().unwrap().is_empty());
    let cpu = kittens(&[
        "run",
        "gemm_bf16",
        "--m",
        "40",
        "--n",
        "56",
        "--k",
        "36",
        "--json",
    ]);
    let cpu: Value = serde_json::from_slice(&cpu.stdout).expect("one JSON document");
    for key in cpu.as_object().unwrap().keys() {
        assert!(doc.get(key).is_some(), "isa-emu report lacks `{key}`");
    }
}

#[test]
fn code_object_backends_need_an_amd_target_and_hip_needs_rocm() {
    for (args, needle) in [
        (
            &["run", "gemm_bf16", "--backend", "isa-emu"][..],
            "--target",
        ),
        (
            &[
                "run",
                "gemm_bf16",
                "--backend",
                "isa-emu",
                "--target",
                "sm_90a",
            ][..],
            "gfx942 or gfx950",
        ),
        (&["run", "gemm_bf16", "--backend", "hip"][..], "--target"),
        (
            &["run", "gemm_bf16", "--isa-seed", "3"][..],
            "needs --backend isa-emu",
        ),
    ] {
        let out = kittens(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Without ROCm the hip backend must say so (with ROCm, kittens-runtime's amd_isa_emu test
    // launches the code object and judges it).
    if kittens_runtime::amd::hip::HipRuntime::load().is_err() {
        let out = kittens(&["run", "gemm_bf16", "--backend", "hip", "--target", "gfx950"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no ROCm runtime found (libamdhip64.so)") || err.contains("no AMD GPU"),
            "{err}"
        );
    }
}

/// Sizes over the emulator's work limit are refused before anything is compiled.
#[test]
fn isa_emu_refuses_work_over_its_limit() {
    let out = kittens(&[
        "run",
        "gemm_bf16",
        "--backend",
        "isa-emu",
        "--target",
        "gfx950",
        "--m",
        "4096",
        "--n",
        "4096",
        "--k",
        "1024",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ISA emulation work"), "{err}");
}

/// `kittens bench gemm_bf16 --target gfx950`: on an AMD GPU, the code object against hipBLASLt (or
/// rocBLAS) in the same run; on a machine without ROCm (this project's, and CI's) the command says
/// "no ROCm runtime found (libamdhip64.so)" and checks the same code object on the ISA emulator.
#[test]
fn amd_bench_compares_with_the_vendor_gemm_or_says_there_is_no_rocm() {
    use kittens_runtime::amd::hip::{HipError, HipRuntime};
    match HipRuntime::load() {
        Err(HipError::NoRocm { .. }) | Err(HipError::NoDevice) => {
            let out = kittens(&["bench", "gemm_bf16", "--target", "gfx950", "--json"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
            assert_eq!(doc["status"], "no_rocm", "{doc}");
            let reason = doc["reason"].as_str().unwrap();
            assert!(
                reason.contains("no ROCm runtime found (libamdhip64.so)")
                    || reason.contains("no AMD GPU"),
                "{reason}"
            );
            assert_eq!(doc["fallback"]["backend"], "isa-emu");
            assert_eq!(doc["fallback"]["passed"], true, "{doc}");
            let text = kittens(&["bench", "gemm_bf16", "--target", "gfx942"]);
            let stdout = String::from_utf8_lossy(&text.stdout);
            assert!(text.status.success(), "{stdout}");
            assert!(
                stdout.contains("no ROCm runtime found (libamdhip64.so)")
                    || stdout.contains("no AMD GPU"),
                "{stdout}"
            );
        }
        Err(e) => panic!("HIP runtime present but unusable: {e}"),
        Ok(_) => {
            let out = kittens(&[
                "bench",
                "gemm_bf16",
                "--target",
                "gfx950",
                "--shapes",
                "1000x1000x1000",
                "--iters",
                "3",
                "--json",
            ]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
            assert_eq!(doc["report"]["rows"][0]["passed"], true, "{doc}");
        }
    }
    // Kernels without an AMD benchmark are refused by name.
    let out = kittens(&["bench", "attn_fwd", "--target", "gfx950"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only gemm_bf16"));
}
