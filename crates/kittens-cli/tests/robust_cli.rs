//! Inputs the CLI once accepted with nonsense output (exit 0), panicked on (exit 101) or silently
//! ignored, each now refused with a message naming what is wrong, or answered correctly.

mod common;

use common::{kittens, text};

use std::process::{Command, Output, Stdio};

/// Exit status `code` (1: our error, 2: clap's usage error) with every `needles` on stderr.
fn refused_with(code: i32, args: &[&str], needles: &[&str]) {
    let out = kittens(args);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "kittens {args:?}\nstdout: {}\nstderr: {err}",
        text(&out.stdout)
    );
    for n in needles {
        assert!(err.contains(n), "kittens {args:?}: `{n}` not in: {err}");
    }
    assert!(!err.contains("panicked"), "kittens {args:?}: {err}");
}

fn refused(args: &[&str], needles: &[&str]) {
    refused_with(1, args, needles);
}

/// `kittens args` with stdout the write end of a pipe whose read end is already closed: every write
/// fails with EPIPE (what `| head -c10` leads to once head has its bytes).
fn with_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_kittens"))
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("kittens runs")
}

#[test]
fn a_closed_stdout_ends_quietly() {
    for args in [
        &["layout", "--list"][..],
        &["list", "--json"],
        &["banks", "--instr", "ds_read_b128", "--tile", "16x32"],
        &["plan", "regs"],
        &[
            "compile",
            "gemm_bf16",
            "--target",
            "gfx950",
            "--emit",
            "hip",
        ],
    ] {
        let out = with_closed_stdout(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "kittens {args:?}: {err}");
        assert!(err.is_empty(), "kittens {args:?} wrote to stderr: {err}");
    }
}

#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full exists on Linux");
    for args in [&["list", "--json"][..], &["layout", "--list"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_kittens"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .stderr(Stdio::piped())
            .output()
            .expect("kittens runs");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "kittens {args:?}: {err}");
        assert!(
            err.starts_with("error: writing to stdout: No space left on device"),
            "kittens {args:?}: {err}"
        );
    }
}

#[test]
fn swizzle_limits_do_not_wrap() {
    refused(
        &[
            "banks",
            "--instr",
            "ds_read_b128",
            "--swizzle",
            "xor(1,4294967295,1)",
        ],
        &["unknown swizzle", "bits + base + shift at most 31"],
    );
}

