//! Standard output for the whole CLI (the crate's `print!` / `println!` come here, see main.rs).
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe returns `BrokenPipe`, which std's `println!` turns
//! into a panic (exit 101 and a backtrace). Here a closed stdout (`kittens layout --list | head -c10`)
//! ends the process quietly with status 0: the reader took what it wanted, as `head` users expect from
//! Unix tools (we do not restore SIGPIPE's default action instead, so that the process never dies by a
//! signal and the rest of the program needs no `unsafe` libc call). Any other write error (a full disk,
//! `>/dev/full`) is a real failure: an `error:` line on stderr and exit status 1.

use std::io::Write;

fn fail(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to stdout: {e}");
    std::process::exit(1);
}

/// Writes formatted text to stdout (line-buffered by std); a failure ends the process (see above).
pub fn write(args: std::fmt::Arguments<'_>) {
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        fail(e);
    }
}

/// Writes `text` as is (emitted sources and listings).
pub fn write_str(text: &str) {
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        fail(e);
    }
}

/// Flushes what std still buffers (a last line without a newline), with the same handling.
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        fail(e);
    }
}
