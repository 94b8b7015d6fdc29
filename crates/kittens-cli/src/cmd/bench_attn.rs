//! `kittens bench attn_fwd`: the attention tile program lowered for sm_90a on the GPU, every shape
//! checked on spot rows against the f64 reference by the test rule (`kittens_runtime::cuda::attn`)
//! and timed with CUDA events. cuDNN is not reachable from Rust: the comparison with PyTorch's SDPA is
//! the Python package's (`python -m kittens.bench attn`).

use anyhow::{bail, Context};
use kittens_ir::Rounding;
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape, Causal};
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::cuda::attn::{default_cases, run_attn_bench, AttnBenchOptions};
use kittens_runtime::runner::{self, CudaGpu, RunReport, Timed};

use super::bench_args::{utc_now, Args};

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
        bail!("--variants: attn_fwd benchmarks the registry's configuration only (no variants on sm_90a)");
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
        "date": utc_now(),
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
            "  B{} H{}/{} N{} D{} {:?} {:<8} rel_err {:.2e} (bf16 baseline {:.2e}) max_rel {:.2e} {:<4} {}",
            s.batch,
            s.heads,
            s.heads_kv,
            s.seq,
            s.dim,
            s.layout,
            if r.case.causal { "causal" } else { "" },
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

/// One check of `--checks lse|split|decode`: the registry's `attn_fwd` at `shape` against `seq_kv`
/// keys with the log-sum-exp, the mask, the output's rounding and the key split, through the runner
/// on the CUDA backend (the prepared call the package runs; every element of O and the log-sum-exp
/// judged by the test rule against the f64 forward, inputs scaled to logits of about ±64).
#[derive(Debug, Clone, Copy)]
struct Check {
    shape: AttnShape,
    seq_kv: usize,
    causal: Causal,
    rounding: Rounding,
    kv_splits: KvSplits,
}

impl Check {
    fn problem(&self, sms: Option<u32>) -> AttnProblem {
        let mut p = AttnProblem {
            args: AttnArgs {
                attn: self.shape,
                seq_kv: Some(self.seq_kv),
                causal: self.causal != Causal::No,
                bottom_right: self.causal == Causal::BottomRight,
                ..Default::default()
            },
            lse: true,
            kv_splits: self.kv_splits,
            run: RunSettings {
                sms,
                input_scale: 8.0,
                seed: (self.shape.seq * 131 + self.seq_kv * 7 + self.shape.dim + self.shape.heads)
                    as u64,
                ..RunSettings::default()
            },
            ..AttnProblem::default()
        };
        p.attn_cfg.rounding = self.rounding;
        p
    }

    fn label(&self) -> String {
        let s = self.shape;
        format!(
            "B{} H{}/{} N{} Nkv{} D{} {:?} {:?} {:?}",
            s.batch,
            s.heads,
            s.heads_kv,
            s.seq,
            self.seq_kv,
            s.dim,
            s.layout,
            self.causal,
            self.rounding
        )
    }
}

/// Odd lengths both ways, decoding (one query), both alignments, GQA, D64 and D128, both layouts,
/// more tiles than SMs, each rounding of the output; then the key split (Flash-Decoding): decoding
/// shapes the planner splits, and forced counts at odd lengths — more parts than key blocks, a causal
/// limit inside the parts, rows with no key (bottom-right, more queries than keys).
fn lse_checks() -> Vec<Check> {
    use {AttnLayout::*, Causal::*, KvSplits::*, Rounding::*};
    #[rustfmt::skip]
    let table = [
        // b, h, h_kv, seq, seq_kv, mask, dim, layout, split, rounding
        (2, 4, 2, 1, 1063, No, 128, Bshd, Auto, Rtne),
        (2, 4, 2, 1, 777, BottomRight, 64, Bhsd, Auto, Rtne),
        (2, 4, 2, 300, 77, BottomRight, 128, Bhsd, Auto, Rtne),
        (2, 4, 2, 77, 300, BottomRight, 64, Bshd, Auto, Rtne),
        (2, 4, 2, 300, 133, TopLeft, 128, Bshd, Auto, Rtne),
        (2, 4, 2, 257, 257, TopLeft, 64, Bhsd, Auto, Rtne),
        (2, 4, 2, 200, 513, No, 128, Bhsd, Auto, Rtne),
        (4, 16, 8, 600, 600, TopLeft, 64, Bshd, Auto, Rtne),
        (2, 4, 2, 333, 333, TopLeft, 128, Bshd, Auto, Rtz),
        (2, 4, 2, 333, 333, TopLeft, 128, Bshd, Auto, Rtna),
        (1, 16, 16, 1, 8192, No, 128, Bshd, Auto, Rtne),
        (2, 8, 2, 3, 4000, BottomRight, 64, Bhsd, Auto, Rtne),
        (1, 32, 8, 16, 2048, BottomRight, 128, Bshd, Auto, Rtne),
        (2, 4, 2, 1, 3001, No, 64, Bshd, Fixed(8), Rtne),
        (2, 4, 2, 77, 1000, BottomRight, 128, Bhsd, Fixed(5), Rtz),
        (2, 4, 1, 77, 63, BottomRight, 64, Bshd, Fixed(3), Rtna),
        (1, 8, 8, 3, 1000, TopLeft, 64, Bhsd, Fixed(2), Rtne),
        (2, 6, 3, 300, 3001, TopLeft, 128, Bshd, Fixed(4), Rtne),
    ];
    table
        .into_iter()
        .map(
            |(batch, heads, heads_kv, seq, seq_kv, causal, dim, layout, kv_splits, rounding)| {
                Check {
                    shape: AttnShape {
                        batch,
                        heads,
                        heads_kv,
                        seq,
                        dim,
                        layout,
                    },
                    seq_kv,
                    causal,
                    rounding,
                    kv_splits,
                }
            },
        )
        .collect()
}

