//! `kittens bench attn_fwd`: the registry's `attn_fwd` on Hopper, exactly as a caller of the package
//! runs it — the entry's launches at the case's problem ([`super::dispatch::registry_stages`]: the
//! attention, or with the key split the planner picks for the device, the split kernel and its merge)
//! prepared on buffers of their own ([`super::device_call`]) — checked on spot rows against the f64
//! reference by the test rule (`kittens_kernels::reference::check_rule` against the PyTorch-style bf16
//! baseline on the same rows) and timed with CUDA events. Nothing here builds or launches a kernel by
//! hand: a configuration the registry does not give is not benchmarked.

use kittens_hw::Target;
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::problem::kv_parts;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::problem::RunSettings;
use kittens_kernels::reference::{self, ErrorReport, Verdict};
use serde::Serialize;

use super::bench::{bf16_to_f32, random_bf16};
use super::device_call::DeviceCall;
use super::dispatch::registry_stages;
use super::driver::{Device, Stream};
use super::{invalid, CudaError};

/// One benchmark or check shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttnCase {
    pub shape: AttnShape,
    pub causal: bool,
    /// Inputs uniform in [-scale, scale) (8 at head dim 64 gives logits of about ±64).
    pub input_scale: f32,
    /// Timed, or checked only.
    pub timed: bool,
    /// The key split: `auto` (where the tail planner says it pays on the device) or a count.
    pub kv_splits: KvSplits,
}

/// Options of [`run_attn_bench`].
#[derive(Debug, Clone)]
pub struct AttnBenchOptions {
    pub cases: Vec<AttnCase>,
    pub iters: usize,
    pub warmup: usize,
    /// Output rows compared with the f64 reference per case (first and last rows always among them).
    pub spot_rows: usize,
}

