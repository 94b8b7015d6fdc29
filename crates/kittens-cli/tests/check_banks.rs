//! `kittens check <kernel> --gpu <gpu> --banks [--json]`: every shared access of the hot loop with its
//! instruction, the solved swizzle and its worst conflict; refused without an AMD GPU.

mod common;

use common::kittens;

use serde_json::Value;

#[test]
fn banks_json_lists_every_hot_loop_access_conflict_free() {
    for (kernel, gpu, reads) in [
        ("gemm_bf16", "mi355x", "ds_read_b128"),
        ("gemm_bf16", "mi300x", "ds_write_b128"),
        ("attn_fwd", "mi355x", "ds_read_b64_tr_b16"),
        ("attn_fwd", "mi300x", "ds_read_u16"),
    ] {
        let out = kittens(&["check", kernel, "--gpu", gpu, "--banks", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        let rows = doc["banks"].as_array().expect("a banks array");
        assert!(rows.len() >= 2, "{kernel} {gpu}: {rows:?}");
        for r in rows {
            for key in ["access", "instr", "swizzle"] {
                assert!(r[key].is_string(), "{kernel} {gpu}: {key} in {r}");
            }
            assert_eq!(r["max_conflict"].as_u64(), Some(1), "{kernel} {gpu}: {r}");
        }
        assert!(
            rows.iter().any(|r| r["instr"] == reads),
            "{kernel} {gpu}: no {reads}"
        );
    }
}

#[test]
fn banks_text_and_refusals() {
    let out = kittens(&["check", "gemm_bf16", "--gpu", "mi355x", "--banks"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("ds_read_b128") && text.contains("1-way"),
        "{text}"
    );
    for args in [
        &["check", "gemm_bf16", "--banks"][..],
        &["check", "gemm_bf16", "--gpu", "h100", "--banks"][..],
    ] {
        let out = kittens(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("--banks"),
            "{args:?}: {err}"
        );
    }
}

/// The 4-wave interleave (`--schedule interleave4`): its eight sub-step reads per K step (four operand
/// tiles in each of two register sets) are all conflict-free under the swizzles solved for it; without
/// a GPU the variant is refused by clap (it needs `--gpu`).
#[test]
fn interleave_variant_banks_are_conflict_free() {
    let out = kittens(&[
        "check",
        "gemm_bf16",
        "--gpu",
        "mi355x",
        "--schedule",
        "interleave4",
        "--banks",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = doc["banks"].as_array().expect("a banks array");
    assert_eq!(rows.len(), 8, "{rows:?}");
    for r in rows {
        assert_eq!(r["instr"], "ds_read_b128", "{r}");
        assert_eq!(r["max_conflict"].as_u64(), Some(1), "{r}");
    }
    let out = kittens(&["check", "gemm_bf16", "--schedule", "interleave4", "--banks"]);
    assert!(!out.status.success());
}

/// The backward's key-block schedules on both CDNA GPUs: every hot-loop access of the shared rings —
/// Q and dO read in row layout (`ds_read_b128`) and column layout (`ds_read_b64_tr_b16` on gfx950,
/// 16-bit reads on gfx942), O's chunks, the query blocks' K and V — is conflict-free under the
/// swizzles solved for it; `interleave4`'s 16×32 column reads give dO's ring another swizzle than the
/// plain program's 32×16 ones.
#[test]
fn backward_schedules_banks_are_conflict_free() {
    let banks = |gpu: &str, schedule: Option<&str>| -> Value {
        let mut args = vec!["check", "attn_bwd", "--gpu", gpu, "--banks", "--json"];
        if let Some(s) = schedule {
            args.extend(["--schedule", s]);
        }
        let out = kittens(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    };
    let chosen = |doc: &Value, buf: &str| -> String {
        let tiles = doc["tiles"].as_array().unwrap();
        let t = tiles.iter().find(|t| t["buffer"] == buf).unwrap();
        t["chosen"].as_str().unwrap().to_string()
    };
    for gpu in ["mi355x", "mi300x"] {
        for s in ["interleave4", "pingpong8"] {
            let doc = banks(gpu, Some(s));
            let rows = doc["banks"].as_array().expect("a banks array");
            assert!(rows.len() >= 15, "{gpu} {s}: {rows:?}");
            for r in rows {
                assert_eq!(r["max_conflict"].as_u64(), Some(1), "{gpu} {s}: {r}");
            }
        }
    }
    let (plain, i4) = (banks("mi355x", None), banks("mi355x", Some("interleave4")));
    assert_ne!(chosen(&plain, "dov_s"), chosen(&i4, "dov_s"));
}