/// The decoding shapes at D128: B1 H32 against 32768 keys, B4 H32/KV8 against 8192, and 16 queries
/// bottom-right against 4096 (GQA 32/8), with the planner's key split.
fn decode_checks() -> Vec<Check> {
    let case = |batch, heads, heads_kv, seq, seq_kv, causal| Check {
        shape: AttnShape {
            batch,
            heads,
            heads_kv,
            seq,
            dim: 128,
            layout: AttnLayout::Bshd,
        },
        seq_kv,
        causal,
        rounding: Rounding::Rtne,
        kv_splits: KvSplits::Auto,
    };
    vec![
        case(1, 32, 32, 1, 32768, Causal::No),
        case(4, 32, 8, 1, 8192, Causal::No),
        case(1, 32, 8, 16, 4096, Causal::BottomRight),
    ]
}

/// The key parts a report's run used and its timed median (ms), if timed.
fn parts_and_ms(r: &RunReport) -> (u64, Option<f64>) {
    let parts = r.shape["kv_splits"].as_u64().unwrap_or(1);
    let ms = r
        .dynamic
        .as_ref()
        .and_then(|d| d["timed"]["median_ms"].as_f64());
    (parts, ms)
}

fn line(c: &Check, r: &RunReport) -> String {
    let out = |name: &str| {
        r.outputs
            .iter()
            .find(|o| o.name == name)
            .map_or(String::from("-"), |o| {
                format!(
                    "{:.2e} ({:.2e})",
                    o.error.rel_err,
                    o.baseline.map_or(f64::NAN, |b| b.rel_err)
                )
            })
    };
    let (parts, ms) = parts_and_ms(r);
    format!(
        "  {} split {parts}: O {} lse {} {}{}",
        c.label(),
        out("o"),
        out("lse"),
        if r.passed { "ok" } else { "FAIL" },
        ms.map_or(String::new(), |t| format!(" {t:.3} ms"))
    )
}

