//! What the CLI's tests share: running the `kittens` binary as a user does and reading its output.
#![allow(dead_code)] // each test binary uses its own part

use std::process::{Command, Output, Stdio};

/// `kittens ARGS…`, its output captured and nothing on its stdin.
pub fn kittens(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kittens"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kittens runs")
}

/// Bytes of an output stream as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
