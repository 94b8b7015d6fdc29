//! `--kernel-file`: a kernel written as JSON gets the registry kernels' reports from `check`,
//! `compile` and `run`; a malformed file, a budget overrun and a race are clear errors.

mod common;

use common::{kittens, text};

use kittens_hw::dtype::DType::{Bf16, F32};
use kittens_ir::serial::to_json;
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Op, Schedule};
use kittens_tile::{BaseShape, Layout, Swizzle};
use std::path::PathBuf;

fn file(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kittens-kernel-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A row-wise `y = x · 2` over rows of `dim`, one wave per row (strip tiles).
fn scale(dim: u32) -> Kernel {
    let mut k = KernelBuilder::new("scale", Schedule::Plain { waves: 4 });
    let rows = k.param("rows");
    let shape = [("row", rows.clone()), ("col", Expr::c(i64::from(dim)))];
    let x = k.global("x", Bf16, &shape, Access::Read);
    let y = k.global("y", Bf16, &shape, Access::Write);
    k.grid(vec![rows.ceil_div(4)], GridOrder::RowMajor);
    let row = k.block(0) * 4 + k.wave();
    let h = k.tile("h", F32, 1, dim, Layout::Row, BaseShape::STRIP);
    let g = k.tile("g", F32, 1, dim, Layout::Row, BaseShape::STRIP);
    k.load_global(h, k.gview(x, vec![row.clone(), Expr::c(0)], 0, 1, 1, dim));
    k.mul(g, h, 2.0);
    k.add(g, g, h);
    k.sub(g, g, h);
    k.store(k.gview(y, vec![row, Expr::c(0)], 0, 1, 1, dim), g);
    k.finish().unwrap()
}

/// Two waves hand a row over through shared memory; `barrier: false` is a race.
fn handoff(barrier: bool) -> Kernel {
    let mut k = KernelBuilder::new("handoff", Schedule::Plain { waves: 2 });
    let x = k.global(
        "x",
        F32,
        &[("r", Expr::c(1)), ("c", Expr::c(64))],
        Access::Read,
    );
    let y = k.global(
        "y",
        F32,
        &[("r", Expr::c(1)), ("c", Expr::c(64))],
        Access::Write,
    );
    let s = k.shared("s", F32, 1, 64, Swizzle::None, 1);
    let t = k.tile("t", F32, 1, 64, Layout::Row, BaseShape::STRIP);
    k.if_(k.wave().eq(0), |k| {
        k.load_global(t, k.gtile(x, 1, 64, 0, 0));
        k.store_shared(k.smem(s, 0), t);
        k.wait_shared(0);
    });
    if barrier {
        k.barrier();
    }
    k.if_(k.wave().eq(1), |k| {
        k.load(t, k.smem(s, 0));
        k.wait_shared(0);
        k.store(k.gtile(y, 1, 64, 0, 0), t);
    });
    k.finish().unwrap()
}

#[test]
fn check_compile_and_run_a_kernel_file() {
    let f = file("scale.json", &to_json(&scale(1024)));
    let f = f.to_str().unwrap();
    let out = kittens(&["check", "--kernel-file", f, "-p", "rows=9"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no hazards"),
        "{}",
        text(&out.stdout)
    );
    let out = kittens(&[
        "compile",
        "--kernel-file",
        f,
        "--target",
        "sm_90a",
        "--emit",
        "cuda",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("__global__"));
    let out = kittens(&[
        "compile",
        "--kernel-file",
        f,
        "--target",
        "gfx942",
        "--emit",
        "hip",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kittens(&["run", "--kernel-file", f, "-p", "rows=37", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["reference"], "none");
    assert_eq!(doc["outputs"][0]["name"], "y");
    assert_eq!(doc["outputs"][0]["elements"], 37 * 1024);
    assert_eq!(doc["outputs"][0]["non_finite"], 0);
    assert_eq!(doc["analysis"]["hazards"].as_array().unwrap().len(), 0);
}

/// A kernel file judged by a registry kernel's reference: the registry's own GEMM written out and
/// read back passes as the registry kernel does; a kernel with other tensors is refused by name.
#[test]
fn a_kernel_file_is_judged_by_a_named_reference() {
    let gemm = kittens_kernels::by_name("gemm_bf16")
        .unwrap()
        .build_default()
        .unwrap();
    let f = file("gemm.json", &to_json(&gemm));
    let args = [
        "run",
        "--kernel-file",
        f.to_str().unwrap(),
        "--reference",
        "gemm_bf16",
    ];
    let out = kittens(&[&args[..], &["--m", "96", "--n", "80", "--k", "64"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("rel_err"),
        "{}",
        text(&out.stdout)
    );
    let f = file("scale_ref.json", &to_json(&scale(64)));
    let out = kittens(&[
        "run",
        "--kernel-file",
        f.to_str().unwrap(),
        "--reference",
        "gemm_bf16",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("takes 1 parameters and 2 tensors"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_files_and_arguments_are_clear_errors() {
    let good = to_json(&scale(64));
    let cases = [
        ("truncated.json", good[..good.len() / 2].to_string(), "line"),
        (
            "op.json",
            good.replacen("\"mul\"", "\"silu\"", 1),
            "unknown variant `silu`",
        ),
        (
            "ver.json",
            good.replacen("\"version\": 1", "\"version\": 7", 1),
            "version 7",
        ),
        (
            "tile.json",
            good.replacen("\"cols\": 64", "\"cols\": 1073741824", 1),
            "budget of 1048576 bytes",
        ),
    ];
    for (name, body, want) in cases {
        let f = file(name, &body);
        for cmd in ["check", "compile", "run"] {
            let mut args = vec![cmd, "--kernel-file", f.to_str().unwrap()];
            if cmd == "compile" {
                args.extend(["--target", "gfx950"]);
            }
            let out = kittens(&args);
            let err = text(&out.stderr);
            assert!(!out.status.success(), "{cmd} {name}");
            assert!(
                err.contains(want) && !err.contains("panicked"),
                "{cmd} {name}: {err}"
            );
        }
    }
    let out = kittens(&["check", "--kernel-file", "/nonexistent/k.json"]);
    assert!(
        text(&out.stderr).contains("reading kernel file"),
        "{}",
        text(&out.stderr)
    );
    let f = file("both.json", &good);
    let out = kittens(&["check", "gemm_bf16", "--kernel-file", f.to_str().unwrap()]);
    assert!(
        text(&out.stderr).contains("not both"),
        "{}",
        text(&out.stderr)
    );
    let out = kittens(&["check"]);
    assert!(
        text(&out.stderr).contains("--kernel-file"),
        "{}",
        text(&out.stderr)
    );
}

/// A row of 4096 f32 values held twice by one warp is over sm_90a's register budget: lowering
/// refuses it, naming the estimate, the budget and the tiles that cost most.
#[test]
fn a_budget_overrun_is_refused_at_lowering() {
    let f = file("big.json", &to_json(&scale(4096)));
    let out = kittens(&[
        "compile",
        "--kernel-file",
        f.to_str().unwrap(),
        "--target",
        "sm_90a",
        "--emit",
        "cuda",
    ]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("register budget") && err.contains("`h` (128)") && err.contains("255"),
        "{err}"
    );
}

/// A racy kernel file: `check --deny-hazards` fails, `run` on the interpreter refuses it.
#[test]
fn a_racy_kernel_file_is_refused() {
    let ok = handoff(true);
    assert!(ok.ops().iter().any(|o| matches!(o.op, Op::Barrier { .. })));
    let f = file("race.json", &to_json(&handoff(false)));
    let f = f.to_str().unwrap();
    let out = kittens(&["check", "--kernel-file", f, "--deny-hazards"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("missing barrier"),
        "{}",
        text(&out.stdout)
    );
    let out = kittens(&["run", "--kernel-file", f]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("racy") && err.contains("missing barrier"),
        "{err}"
    );
    let f = file("norace.json", &to_json(&ok));
    let out = kittens(&["run", "--kernel-file", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