/// `--checks lse`: every case of [`lse_checks`]; `--checks split`: only those with a fixed split
/// (short, for the sanitizers). The RTZ and RTNA cases also run the RTNE kernel on the same inputs
/// and check that the two rounded the same f32 values ([`rounding_agrees`]). Exits 1 when one fails.
fn run_lse(a: &Args, split_only: bool) -> anyhow::Result<()> {
    let mut cases = lse_checks();
    if split_only {
        cases.retain(|c| c.kv_splits != KvSplits::Auto);
    }
    let entry = kittens_kernels::registry::by_name("attn_fwd")?;
    let sms = kittens_runtime::cuda::dispatch::device_sms(0).ok();
    let gpu = CudaGpu::new(0);
    let (mut reports, mut bad) = (Vec::new(), 0usize);
    for c in &cases {
        let p = c.problem(sms);
        let r = runner::run(entry, &p, &gpu).with_context(|| c.label())?;
        println!("{}", line(c, &r));
        let mut agrees = None;
        if c.rounding != Rounding::Rtne {
            let ours = runner::time(entry, &p, &gpu)?.0.output;
            let mut rtne = p;
            rtne.attn_cfg.rounding = Rounding::Rtne;
            let theirs = runner::time(entry, &rtne, &gpu)?.0.output;
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|x| (x.to_bits() >> 16) as u16)
                    .collect::<Vec<_>>()
            };
            let ok = rounding_agrees(c.rounding, &bits(&ours), &bits(&theirs));
            println!(
                "    {:?} against RTNE on the same inputs: {}",
                c.rounding,
                if ok { "ok" } else { "FAIL" }
            );
            agrees = Some(ok);
        }
        if !r.passed || agrees == Some(false) {
            bad += 1;
        }
        reports
            .push(serde_json::json!({ "case": c.label(), "report": r, "rounding_agrees": agrees }));
    }
    if let Some(path) = a.json.as_deref() {
        let doc = serde_json::json!({
            "benchmark": "attn_fwd with the log-sum-exp, differing lengths, both causal alignments, the key split",
            "date": utc_now(),
            "commit": kittens_runtime::build_info::BUILD.commit,
            "rows": reports,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?;
    }
    if bad > 0 {
        bail!("{bad} of {} attention checks failed", cases.len());
    }
    Ok(())
}

/// Whether `other` (RTNA or RTZ) and `rtne` (bf16 bits) are the same f32 values rounded two ways:
/// RTZ never larger in magnitude than RTNE and at most one bf16 step from it, RTNA equal except at
/// exact ties (then one step larger in magnitude); and RTZ differs from RTNE at some elements.
fn rounding_agrees(mode: Rounding, other: &[u16], rtne: &[u16]) -> bool {
    let mag = |b: u16| b & 0x7fff;
    let mut differ = 0usize;
    for (&o, &e) in other.iter().zip(rtne) {
        if o == e {
            continue;
        }
        differ += 1;
        let same_sign = (o ^ e) & 0x8000 == 0;
        let ok = match mode {
            Rounding::Rtz => same_sign && mag(o) + 1 == mag(e),
            Rounding::Rtna => same_sign && mag(o) == mag(e) + 1,
            Rounding::Rtne => false,
        };
        if !ok {
            return false;
        }
    }
    other.len() == rtne.len()
        && match mode {
            Rounding::Rtz => differ > other.len() / 4,
            Rounding::Rtna => differ < other.len() / 50,
            Rounding::Rtne => true,
        }
}

/// `--checks decode`: decoding shapes with the key split the planner picks for the device, against
/// the same kernel unsplit on the same inputs; both judged over every element by the test rule and
/// timed (the split with its merge); exits 1 when a check fails.
fn run_decode(a: &Args) -> anyhow::Result<()> {
    let entry = kittens_kernels::registry::by_name("attn_fwd")?;
    let sms = kittens_runtime::cuda::dispatch::device_sms(0).ok();
    let gpu = CudaGpu::timed(
        0,
        Timed {
            warmup: a.warmup,
            iters: a.iters.max(1),
        },
    );
    let (mut rows, mut bad) = (Vec::new(), 0usize);
    for c in decode_checks() {
        let split = runner::run(entry, &c.problem(sms), &gpu).with_context(|| c.label())?;
        let one = Check {
            kv_splits: KvSplits::Fixed(1),
            ..c
        };
        let unsplit = runner::run(entry, &one.problem(sms), &gpu).with_context(|| one.label())?;
        let (parts, t_split) = parts_and_ms(&split);
        let (_, t_one) = parts_and_ms(&unsplit);
        let speedup = t_one.zip(t_split).map(|(u, s)| u / s);
        println!(
            "{} | {}{}",
            line(&one, &unsplit),
            line(&c, &split).trim_start(),
            speedup.map_or(String::new(), |x| format!(" | {x:.2}x ({parts} parts)"))
        );
        bad += usize::from(!split.passed) + usize::from(!unsplit.passed);
        rows.push(serde_json::json!({
            "case": c.label(), "unsplit": unsplit, "split": split, "speedup": speedup,
        }));
    }
    if let Some(path) = a.json.as_deref() {
        let doc = serde_json::json!({
            "benchmark": "attn_fwd decoding: the key split (Flash-Decoding) against the unsplit kernel",
            "date": utc_now(),
            "commit": kittens_runtime::build_info::BUILD.commit,
            "dirty": kittens_runtime::build_info::BUILD.dirty,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {path}"))?;
    }
    if bad > 0 {
        bail!("{bad} decoding runs failed the rule");
    }
    Ok(())
}
