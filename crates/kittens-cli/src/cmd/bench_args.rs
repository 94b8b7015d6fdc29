//! The options of `kittens bench` and what the GEMM benchmarks share (`bench.rs` for gemm_bf16,
//! `bench_fp8.rs`): the command line, the GEMM options from it, the table printed and the exit status;
//! the other benchmarks (`bench_attn.rs`, `bench_mem.rs`, `bench_amd.rs`) take the same `Args`.

use anyhow::bail;
use kittens_hw::Target;
use kittens_kernels::registry::KernelEntry;
use kittens_runtime::cuda::bench::{GemmBenchOptions, GemmBenchReport, TileChoice, Timing};
use kittens_runtime::cuda::bench_shapes::{parse_shapes, Shape, ShapeName, Sweep};

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name, from the registry (`kittens list`); `gemm_bf16` is measured against cuBLAS
    /// (C = A·Bᵀ: correctness vs cuBLAS and f64 spot checks, and TFLOP/s), `gemm_fp8` likewise against
    /// cuBLASLt's FP8 GEMM (its default check shapes keep K a multiple of 16); `attn_fwd` against the f64
    /// reference on spot rows by the test rule, and TFLOP/s (`--sizes` picks sequence lengths,
    /// `--timing` does not apply; `--checks none` leaves out the check-only shapes, `--checks only`
    /// runs just those; for attn_fwd `--checks lse` checks the log-sum-exp, differing lengths,
    /// both causal alignments and the key split, every element; `--checks decode` times decoding
    /// shapes split by the planner against the unsplit kernel, both checked every element).
    #[arg(value_parser = kittens_kernels::by_name)]
    pub kernel: &'static KernelEntry,
    /// Square sizes M = N = K, comma-separated (2048,4096,8192 when no shape is given at all);
    /// attn_fwd: the sequence lengths of the timed shapes to run (all when not given).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// GEMMs: shapes `MxNxK,MxNxK,...` (any M, N, K >= 1), timed beside `--sizes`. layernorm /
    /// rotary: shapes `ROWSxD,...` or `BxHxNxD,...` (each timed at several configurations).
    #[arg(long)]
    pub shapes: Option<String>,
    /// Built-in shape lists, comma-separated: `llm` (Llama-style layer GEMMs, M in 4096, 8192, 16384
    /// and 16, 64, 256), `squares` (1024 to 16384 and 3000).
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<Sweep>,
    /// gemm_bf16 blocks: `auto` (the shape-aware choice), `all`, or a list such as `128x256,64x128`
    /// (every listed block at every shape; the chosen one is marked).
    #[arg(long, default_value = "auto")]
    pub tiles: String,
    /// gemm_bf16: how A and B are read, comma-separated, a row per entry and block: `auto`
    /// (= `tma-copy`, the faster on the H100 at every shape measured), `tma-copy` (TMA, from an aligned
    /// copy of B where its rows start off 128-byte lines, A in place), `cp-async` (the kernel's
    /// cp.async copies from the operands in place); for measurement `tma-copy-both`, `tma-copy-a`
    /// (A alone copied) and `tma-in-place` (none).
    #[arg(long, default_value = "auto")]
    pub loads: String,
    /// gemm_bf16: launch the GEMM after an operand copy, and the split-K reduction after the GEMM, as
    /// programmatic dependents (their launch and setup overlap the end of the kernel before);
    /// `off` launches them plainly, for measuring what that buys.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub programmatic: OnOff,
    /// gemm_bf16: row tiles per thread-block cluster: `auto` (2 where B is read in place off
    /// 128-byte lines, else 1), or comma-separated `1` (none), `2` or `4` (each B box fetched once
    /// per cluster of row tiles and multicast to all), a row per entry and block.
    #[arg(long, default_value = "auto")]
    pub clusters: String,
    /// How B is stored: `nk` (N x K, C = A·Bᵀ, a linear layer's weight) or `kn` (K x N, C = A·B);
    /// cuBLAS gets the same layout.
    #[arg(long, value_enum, default_value_t = BLayoutArg::Nk)]
    pub b_layout: BLayoutArg,
    /// Most timed launches per implementation and shape (median reported).
    #[arg(long, default_value_t = 100)]
    pub iters: usize,
    /// Fewest timed launches per implementation and shape.
    #[arg(long, default_value_t = 5)]
    pub min_iters: usize,
    /// Timed milliseconds per implementation and shape: launches as many as fit, within
    /// `--min-iters..=--iters`.
    #[arg(long, default_value_t = 300.0)]
    pub budget_ms: f64,
    /// Print the command that plots the ratio to cuBLAS per shape into this PNG from the JSON
    /// (bench/plot_gemm.py, python3 with matplotlib; run from the repository's root). Needs --json.
    #[arg(long)]
    pub plot: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Correctness-only shapes: `default` (partial tiles at every edge), `none`, or `MxNxK,MxNxK,...`.
    #[arg(long, default_value = "default")]
    pub checks: String,
    /// Launch order while timing.
    #[arg(long, value_enum, default_value_t = TimingArg::Interleaved)]
    pub timing: TimingArg,
    /// attn_fwd: also time every shape with Q in the other number of shared slots (one per block, or
    /// two used by alternate tiles; two in the registry's configuration).
    #[arg(long)]
    pub variants: bool,
    /// layernorm: dropout probability of the sweep.
    #[arg(long, default_value_t = 0.0)]
    pub p: f32,
    /// gemm_fp8: columns of C per block (a multiple of 16 up to 256, 32 or a multiple of 64 with
    /// bf16 C; the registry's is 192 at large M);
    /// comma-separated, a row per width.
    #[arg(long, value_delimiter = ',')]
    pub block: Vec<u32>,
    /// gemm_fp8: rows of C per block at every shape, 64 (one consumer warpgroup) or 128 (the registry
    /// chooses per shape), the ring as deep as fits; comma-separated, a row per height.
    #[arg(long, value_delimiter = ',')]
    pub block_rows: Vec<u32>,
    /// gemm_fp8: K steps per wgmma chain before it is added into the fp32 sums (0: one chain over
    /// all of K, no promotion; the registry's is 1).
    #[arg(long)]
    pub promote: Option<u32>,
    /// GEMMs: K slices per shape (1: no split-K), comma-separated, a row per count (beside each
    /// block); by default the split-K rule chooses per shape.
    #[arg(long, value_delimiter = ',')]
    pub split_k: Vec<u32>,
    /// gemm_fp8: tile-rows per group of the grid order (the registry's is 16).
    #[arg(long)]
    pub window: Option<u32>,
    /// gemm_fp8: ring stages of the listed blocks (2 to 16; by default as many as fit beside the C
    /// slabs), comma-separated, a row per count: a shallower ring needs less shared memory (e.g. to
    /// fit the L1/shared carveout another kernel ran with, or two blocks per SM).
    #[arg(long, value_delimiter = ',')]
    pub stages: Vec<u32>,
    /// gemm_fp8, 64-row blocks: `fit` loads A in a box of M's rows where M <= 32 (the registry's),
    /// `full` in the block's 64 (rows past M filled with zeros by TMA).
    #[arg(long, value_enum, default_value_t = ABoxArg::Fit)]
    pub a_box: ABoxArg,
    /// With no value: print one JSON document on stdout. With a file: also write it there.
    #[arg(long, num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<String>,
    /// gemm_bf16 on an AMD GPU: gfx942 or gfx950, against hipBLASLt (or rocBLAS) opened at run time
    /// (`--sizes`, `--shapes`, `--iters`, `--warmup` apply). Without ROCm it says so and checks the
    /// same code object on the ISA emulator instead.
    #[arg(long)]
    pub target: Option<Target>,
}