#[test]
fn check_block_must_be_a_block_of_the_grid() {
    // gemm_bf16's grid at the defaults (m = n = 512, 256x256 blocks) is 2x2.
    refused(
        &["check", "gemm_bf16", "--block", "0,0,0"],
        &["--block [0, 0, 0]", "2 dimension(s)"],
    );
    refused(&["check", "gemm_bf16", "--block", "0"], &["2 dimension(s)"]);
    refused(
        &["check", "gemm_bf16", "--block", "5,0"],
        &["block [5, 0]", "the grid is [2, 2]"],
    );
    refused(&["check", "gemm_bf16", "--block", "0,-1"], &["the grid is"]);
    let out = kittens(&["check", "gemm_bf16", "--block", "1,1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn check_refuses_key_value_heads_that_do_not_divide_the_heads() {
    refused(
        &["check", "attn_fwd", "-p", "heads=3,heads_kv=2"],
        &["heads_kv=2 must divide heads=3"],
    );
}

#[test]
fn check_takes_a_zero_seed_or_offset_word() {
    // `kittens run layernorm` runs with offset 0 by default; its words are data, not sizes.
    let out = kittens(&["check", "layernorm", "-p", "offset_hi=0,seed_lo=0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    refused(
        &["check", "layernorm", "-p", "seed_hi=-1"],
        &["`seed_hi` = -1", "32-bit word"],
    );
    refused(
        &["check", "layernorm", "-p", "offset_lo=4294967296"],
        &["32-bit word"],
    );
    refused(
        &["check", "layernorm", "-p", "rows=0"],
        &["`rows`", "empty"],
    );
}

#[test]
fn check_refuses_a_grid_past_64_bits_instead_of_wrapping() {
    let out = kittens(&["check", "gemm_bf16", "-p", "m=9223372036854775807"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("-36028797018963968"), "{err}");
    assert!(err.contains("past 64 bits"), "{err}");
}

#[test]
fn plan_regs_refuses_empty_stages_and_partial_instructions() {
    refused(&["plan", "regs", "--depth", "0"], &["depth 0"]);
    refused(&["plan", "regs", "--lds-k", "0"], &["stage K 0"]);
    refused(
        &["plan", "regs", "--k-step", "1"],
        &["k step 1 is not a multiple of the instruction's K 32"],
    );
}

#[test]
fn plan_grid_refuses_zero_windows_chunks_and_cells() {
    let base = ["plan", "grid", "--m", "4096", "--n", "4096", "--k", "4096"];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { base.iter().chain(extra).copied().collect() };
    refused(&with(&["--window", "0"]), &["Group-M W0", "at least 1"]);
    refused(
        &with(&["--window", "4", "--chunk", "0"]),
        &["XCD W4/C0", "at least 1"],
    );
    refused_with(
        2,
        &with(&["--cell", "0", "--png", "/dev/null"]),
        &["--cell"],
    );
    refused_with(
        2,
        &with(&["--cell", "1", "--png", "/dev/null"]),
        &["--cell"],
    );
    // --cell without --png would be ignored.
    refused_with(2, &with(&["--cell", "8"]), &["--png"]);
}

#[test]
fn plan_tail_refuses_counts_f64_cannot_hold_exactly() {
    refused(
        &[
            "plan",
            "tail",
            "--batch",
            "18446744073709551615",
            "--heads",
            "1",
            "--seq",
            "1",
            "--dim",
            "128",
            "--block-rows",
            "1",
        ],
        &["K/V-block iterations", "2^53"],
    );
}

#[test]
fn layout_list_takes_no_instruction() {
    refused_with(
        2,
        &["layout", "v_mfma_f32_16x16x32_bf16", "--list"],
        &["--list"],
    );
    refused_with(2, &["layout", "--list", "--matrix", "a"], &["--list"]);
}

#[test]
fn compile_emit_is_not_json() {
    refused_with(
        2,
        &[
            "compile",
            "gemm_bf16",
            "--target",
            "gfx950",
            "--emit",
            "asm",
            "--json",
        ],
        &["--json", "--emit"],
    );
}

#[test]
fn run_refuses_flags_the_kernel_does_not_take() {
    refused(
        &[
            "run",
            "gemm_bf16",
            "--causal",
            "--p",
            "1.5",
            "--layout",
            "bhsd",
        ],
        &["--causal", "--p", "--layout", "do not apply to gemm_bf16"],
    );
    refused(
        &["run", "layernorm", "--m", "64"],
        &["--m does not apply to layernorm"],
    );
    refused(
        &["run", "rotary", "--heads-kv", "1"],
        &["--heads-kv does not apply to rotary"],
    );
    refused(
        &[
            "run",
            "gemm_bf16",
            "--backend",
            "hip-emu",
            "--target",
            "gfx950",
            "--block",
            "128",
        ],
        &["--block configures the interpreter's tiles"],
    );
}

#[test]
fn run_refuses_schedules_the_kernel_does_not_have() {
    refused(
        &["run", "attn_fwd", "--schedule", "ws"],
        &["--schedule does not apply to attn_fwd"],
    );
    refused(
        &["run", "attn_bwd", "--schedule", "ws"],
        &["--schedule ws is the GEMMs' Hopper schedule"],
    );
    refused(
        &["run", "layernorm", "--schedule", "interleave"],
        &["--schedule does not apply to layernorm"],
    );
}

/// `--variant interleave4` on the interpreter runs the 4-wave interleave, as `--schedule interleave`
/// does (it ran the ping-pong before): the two give the same report, different from the ping-pong's.
#[test]
fn run_variant_interleave4_on_the_cpu_runs_the_interleave() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "run",
            "gemm_bf16",
            "--m",
            "128",
            "--n",
            "128",
            "--k",
            "128",
            "--block",
            "128",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = kittens(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let variant = run(&["--variant", "interleave4"]);
    let schedule = run(&["--schedule", "interleave"]);
    let pingpong = run(&[]);
    assert_eq!(variant["waves_per_block"], schedule["waves_per_block"]);
    assert_eq!(variant["error"], schedule["error"]);
    assert_ne!(
        variant["waves_per_block"], pingpong["waves_per_block"],
        "the interleave runs 4 waves, the ping-pong 8"
    );
}

/// The cuda backend: `--device` belongs to it (refused elsewhere, never taken for a kernel flag), its
/// target is sm_90a only, and on a machine without a driver (CI) it says so instead of crashing.
#[test]
fn the_cuda_backend_takes_its_own_flags_and_says_what_is_missing() {
    refused(
        &["run", "gemm_bf16", "--device", "1"],
        &["--device picks the GPU of --backend cuda"],
    );
    refused(
        &[
            "run",
            "gemm_bf16",
            "--backend",
            "cuda",
            "--target",
            "gfx942",
        ],
        &["--backend cuda runs sm_90a"],
    );
    let out = kittens(&[
        "run",
        "gemm_bf16",
        "--backend",
        "cuda",
        "--device",
        "0",
        "--m",
        "64",
    ]);
    let err = text(&out.stderr);
    assert!(!err.contains("does not apply"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    if out.status.success() {
        // A machine with a Hopper GPU ran and judged it.
        assert!(
            text(&out.stdout).contains("passed"),
            "{}",
            text(&out.stdout)
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("for sm_90a on an NVIDIA GPU"), "{err}");
    }
}
