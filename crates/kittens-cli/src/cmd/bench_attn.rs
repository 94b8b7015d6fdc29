//! `kittens bench attn_fwd`: the attention tile program lowered for sm_90a on the GPU, every shape
//! checked on spot rows against the f64 reference by the test rule (`kittens_runtime::cuda::attn`)
//! and timed with CUDA events. cuDNN is not reachable from Rust: the comparison with PyTorch's SDPA is
//! the Python package's (`python -m kittens.bench attn`).

use anyhow::{bail, Context};
use kittens_runtime::cuda::attn::{default_cases, run_attn_bench, AttnBenchOptions};

use super::bench::Args;

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut cases = default_cases();
    match a.checks.as_str() {
        "none" => cases.retain(|c| c.timed),
        "only" => cases.retain(|c| !c.timed),
        "lse" => return run_lse(a, false),
        "split" => return run_lse(a, true),
        "decode" => return run_decode(a),
        "default" => {}
        other => {
            bail!("--checks {other}: attn_fwd takes default, none, only, lse, split or decode")
        }
    }
    if !a.sizes.is_empty() {
        // `--sizes`: only the timed shapes of these sequence lengths (check shapes stay).
        cases.retain(|c| !c.timed || a.sizes.contains(&c.shape.seq));
    }
    if a.variants {
        // Each timed shape again with Q in one slot per block instead of the registry's two (or the
        // other way round), to measure what the double-buffered Q buys.
        let other: Vec<_> = cases
            .iter()
            .filter(|c| c.timed)
            .map(|c| kittens_runtime::cuda::attn::AttnCase {
                q_double: !c.q_double,
                ..*c
            })
            .collect();
        cases.extend(other);
    }
    let opts = AttnBenchOptions {
        cases,
        iters: a.iters.max(1),
        warmup: a.warmup,
        spot_rows: 48,
    };
    let report = run_attn_bench(&opts).context("attention benchmark on the GPU")?;
    use kittens_runtime::build_info::BUILD;
    let doc = serde_json::json!({
        "benchmark": "attn_fwd (producer/consumer tile program, sm_90a) vs the f64 reference on spot rows",
        "date": super::bench::utc_now(),
        "commit": BUILD.commit,
        "dirty": BUILD.dirty,
        "report": report,
    });
    match a.json.as_deref() {
        Some("-") => println!("{}", serde_json::to_string_pretty(&doc)?),
        Some(path) => std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?,
        None => {}
    }
    println!(
        "{} — attn_fwd, producer/consumer, lowered for sm_90a",
        report.device
    );
    for r in &report.rows {
        let s = r.case.shape;
        println!(
            "  B{} H{}/{} N{} D{} {:?} {:<8}{}{} rel_err {:.2e} (bf16 baseline {:.2e}) max_rel {:.2e} {:<4} {}",
            s.batch,
            s.heads,
            s.heads_kv,
            s.seq,
            s.dim,
            s.layout,
            if r.case.causal { "causal" } else { "" },
            match (r.case.pingpong, r.case.overlap) {
                (true, true) => " turns+overlap",
                (true, false) => " turns",
                (false, true) => " overlap",
                (false, false) => "",
            },
            if r.case.q_double { " q2" } else { "" },
            r.error.rel_err,
            r.baseline.rel_err,
            r.error.max_rel,
            if r.passed { "ok" } else { "FAIL" },
            r.tflops
                .map(|t| format!("{t:7.1} TFLOP/s {:.3} ms", r.ms.unwrap_or(0.0)))
                .unwrap_or_default()
        );
    }
    let bad = report.rows.iter().filter(|r| !r.passed).count();
    if bad > 0 {
        bail!(
            "{bad} of {} attention shapes failed the test rule",
            report.rows.len()
        );
    }
    Ok(())
}

/// `--checks lse`: the log-sum-exp output, differing query and key lengths, the bottom-right mask and
/// the key split (the planner's, and fixed counts), every element of O and the log-sum-exp judged by
/// the test rule; exits 1 when one fails. `--checks split`: only the cases with a fixed split (short,
/// for the sanitizers).
fn run_lse(a: &Args, split_only: bool) -> anyhow::Result<()> {
    use kittens_kernels::attn_fwd::split::KvSplits;
    use kittens_runtime::cuda::attn_lse::{lse_cases, run_lse_checks};
    let mut cases = lse_cases();
    if split_only {
        cases.retain(|c| c.kv_splits != KvSplits::Auto);
    }
    let rows = run_lse_checks(&cases).context("attention log-sum-exp checks on the GPU")?;
    if let Some(path) = a.json.as_deref() {
        let doc = serde_json::json!({
            "benchmark": "attn_fwd with the log-sum-exp, differing lengths, both causal alignments",
            "date": super::bench::utc_now(),
            "commit": kittens_runtime::build_info::BUILD.commit,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?;
    }
    for r in &rows {
        let s = r.case.shape;
        println!(
            "  B{} H{}/{} N{} Nkv{} D{} {:?} {:?} {:?} split {}: O {:.2e} ({:.2e}) lse {:.2e} ({:.2e}) {} regs {} spills {}",
            s.batch, s.heads, s.heads_kv, s.seq, r.case.seq_kv, s.dim, s.layout, r.case.causal,
            r.case.rounding, r.kv_splits,
            r.o.0.rel_err, r.o.1.rel_err, r.lse.0.rel_err, r.lse.1.rel_err,
            if r.passed { "ok" } else { "FAIL" }, r.registers, r.spills
        );
    }
    if rows.iter().any(|r| !r.passed) {
        bail!("an attention check failed the rule");
    }
    Ok(())
}

/// `--checks decode`: decoding shapes with the key split the planner picks for the device, against
/// the same kernel unsplit on the same inputs; both checked over every element by the test rule and
/// timed (the split with its merge); exits 1 when a check fails.
fn run_decode(a: &Args) -> anyhow::Result<()> {
    use kittens_runtime::cuda::attn_decode::{decode_cases, run_decode_checks};
    let rows = run_decode_checks(&decode_cases(), a.iters.max(1), a.warmup)
        .context("attention decoding checks on the GPU")?;
    if let Some(path) = a.json.as_deref() {
        let doc = serde_json::json!({
            "benchmark": "attn_fwd decoding: the key split (Flash-Decoding) against the unsplit kernel",
            "date": super::bench::utc_now(),
            "commit": kittens_runtime::build_info::BUILD.commit,
            "dirty": kittens_runtime::build_info::BUILD.dirty,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?;
    }
    for r in &rows {
        let s = r.case.shape;
        let run = |x: &kittens_runtime::cuda::attn_decode::DecodeRun| {
            format!(
                "G{} {:.3} ms O {:.2e} ({:.2e}) lse {:.2e} {}",
                x.kv_splits,
                x.ms,
                x.o.0.rel_err,
                x.o.1.rel_err,
                x.lse.0.rel_err,
                if x.passed { "ok" } else { "FAIL" }
            )
        };
        println!(
            "  B{} H{}/{} N{} Nkv{} D{} {:?}: {}{}{}",
            s.batch,
            s.heads,
            s.heads_kv,
            s.seq,
            r.case.seq_kv,
            s.dim,
            r.case.causal,
            run(&r.unsplit),
            r.split
                .as_ref()
                .map_or(String::new(), |x| format!(" | {}", run(x))),
            r.speedup.map_or(String::new(), |x| format!(" | {x:.2}x")),
        );
    }
    if rows.iter().any(|r| !r.passed) {
        bail!("a decoding check failed the rule");
    }
    Ok(())
}
