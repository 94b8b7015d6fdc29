//! `kittens ladder gemm_fp8`: every FP8-tutorial step with a configuration is built, compiled without
//! spills, carries the target's fp8 MFMA in its hot loop and passes the host emulation against f64;
//! every step without one says why; no speed is claimed.

mod common;

use common::kittens;

use serde_json::Value;

fn ladder(target: &str) -> Value {
    let out = kittens(&["ladder", "gemm_fp8", "--target", target, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn every_configured_step_builds_and_emulates_right() {
    for target in ["gfx950", "gfx942"] {
        let doc = ladder(target);
        assert!(doc["measured_speed"].as_str().unwrap().starts_with("none"));
        let steps = doc["steps"].as_array().expect("steps");
        // The tutorial's kernels, sections 4 to 14, in order.
        let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (4..=14).collect::<Vec<u64>>());
        let mut built = 0;
        for s in steps {
            let why = s["note"].as_str().unwrap();
            match (&s["built"], &s["same_as"]) {
                (Value::Object(b), _) => {
                    built += 1;
                    assert_eq!(b["vgpr_spill"], 0, "{target} {s}");
                    assert_eq!(b["sgpr_spill"], 0, "{target} {s}");
                    assert_eq!(b["emulated_passed"], true, "{target} {s}");
                    let e = b["emulated_rel_err"].as_f64().unwrap();
                    // bf16 output rounding: nonzero, far below the 1e-2 bound.
                    assert!(e > 1e-4 && e < 5e-3, "{target} {s}");
                    assert!(b["hot_loop"]["mfma"].as_u64().unwrap() > 0, "{target} {s}");
                }
                (Value::Null, Value::Number(n)) => {
                    assert!(n.as_u64().unwrap() < s["step"].as_u64().unwrap())
                }
                _ => assert!(why.starts_with("not built"), "{target} {s}"),
            }
        }
        assert!(built >= 3, "{target}: {built} configurations built");
        // The tutorial's last step is the registry's own configuration.
        assert!(steps.last().unwrap()["note"]
            .as_str()
            .unwrap()
            .contains("registry"));
    }
}

#[test]
fn only_gemm_fp8_has_a_ladder_and_targets_are_amd() {
    let out = kittens(&["ladder", "gemm_bf16"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no ladder"));
    let out = kittens(&["ladder", "gemm_fp8", "--target", "sm_90a"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gfx950 or gfx942"));
}
