//! A bounded fuzz of the CLI's argument handling: seeded random argument vectors built from the CLI's
//! own subcommands and flags (read from `kittens <sub> --help`, so new flags are fuzzed without editing
//! this file), with plausible and hostile values (huge, negative, NaN, empty, unicode, malformed
//! shapes, missing values, repeated flags, extra positionals). Every invocation must end within a time
//! limit, under a memory limit, with exit status 0, 1 or 2: never a panic (101), an abort or a signal.
//!
//! The seed is fixed so that CI is reproducible; `KITTENS_FUZZ_SEED=N` and `KITTENS_FUZZ_CASES=N` try
//! others, `KITTENS_FUZZ_SHOW=1` prints every case with its exit status and first line of stderr. Left out: `demo`, `compile`, `ladder` and `bench`, which install compilers (network,
//! minutes) or need a GPU before they can fail; `run` gets a flag foreign to its kernel in every case,
//! so it is refused by validation before any kernel runs (its valid runs are the other tests' job).

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kittens");
/// Per invocation; every case answers in well under a second, so this only catches hangs.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Address-space limit of each invocation (KiB, `ulimit -v`): an unbounded allocation fails instead
/// of swapping the machine.
const MEMORY_KIB: u64 = 4 << 20;

/// (subcommand words, positional value pool) of the fuzzed subcommands.
const SUBCOMMANDS: &[(&[&str], &[&str])] = &[
    (&["list"], &[]),
    (&["layout"], INSTRUCTIONS),
    (&["banks"], &[]),
    (&["plan", "grid"], &[]),
    (&["plan", "tail"], &[]),
    (&["plan", "regs"], &[]),
    (&["check"], KERNELS),
    (&["run"], KERNELS),
];

const KERNELS: &[&str] = &[
    "gemm_bf16",
    "gemm_fp8",
    "attn_fwd",
    "attn_bwd",
    "layernorm",
    "rotary",
    "GEMM_BF16",
    "nope",
];
const INSTRUCTIONS: &[&str] = &[
    "v_mfma_f32_16x16x32_bf16",
    "v_mfma_f32_16x16x16_bf16",
    "v_mfma_f32_32x32x8_bf16",
    "wgmma.m64n256k16.f32.bf16.bf16",
    "v_mfma_bogus",
];

/// Numbers a user might mean (most flags without a default in their help are sizes).
const NUMBERS: &[&str] = &[
    "1", "2", "3", "7", "16", "32", "64", "128", "256", "384", "512", "1000", "4096", "0.1", "0.5",
];

/// Values a user might mean.
const PLAUSIBLE: &[&str] = &[
    "16x32",
    "32x32",
    "192x256x64",
    "256x256",
    "16x16x32",
    "row",
    "col",
    "bf16",
    "f32",
    "fp8",
    "none",
    "default",
    "hk16x32",
    "nv128",
    "xor(2,4,3)",
    "xor(1,3,2)+xor(2,5,1)",
    "ds_read_b128",
    "ds_write_b64",
    "ldmatrix",
    "a",
    "b",
    "c",
    "d",
    "mi355x",
    "mi300x",
    "h100",
    "gfx950",
    "gfx942",
    "sm_90a",
    "cpu",
    "hip-emu",
    "isa-emu",
    "pingpong",
    "interleave",
    "ws",
    "interleave4",
    "seed001",
    "bshd",
    "bhsd",
    "auto",
    "m=64",
    "k=128",
    "seq=100",
    "heads=4,heads_kv=2",
    "rows=3",
    "0,0",
    "1,0",
];

/// Values nobody means.
const HOSTILE: &[&str] = &[
    "0",
    "-1",
    "-0",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "1e308",
    "1e-320",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1.5",
    "0x10",
    "",
    " ",
    "ü",
    "🐱🐱",
    "ℵ₀",
    "a,b",
    ",,,",
    "=",
    "m=",
    "=5",
    "m=9223372036854775807",
    "heads=3,heads_kv=2",
    "offset_hi=0",
    "k=-1",
    "x",
    "0x0",
    "1x",
    "x1",
    "4294967295x4294967295",
    "65536x65536",
    "1x1x1",
    "1000000x1000000",
    "xor(1,4294967295,1)",
    "xor(8,8,8)+xor(8,8,8)",
    "xor(",
    "--json",
    "-",
    "--",
    "-p",
    "/dev/full",
    "../../..",
];