/// What one case measured.
#[derive(Debug, Clone, Serialize)]
pub struct AttnBenchRow {
    pub case: AttnCase,
    pub kernel: String,
    /// Key parts the launch used (1: unsplit).
    pub kv_splits: u32,
    pub registers: u32,
    pub spills: u32,
    pub rows_checked: usize,
    pub error: ErrorReport,
    pub baseline: ErrorReport,
    pub checks: Vec<(&'static str, Verdict)>,
    pub passed: bool,
    pub max_abs_logit: f64,
    /// Median of the timed launches, milliseconds (absent for check-only cases).
    pub ms: Option<f64>,
    /// `4·B·H·N²·D` (halved when causal) over the median time.
    pub tflops: Option<f64>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct AttnBenchReport {
    pub device: String,
    pub rows: Vec<AttnBenchRow>,
}

/// The case as the registry's problem on a device of `sms` SMs (the key split planned for it).
pub fn problem(case: &AttnCase, sms: u32) -> AttnProblem {
    AttnProblem {
        args: AttnArgs {
            attn: case.shape,
            causal: case.causal,
            ..Default::default()
        },
        kv_splits: case.kv_splits,
        run: RunSettings {
            sms: Some(sms),
            input_scale: case.input_scale,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    }
}

/// Runs every case on device 0.
pub fn run_attn_bench(opts: &AttnBenchOptions) -> Result<AttnBenchReport, CudaError> {
    let dev = Device::open(0)?;
    let stream = Stream::new()?;
    let entry = kittens_kernels::registry::by_name("attn_fwd").map_err(invalid)?;
    let mut rows = Vec::new();
    for case in &opts.cases {
        let p = problem(case, dev.multiprocessors);
        let stages = registry_stages(entry, &p).map_err(invalid)?;
        let parts = kv_parts(&p, Target::Sm90a).map_err(invalid)?;
        let call = DeviceCall::new(&dev, &stages)?;
        rows.push(run_case(&stream, call, parts, case, opts)?);
        let r = rows.last().expect("pushed");
        eprintln!(
            "{:?} causal={} scale {}: rel_err {:.2e} (baseline {:.2e}) {} {}",
            case.shape,
            case.causal,
            case.input_scale,
            r.error.rel_err,
            r.baseline.rel_err,
            if r.passed { "pass" } else { "FAIL" },
            r.tflops.map_or(String::new(), |t| format!(
                "{t:.1} TFLOP/s ({:.3} ms)",
                r.ms.unwrap_or(0.0)
            ))
        );
    }
    Ok(AttnBenchReport {
        device: dev.name.clone(),
        rows,
    })
}

fn run_case(
    stream: &Stream,
    mut call: DeviceCall,
    kv_splits: u32,
    case: &AttnCase,
    opts: &AttnBenchOptions,
) -> Result<AttnBenchRow, CudaError> {
    let sh = case.shape;
    let (nq, nkv) = (sh.len(sh.heads), sh.len(sh.heads_kv));
    let seed = (sh.seq * 131 + sh.dim * 7 + sh.heads) as u64;
    // Uniform in [-scale, scale), exact in bf16 (a power-of-two scale keeps them so).
    let scaled = |len, seed| -> Vec<f32> {
        random_bf16(len, seed)
            .into_iter()
            .map(|x| bf16_to_f32(x) * case.input_scale)
            .collect()
    };
    let (q, k, v) = (
        scaled(nq, seed),
        scaled(nkv, seed + 1),
        scaled(nkv, seed + 2),
    );
    call.upload("q", &q)?;
    call.upload("k", &k)?;
    call.upload("v", &v)?;
    call.launch(stream)?;
    stream.synchronize()?;
    let out = call.download("o")?;

    // Spot rows: the first, the last, and a spread between (every batch and head visited in turn).
    let total = sh.batch * sh.heads * sh.seq;
    let n = opts.spot_rows.clamp(2, total);
    let pick: Vec<(usize, usize, usize)> = (0..n)
        .map(|r| {
            let flat = if r + 1 == n {
                total - 1
            } else {
                (r as u64 * 2_654_435_761u64 % total as u64) as usize
            };
            let flat = if r == 0 { 0 } else { flat };
            (
                flat / (sh.heads * sh.seq),
                flat / sh.seq % sh.heads,
                flat % sh.seq,
            )
        })
        .collect();
    let (mut ours, mut refr, mut base) = (Vec::new(), Vec::new(), Vec::new());
    let (mut p64, mut p32) = (vec![0.0f64; sh.seq], vec![0.0f32; sh.seq]);
    let (mut r64, mut r32) = (vec![0.0f64; sh.dim], vec![0.0f32; sh.dim]);
    let mut max_logit = 0.0f64;
    for &(b, h, i) in &pick {
        let l =
            reference::attention_row(&q, &k, &v, &sh, case.causal, (b, h, i), &mut p64, &mut r64);
        max_logit = max_logit.max(l);
        reference::attention_bf16_baseline_row(
            &q,
            &k,
            &v,
            &sh,
            case.causal,
            (b, h, i),
            &mut p32,
            &mut r32,
        );
        refr.extend_from_slice(&r64);
        base.extend_from_slice(&r32);
        ours.extend((0..sh.dim).map(|x| out[sh.offset(sh.heads, b, h, i, x)]));
    }
    let error = reference::compare(&ours, &refr);
    let baseline = reference::compare(&base, &refr);
    let checks = vec![
        (
            "rel_err",
            reference::check_rule(error.rel_err, baseline.rel_err, reference::RULE_FLOOR),
        ),
        (
            "max_rel",
            reference::check_rule(error.max_rel, baseline.max_rel, reference::RULE_FLOOR),
        ),
    ];
    let passed = checks.iter().all(|(_, c)| c.passed);

    let (mut ms, mut tflops) = (None, None);
    if case.timed {
        let t = call.time_with(stream, opts.warmup, opts.iters, Vec::new())?[0];
        let mut flops =
            4.0 * (sh.batch * sh.heads) as f64 * (sh.seq as f64).powi(2) * sh.dim as f64;
        if case.causal {
            flops /= 2.0;
        }
        ms = Some(t);
        tflops = Some(flops / (t * 1e-3) / 1e12);
    }
    let kernels = call.kernels();
    let r = &kernels[0].compile;
    Ok(AttnBenchRow {
        case: *case,
        kernel: kernels
            .iter()
            .map(|k| k.kernel.as_str())
            .collect::<Vec<_>>()
            .join(" + "),
        kv_splits,
        registers: r.registers,
        spills: kernels
            .iter()
            .map(|k| k.compile.spill_stores + k.compile.spill_loads)
            .sum(),
        rows_checked: pick.len(),
        error,
        baseline,
        checks,
        passed,
        max_abs_logit: max_logit,
        ms,
        tflops,
    })
}

/// The benchmark's shapes: B16 H16 D128 at N 1024..16384 causal and not (16384 at B2 H24 to bound the
/// host reference's memory), D64, GQA H64/KV8, both layouts; plus check-only cases at odd lengths
/// with logits to ±64. Each case in the registry's configuration for sm_90a.
pub fn default_cases() -> Vec<AttnCase> {
    let shape = |batch, heads, heads_kv, seq, dim, layout| AttnShape {
        batch,
        heads,
        heads_kv,
        seq,
        dim,
        layout,
    };
    let timed = |shape, causal| AttnCase {
        shape,
        causal,
        input_scale: 1.0,
        timed: true,
        kv_splits: KvSplits::Auto,
    };
    let check = |shape, causal| AttnCase {
        shape,
        causal,
        input_scale: 8.0,
        timed: false,
        kv_splits: KvSplits::Auto,
    };
    let mut v = Vec::new();
    for causal in [false, true] {
        for n in [1024, 2048, 4096, 8192] {
            v.push(timed(shape(16, 16, 16, n, 128, AttnLayout::Bshd), causal));
        }
        v.push(timed(
            shape(2, 24, 24, 16384, 128, AttnLayout::Bshd),
            causal,
        ));
        v.push(timed(shape(16, 16, 16, 4096, 64, AttnLayout::Bshd), causal));
        v.push(timed(shape(4, 64, 8, 4096, 128, AttnLayout::Bhsd), causal));
    }
    for (causal, dim, layout) in [
        (false, 64, AttnLayout::Bshd),
        (true, 64, AttnLayout::Bhsd),
        (false, 128, AttnLayout::Bhsd),
        (true, 128, AttnLayout::Bshd),
    ] {
        v.push(check(shape(2, 6, 1, 1000 + dim - 1, dim, layout), causal));
        v.push(check(shape(1, 8, 2, 77, dim, layout), causal));
        v.push(check(shape(1, 2, 2, 1, dim, layout), causal));
    }
    v
}
