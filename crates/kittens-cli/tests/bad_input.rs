//! Bad sizes given to `kittens banks` and `kittens plan`, as a user would type them: each command must
//! end with exit status 1 and a message naming the limit it broke; no panic, no abort, no hang, no
//! wrapped number printed as a result. Before these limits existed the commands below aborted after a
//! failed allocation, panicked on a u32 overflow, hung, or printed garbage with exit status 0.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `kittens args`, returning (exit code, stdout, stderr). A command still running after a minute
/// is killed and fails the test: that is a hang guard, not a timing claim (each case answers at once).
fn kittens(args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kittens"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kittens starts");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting on kittens") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            child.wait().ok();
            panic!("kittens {args:?} still running after 60 s: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).ok();
    child.stderr.take().unwrap().read_to_string(&mut err).ok();
    (status.code(), out, err)
}

/// Exit status 1 (an error, not a signal or a panic's 101) and every `needles` in the message.
fn refused(args: &[&str], needles: &[&str]) {
    let (code, out, err) = kittens(args);
    assert_eq!(
        code,
        Some(1),
        "kittens {args:?}: exit {code:?}\nstdout: {out}\nstderr: {err}"
    );
    assert!(err.starts_with("error: "), "kittens {args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "kittens {args:?}: `{n}` not in: {err}");
    }
}

#[test]
fn banks_refuses_a_tile_over_the_budget() {
    refused(
        &[
            "banks",
            "--instr",
            "ds_read_b128",
            "--tile",
            "1000000x1000000",
        ],
        &["2000000000000 bytes", "1048576"],
    );
}

#[test]
fn plan_grid_refuses_a_grid_over_the_cache_models_budget() {
    refused(
        &[
            "plan", "grid", "--m", "1000000", "--n", "1000000", "--k", "1", "--tile", "1x1x1",
        ],
        &["1000000000000 tiles", "2^22"],
    );
}

#[test]
fn plan_grid_refuses_a_png_over_the_pixel_budget() {
    let png = std::env::temp_dir().join(format!("kittens-bad-input-{}.png", std::process::id()));
    let png_s = png.to_str().unwrap();
    refused(
        &[
            "plan", "grid", "--m", "9216", "--n", "9216", "--k", "9216", "--cell", "100000",
            "--png", png_s,
        ],
        &["3600001x4800001", "2^24"],
    );
    assert!(!png.exists(), "no picture is written");
}

#[test]
fn plan_tail_refuses_a_walk_over_the_budget() {
    refused(
        &[
            "plan",
            "tail",
            "--batch",
            "4",
            "--heads",
            "16",
            "--seq",
            "1000000000",
            "--dim",
            "128",
            "--block-rows",
            "384",
            "--kv-block",
            "1",
        ],
        &["1000000000 K/V blocks", "2^20"],
    );
}

#[test]
fn plan_tail_refuses_counts_that_overflow() {
    refused(
        &[
            "plan",
            "tail",
            "--batch",
            "1099511627776",
            "--heads",
            "1099511627776",
            "--seq",
            "16384",
            "--dim",
            "128",
            "--block-rows",
            "384",
            "--json",
        ],
        &["64 bits"],
    );
}

#[test]
fn plan_regs_refuses_blocks_and_counts_over_the_limits() {
    refused(
        &[
            "plan",
            "regs",
            "--producers",
            "4294967295",
            "--consumers",
            "1",
        ],
        &["1024 threads"],
    );
    refused(&["plan", "regs", "--overhead", "4294967295"], &["32 bits"]);
    refused(&["plan", "regs", "--tile", "65536x65536"], &["2^24"]);
}