/// A flag the kernel does not take, so that `run` fails validation before any work.
fn foreign_flag(kernel: &str) -> &'static [&'static str] {
    match kernel {
        "gemm_bf16" | "gemm_fp8" => &["--causal"],
        "attn_fwd" | "attn_bwd" => &["--rows", "3"],
        "layernorm" => &["--m", "8"],
        "rotary" => &["--hidden", "768"],
        _ => &["--m", "8"],
    }
}

/// The flags `kittens <sub>` requires: the `--flag` words of its help's usage line.
fn required_of(sub: &[&str]) -> Vec<String> {
    let out = Command::new(BIN)
        .args(sub)
        .arg("--help")
        .output()
        .expect("kittens --help runs");
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    help.lines()
        .find(|l| l.starts_with("Usage:"))
        .map(|l| {
            l.split_whitespace()
                .filter(|w| w.starts_with("--"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// One option of a subcommand as its help describes it.
struct Flag {
    long: String,
    takes_value: bool,
    /// Values the help names for it: its possible values and its default (numeric defaults with a
    /// few neighbours), so that plausible cases get past clap.
    choices: Vec<String>,
}

/// Every option `kittens <sub> --help` lists, with the values its help names.
fn flags_of(sub: &[&str]) -> Vec<Flag> {
    let out = Command::new(BIN)
        .args(sub)
        .arg("--help")
        .output()
        .expect("kittens --help runs");
    assert!(out.status.success(), "kittens {sub:?} --help");
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    let mut flags: Vec<Flag> = vec![];
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if t.starts_with('-') && indent <= 6 {
            let Some(long) = t.split_whitespace().find(|w| w.starts_with("--")) else {
                continue;
            };
            flags.push(Flag {
                long: long.trim_end_matches(',').to_string(),
                takes_value: t.contains('<'),
                choices: vec![],
            });
            continue;
        }
        let Some(f) = flags.last_mut() else { continue };
        if let Some(v) = t.strip_prefix("- ").and_then(|r| r.split(':').next()) {
            f.choices.push(v.trim().to_string());
        }
        for (open, list) in [("[default: ", false), ("[possible values: ", true)] {
            if let Some(rest) = t.find(open).map(|k| &t[k + open.len()..]) {
                let inner = rest.split(']').next().unwrap_or("");
                let items: Vec<&str> = if list {
                    inner.split(", ").collect()
                } else {
                    vec![inner]
                };
                for v in items {
                    f.choices.push(v.to_string());
                    if let Ok(n) = v.parse::<u64>() {
                        f.choices
                            .extend([1, n / 2, n + 1, n * 2].map(|x| x.to_string()));
                    }
                }
            }
        }
    }
    flags.retain(|f| f.long != "--help" && f.long != "--version");
    assert!(
        sub == ["list"] || flags.len() > 1,
        "no flags parsed from kittens {sub:?} --help:\n{help}"
    );
    flags
}

/// A value for `flag` (`None`: a positional), hostile with probability `hostile`, else one its help
/// names or a generally plausible one.
fn value(rng: &mut SmallRng, flag: Option<&Flag>, hostile: f64) -> String {
    if rng.gen_bool(hostile) {
        return HOSTILE.choose(rng).unwrap().to_string();
    }
    match flag.filter(|f| !f.choices.is_empty() && rng.gen_bool(0.8)) {
        Some(f) => f.choices.choose(rng).unwrap().clone(),
        None if rng.gen_bool(0.7) => NUMBERS.choose(rng).unwrap().to_string(),
        None => PLAUSIBLE.choose(rng).unwrap().to_string(),
    }
}

/// A subcommand: its words, its flags, the flags it requires and its positional values.
type Sub = (Vec<String>, Vec<Flag>, Vec<String>, &'static [&'static str]);

/// One random argument vector: the required flags (usually, with mostly plausible values, so that
/// many cases get past clap to the command's own checks), then random flags and values.
fn case(rng: &mut SmallRng, table: &[Sub]) -> Vec<String> {
    let (sub, flags, required, positional) = table.choose(rng).unwrap();
    let mut args = sub.clone();
    for flag in required {
        if rng.gen_range(0..20) > 0 {
            args.push(flag.clone());
            let f = flags.iter().find(|f| &f.long == flag);
            args.push(value(rng, f, 0.15));
        }
    }
    let mut kernel = None;
    if !positional.is_empty() && rng.gen_bool(0.9) {
        let p = positional.choose(rng).unwrap().to_string();
        kernel = Some(p.clone());
        args.push(p);
    }
    let extra = rng.gen_range(0..=5);
    let mut picked: Vec<&Flag> = flags.choose_multiple(rng, extra).collect();
    if rng.gen_range(0..20) == 0 {
        picked.extend(flags.choose(rng)); // a repeated flag
    }
    for f in picked {
        args.push(f.long.clone());
        match (f.takes_value, rng.gen_range(0..20)) {
            // Wrong arity: a value-taking flag without its value, or a switch with one.
            (true, 0) | (false, 1) => {}
            (true, _) => args.push(value(rng, Some(f), 0.25)),
            (false, 2) => args.push(value(rng, Some(f), 0.25)),
            (false, _) => {}
        }
    }
    if rng.gen_range(0..20) == 0 {
        args.push(value(rng, None, 0.5)); // a stray positional
    }
    if sub[0] == "run" {
        args.extend(
            foreign_flag(kernel.as_deref().unwrap_or(""))
                .iter()
                .map(|s| s.to_string()),
        );
    }
    args
}

/// Runs one case; `Ok(exit status)` or `Err` describing a failure (exit status, signal, panic, time
/// or memory).
fn invoke(args: &[String], dir: &std::path::Path) -> Result<i32, String> {
    // `ulimit -v` through sh, then exec: the limit applies to kittens itself.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_KIB} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    // Drain stderr on a thread so that a chatty case cannot block on a full pipe.
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            return Err(format!("still running after {TIMEOUT:?}: a hang"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = reader.join().unwrap_or_default();
    let code = status.code();
    if std::env::var_os("KITTENS_FUZZ_SHOW").is_some() {
        eprintln!("{code:?} {args:?}: {}", err.lines().next().unwrap_or(""));
    }
    match code {
        Some(c @ 0..=2) if !err.contains("panicked") => Ok(c),
        _ => Err(format!("exit {code:?} (None: a signal)\nstderr: {err}")),
    }
}

#[test]
fn random_arguments_never_panic_hang_or_blow_up() {
    let seed: u64 = std::env::var("KITTENS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x006b_6974_7465_6e73);
    let cases: usize = std::env::var("KITTENS_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let table: Vec<Sub> = SUBCOMMANDS
        .iter()
        .map(|(sub, pos)| {
            let words: Vec<String> = sub.iter().map(|s| s.to_string()).collect();
            (words, flags_of(sub), required_of(sub), *pos)
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(seed);
    let all: Vec<Vec<String>> = (0..cases).map(|_| case(&mut rng, &table)).collect();
    let dir = std::env::temp_dir().join(format!("kittens-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let next = Mutex::new(0usize);
    let failures = Mutex::new(Vec::<String>::new());
    let exits = Mutex::new([0usize; 3]);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(args) = all.get(i) else { break };
                match invoke(args, &dir) {
                    Ok(c) => exits.lock().unwrap()[c as usize] += 1,
                    Err(why) => failures
                        .lock()
                        .unwrap()
                        .push(format!("case {i}: kittens {args:?}: {why}")),
                }
            });
        }
    });
    std::fs::remove_dir_all(&dir).ok();
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let [ok, refused, usage] = exits.into_inner().unwrap();
    eprintln!(
        "{cases} cases (seed {seed}) in {:.1} s: {ok} exit 0, {refused} refused (1), {usage} usage errors (2)",
        start.elapsed().as_secs_f64()
    );
    // The generator must reach past clap: some cases run, some are refused by validation.
    assert!(
        ok > 0 && refused > 0,
        "{ok} ran, {refused} refused: the fuzz only reaches clap"
    );
}