/// `--programmatic`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--b-layout`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BLayoutArg {
    Nk,
    Kn,
}

/// `--a-box`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ABoxArg {
    Fit,
    Full,
}

/// `--timing`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimingArg {
    /// Ours, cuBLAS, ours, … launch by launch.
    Interleaved,
    /// All of ours, then all of cuBLAS, each with its own warm-up.
    Blocked,
}

/// An error listing the rows (timed and check-only) that failed their check, if any: the exit status
/// of both GEMM benchmarks.
pub(crate) fn failed_rows(report: &GemmBenchReport, what: &str) -> anyhow::Result<()> {
    let bad: Vec<String> = report
        .rows
        .iter()
        .chain(&report.checks)
        .filter(|r| !r.passed)
        .map(|r| format!("{}x{}x{}: {}", r.m, r.n, r.k, r.verdict()))
        .collect();
    if !bad.is_empty() {
        bail!(
            "{} of {} {what} rows failed:\n  {}",
            bad.len(),
            report.rows.len() + report.checks.len(),
            bad.join("\n  ")
        );
    }
    Ok(())
}

/// The GEMM benchmark's options from the command line (shared by `gemm_bf16` and `gemm_fp8`).
pub(crate) fn options(a: &Args) -> anyhow::Result<GemmBenchOptions> {
    let defaults = GemmBenchOptions::default();
    let checks = match a.checks.as_str() {
        "default" => defaults.checks.clone(),
        "none" => Vec::new(),
        list => list
            .split(',')
            .map(parse_shape)
            .collect::<anyhow::Result<_>>()?,
    };
    anyhow::ensure!(
        a.budget_ms.is_finite() && a.budget_ms > 0.0,
        "--budget-ms must be a positive number of milliseconds"
    );
    Ok(GemmBenchOptions {
        shapes: timed_shapes(a)?,
        tiles: parse_tiles(&a.tiles)?,
        loads: a
            .loads
            .split(',')
            .map(|l| l.parse().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?,
        programmatic: a.programmatic == OnOff::On,
        clusters: match a.clusters.trim() {
            "auto" => None,
            list => Some(
                list.split(',')
                    .map(|c| match c.trim().parse::<u32>() {
                        Ok(n @ (1 | 2 | 4)) => Ok(n),
                        _ => Err(anyhow::anyhow!("--clusters: `{c}` is not auto, 1, 2 or 4")),
                    })
                    .collect::<anyhow::Result<_>>()?,
            ),
        },
        b_layout: match a.b_layout {
            BLayoutArg::Nk => kittens_kernels::gemm::BLayout::Nk,
            BLayoutArg::Kn => kittens_kernels::gemm::BLayout::Kn,
        },
        min_iters: a.min_iters,
        budget_ms: a.budget_ms,
        checks,
        timing: match a.timing {
            TimingArg::Interleaved => Timing::Interleaved,
            TimingArg::Blocked => Timing::Blocked,
        },
        split_k: match a
            .split_k
            .iter()
            .find(|s| !(1..=kittens_kernels::gemm::split_k::MAX_SPLIT_K).contains(*s))
        {
            Some(s) => anyhow::bail!(
                "--split-k {s}: 1 to {}",
                kittens_kernels::gemm::split_k::MAX_SPLIT_K
            ),
            None => a.split_k.clone(),
        },
        iters: a.iters.max(1),
        warmup: a.warmup,
        ..defaults
    })
}

/// `MxNxK` -> (M, N, K).
fn parse_shape(s: &str) -> anyhow::Result<Shape> {
    Ok(kittens_runtime::cuda::bench_shapes::parse_shape(s)?)
}

/// The timed shapes: `--sizes` squares, `--shapes`, then each `--sweep`, duplicates dropped; the
/// default squares when none is given.
fn timed_shapes(a: &Args) -> anyhow::Result<Vec<Shape>> {
    let mut v: Vec<Shape> = a.sizes.iter().map(|&s| (s, s, s)).collect();
    if let Some(list) = &a.shapes {
        v.extend(parse_shapes(list)?);
    }
    for sw in &a.sweep {
        v.extend(sw.shapes());
    }
    if v.is_empty() {
        v = GemmBenchOptions::default().shapes;
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|s| seen.insert(*s));
    if let Some(&s) = v.iter().find(|&&(m, n, k)| m == 0 || n == 0 || k == 0) {
        bail!("shape {} has an empty extent", ShapeName(s));
    }
    Ok(v)
}

/// `--tiles`.
fn parse_tiles(s: &str) -> anyhow::Result<TileChoice> {
    use kittens_kernels::gemm::shapes::{HopperTile, TILES};
    Ok(match s.trim() {
        "auto" => TileChoice::Auto,
        "all" => TileChoice::Each(TILES.to_vec()),
        list => TileChoice::Each(
            list.split(',')
                .map(|t| t.parse::<HopperTile>().map_err(anyhow::Error::msg))
                .collect::<anyhow::Result<_>>()?,
        ),
    })
}

/// UTC time as ISO 8601, from the civil-from-days algorithm (H. Hinnant, "chrono-Compatible Low-Level
/// Date Algorithms").
pub(crate) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

pub(crate) fn print_table(r: &GemmBenchReport) {
    println!(
        "{} ({} SMs, L2 {} MB), lowered for sm_90a",
        r.device,
        r.multiprocessors,
        r.l2_bytes >> 20
    );
    for k in &r.kernels {
        println!(
            "  block {:>7} ({}): {} stages, {} registers, {} spill stores, {} spill loads, {} B dynamic shared",
            k.tile,
            k.entry,
            k.stages,
            k.compile.registers,
            k.compile.spill_stores,
            k.compile.spill_loads,
            k.compile.dynamic_shared_bytes
        );
    }
    println!(
        "{:>20} {:>8} {:>10} {:>10} {:>7} {:>9} {:>10} {:>10} {:>6}",
        "M x N x K",
        "block",
        "ours TF/s",
        "cuBLAS",
        "ratio",
        "pad ms",
        "err/cuBLAS",
        "err/f64",
        "check"
    );
    // Check-only shapes are not timed: their speed columns print as "-".
    let fig = |x: f64, p: usize| {
        if x.is_finite() {
            format!("{x:.p$}")
        } else {
            "-".into()
        }
    };
    for row in r.rows.iter().chain(&r.checks) {
        let tile = row.tile.clone().unwrap_or_else(|| "-".into());
        println!(
            "{:>20} {:>8} {:>10} {:>10} {:>7} {:>9} {:>10.2e} {:>10.2e} {:>6}",
            ShapeName((row.m, row.n, row.k)).to_string(),
            if row.chosen { format!("{tile}*") } else { tile },
            fig(row.ours_tflops, 1),
            fig(row.cublas_tflops, 1),
            fig(row.ratio, 3),
            fig(row.pad_ms, 3),
            row.rel_err_vs_cublas,
            row.spot_err_ours,
            row.verdict()
        );
    }
    let s = &r.summary;
    println!(
        "geometric mean of ours/cuBLAS over {} chosen rows: {}; lowest {} ({}); rows failed: {}",
        r.rows.iter().filter(|x| x.chosen).count(),
        s.geomean_ratio.map_or("-".into(), |g| format!("{g:.3}")),
        s.min_ratio.map_or("-".into(), |g| format!("{g:.3}")),
        s.worst.as_deref().unwrap_or("-"),
        s.failed_rows
    );
    for (t, g, n) in &s.per_tile {
        println!("  block {t:>7}: geometric mean {g:.3} over {n} shapes");
    }
    if !s.per_tile.is_empty() {
        if let Some(b) = s.best_of_geomean {
            println!("  best block of every shape: geometric mean {b:.3}");
        }
    }
}

/// `--json`: `-` prints the document on stdout (and nothing else follows), a path writes it there.
/// Returns whether the human-readable report is still to be printed (not when stdout held the JSON).
pub fn emit_json(json: Option<&str>, doc: &serde_json::Value) -> anyhow::Result<bool> {
    use anyhow::Context;
    match json {
        Some("-") => {
            println!("{}", serde_json::to_string_pretty(doc)?);
            Ok(false)
        }
        Some(path) => {
            std::fs::write(path, serde_json::to_string_pretty(doc)? + "\n")
                .with_context(|| format!("writing {path}"))?;
            Ok(true)
        }
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse() {
        assert_eq!(
            parse_shape("1000x1032x520").expect("valid"),
            (1000, 1032, 520)
        );
        assert!(parse_shape("10x10").is_err() && parse_shape("axbxc").is_err());
        assert_eq!(parse_tiles("auto").unwrap(), TileChoice::Auto);
        let TileChoice::Each(t) = parse_tiles("128x256,64x128").unwrap() else {
            panic!("a list")
        };
        assert_eq!(t.len(), 2);
        assert!(parse_tiles("96x96").is_err());
    }

    #[test]
    fn utc_date_is_well_formed_and_recent() {
        let s = utc_now();
        assert_eq!(s.len(), 20, "{s}");
        let year: i32 = s[..4].parse().expect("year");
        assert!((2024..2100).contains(&year), "{s}");
        assert!(s.ends_with('Z') && &s[4..5] == "-" && &s[10..11] == "T");
    }
}
