//! The GPU half of the demo: every kernel the registry lists for sm_90a, first checked on odd shapes
//! through the runner's generic `cuda` backend (f64 reference, the test rule, the same report as
//! `kittens run --backend cuda`), then timed at a representative shape, interleaved with its baseline
//! in the same process: cuBLAS and cuBLASLt for the GEMMs (`kittens bench`'s harness), a
//! device-to-device copy of the same bytes for the memory-bound kernels, the GPU's dense peak for
//! attention (cuDNN's side by side is `python -m kittens.bench attn`, which reaches it through PyTorch).

use super::Section;
use kittens_hw::Target;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::problem::NamedArgs;
use kittens_runtime::cuda::bench::{run_gemm_bench, GemmBenchOptions, Timing};
use kittens_runtime::cuda::bench_fp8::run_fp8_bench;
use kittens_runtime::cuda::CudaError;
use kittens_runtime::runner::{self, CudaGpu, Timed};
use serde_json::{json, Value};
use std::time::Instant;

/// Whether a usable NVIDIA GPU is present, and if not, why (said plainly by the caller).
pub fn probe() -> Result<String, CudaError> {
    Ok(kittens_runtime::cuda::driver::Device::open(0)?.name.clone())
}

/// An attention (or rotary) problem by name: `b × n` positions of `h` query heads (`hkv` key/value
/// heads) of `d` in `layout`.
fn attn(b: usize, h: usize, hkv: usize, n: usize, d: usize, layout: AttnLayout) -> NamedArgs {
    let layout = match layout {
        AttnLayout::Bshd => "bshd",
        AttnLayout::Bhsd => "bhsd",
    };
    NamedArgs::new()
        .with("batch", b)
        .with("heads", h)
        .with("heads_kv", hkv)
        .with("seq", n)
        .with("dim", d)
        .with("layout", layout)
}

fn norm(rows: usize, dim: usize, p: f32) -> NamedArgs {
    NamedArgs::new()
        .with("rows", rows)
        .with("norm_dim", dim)
        .with("p", p)
}

fn gemm(m: usize, n: usize, k: usize) -> NamedArgs {
    NamedArgs::new().with("m", m).with("n", n).with("k", k)
}

/// Odd shapes (partial tiles, GQA, both masks and alignments, key split, both layouts) per kernel.
fn checks() -> Vec<(&'static str, String, NamedArgs)> {
    use AttnLayout::{Bhsd, Bshd};
    let mut v = vec![
        ("gemm_bf16", "1000x776x1032".into(), gemm(1000, 776, 1032)),
        ("gemm_fp8", "200x136x160".into(), gemm(200, 136, 160)),
        (
            "attn_fwd",
            "B2 H4/2 N77 D64".into(),
            attn(2, 4, 2, 77, 64, Bshd),
        ),
        (
            "attn_fwd",
            "B1 H4/1 N45 Nkv301 D128 causal bottom-right, lse".into(),
            attn(1, 4, 1, 45, 128, Bshd)
                .with("seq_kv", 301usize)
                .with("causal", true)
                .with("bottom_right", true)
                .with("lse", true),
        ),
        (
            "attn_fwd",
            "decode B1 H4/2 N1 Nkv3001 D128 BHSD, key split auto".into(),
            attn(1, 4, 2, 1, 128, Bhsd)
                .with("seq_kv", 3001usize)
                .with("kv_splits", "auto"),
        ),
        (
            "attn_bwd",
            "B1 H4/2 N45 Nkv37 D64 causal".into(),
            attn(1, 4, 2, 45, 64, Bshd)
                .with("seq_kv", 37usize)
                .with("causal", true),
        ),
        (
            "attn_bwd",
            "B1 H2 N77 D128 BHSD".into(),
            attn(1, 2, 2, 77, 128, Bhsd),
        ),
        ("layernorm", "37x1024 p=0.1".into(), norm(37, 1024, 0.1)),
        (
            "rotary",
            "B2 H3 N45 D128 BHSD GPT-J".into(),
            attn(2, 3, 3, 45, 128, Bhsd).with("interleaved", true),
        ),
    ];
    v.push((
        "rotary",
        "B2 H3 N45 D64 GPT-NeoX".into(),
        attn(2, 3, 3, 45, 64, Bshd),
    ));
    let rows = |r: usize, d: usize| NamedArgs::new().with("rows", r).with("norm_dim", d);
    v.extend([
        (
            "attn_varlen",
            "B6 H4/2 N<=150 Nkv<=90 D64 causal, lengths incl. 0 and 1".into(),
            attn(6, 4, 2, 150, 64, Bshd)
                .with("seq_kv", 90usize)
                .with("causal", true),
        ),
        (
            "attn_varlen_bwd",
            "B5 H4/2 N<=150 Nkv<=131 D64 causal, lengths incl. 0 and 1".into(),
            attn(5, 4, 2, 150, 64, Bshd)
                .with("seq_kv", 131usize)
                .with("causal", true),
        ),
        (
            "rotary_bwd",
            "B2 H3 N45 D64 GPT-NeoX".into(),
            attn(2, 3, 3, 45, 64, Bshd),
        ),
        ("layernorm_bwd", "37x1000 p=0.1".into(), norm(37, 1000, 0.1)),
        ("rmsnorm", "37x1000 residual".into(), rows(37, 1000)),
        ("rmsnorm_bwd", "37x1000 residual".into(), rows(37, 1000)),
        ("swiglu", "37x1000".into(), rows(37, 1000)),
        (
            "swiglu_bwd",
            "37x1000 packed".into(),
            rows(37, 1000).with("packed", true),
        ),
        (
            "cross_entropy",
            "37x50257 smoothing 0.1".into(),
            rows(37, 50257).with("smoothing", 0.1f32),
        ),
    ]);
    v
}

/// What one timed line reports.
struct Line {
    kernel: &'static str,
    shape: String,
    figure: String,
    ratio: Option<f64>,
    baseline: &'static str,
}

/// Attention FLOPs: `4·B·H·N·Nkv·D` forward (halved when causal), 2.5× that backward.
fn attn_flops(p: &NamedArgs, backward: bool) -> f64 {
    let size = |name| p.size_or(name, 0).unwrap_or(0);
    let seq = size("seq");
    let nkv = p.size_or("seq_kv", seq).unwrap_or(seq);
    let f = 4.0 * (size("batch") * size("heads") * seq * nkv * size("dim")) as f64;
    let f = if p.flag_or("causal", false).unwrap_or(false) {
        f / 2.0
    } else {
        f
    };
    if backward {
        2.5 * f
    } else {
        f
    }
}

/// Sum of the timed stages' medians (kernel and copy), from the backend's `dynamic` of one launch
/// or of several.
fn stage_times(dynamic: &Option<Value>) -> (f64, f64, f64) {
    let one = |d: &Value| {
        let t = &d["timed"];
        (
            t["median_ms"].as_f64().unwrap_or(f64::NAN),
            t["copy_ms"].as_f64().unwrap_or(f64::NAN),
            t["tensor_bytes"].as_f64().unwrap_or(f64::NAN),
        )
    };
    match dynamic {
        Some(Value::Array(stages)) => stages
            .iter()
            .map(|s| one(&s["dynamic"]))
            .fold((0.0, 0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2)),
        Some(d) => one(d),
        None => (f64::NAN, f64::NAN, f64::NAN),
    }
}

pub fn run(s: &mut Section) -> anyhow::Result<Value> {
    let t0 = Instant::now();
    let device = probe()?;
    s.line(format!(
        "{device}: every sm_90a kernel through the generic CUDA runner"
    ));
    let registry_gpu: Vec<&str> = kittens_kernels::registry::ALL
        .iter()
        .filter(|e| e.plan(Target::Sm90a).is_some_and(|p| p.status.available()))
        .map(|e| e.name)
        .collect();
    let mut checked = Vec::new();
    let mut all_correct = true;
    let mut cases = checks();
    // Configured for the GPU that runs them (its SM count), not the catalog's.
    let sms = kittens_runtime::cuda::dispatch::device_sms(0)?;
    let model = kittens_runtime::cuda::dispatch::device_gpu(0)?;
    for (_, _, p) in cases.iter_mut() {
        p.set("sms", sms);
        if let Some(g) = model {
            p.set("gpu", g);
        }
    }
    for (i, (name, shape, p)) in cases.iter().enumerate() {
        eprintln!("  [{}/{}] checking {name} {shape} ...", i + 1, cases.len());
        let entry = kittens_kernels::by_name(name)?;
        let started = Instant::now();
        let r = entry
            .problem(p)
            .map_err(runner::RunError::Kernel)
            .and_then(|p| runner::run(entry, p.as_ref(), &CudaGpu::new(0)));
        if let Ok(r) = &r {
            // The first run of a kernel compiles it (NVRTC; later processes read the disk cache).
            eprintln!(
                "        {:.1} s, of which compile or cache load {:.1} s",
                started.elapsed().as_secs_f64(),
                r.compile_seconds
            );
        }
        let (verdict, detail) = match &r {
            Ok(r) if r.passed => (
                "correct",
                format!("rel_err {:.2e} <= {:.2e}", r.error.rel_err, r.tolerance),
            ),
            Ok(r) => ("WRONG", r.failures().join("; ")),
            Err(e) => ("ERROR", e.to_string()),
        };
        all_correct &= verdict == "correct";
        s.line(format!("{name:<10} {shape:<50} {verdict:<8} {detail}"));
        checked.push(json!({
            "kernel": name, "shape": shape, "verdict": verdict, "detail": detail,
            "report": r.ok(),
        }));
    }
    for name in &registry_gpu {
        anyhow::ensure!(
            cases.iter().any(|c| c.0 == *name),
            "the demo checks no shape of `{name}`, which the registry lists for sm_90a"
        );
    }

    eprintln!("  timing (interleaved with each baseline, same process) ...");
    let mut lines = Vec::new();
    let opts = GemmBenchOptions {
        shapes: vec![(4096, 4096, 4096)],
        checks: Vec::new(),
        timing: Timing::Interleaved,
        budget_ms: 300.0,
        ..GemmBenchOptions::default()
    };
    let g = run_gemm_bench(&opts)?;
    for r in &g.rows {
        all_correct &= r.passed;
        lines.push(Line {
            kernel: "gemm_bf16",
            shape: format!("{}x{}x{}", r.m, r.n, r.k),
            figure: format!("{:.0} TF/s", r.ours_tflops),
            ratio: Some(r.ratio),
            baseline: "cuBLAS",
        });
    }
    let h100 = Target::Sm90a
        .gpu()
        .ok_or_else(|| anyhow::anyhow!("no sm_90a GPU in the catalog"))?;
    let f = run_fp8_bench(&[], &opts)?;
    for r in &f.gemm.rows {
        all_correct &= r.passed;
        lines.push(Line {
            kernel: "gemm_fp8",
            shape: format!("{}x{}x{}", r.m, r.n, r.k),
            figure: format!("{:.0} TF/s", r.ours_tflops),
            ratio: Some(r.ratio),
            baseline: "cuBLASLt",
        });
    }
    let timed = CudaGpu::timed(
        0,
        Timed {
            warmup: 5,
            iters: 20,
        },
    );
    let peak = h100.peak_bf16_tflops;
    let bshd = AttnLayout::Bshd;
    // Attention against the dense peak (its FLOPs over the time), the memory-bound kernels against a
    // copy of the same bytes timed beside them (`Timed`).
    let timed_cases = [
        (
            "attn_fwd",
            "B4 H16 N4096 D128",
            attn(4, 16, 16, 4096, 128, bshd),
        ),
        (
            "attn_fwd",
            "B4 H16 N4096 D128 causal",
            attn(4, 16, 16, 4096, 128, bshd).with("causal", true),
        ),
        (
            "attn_bwd",
            "B4 H16 N2048 D128",
            attn(4, 16, 16, 2048, 128, bshd),
        ),
        ("layernorm", "8192x4096 p=0.1", norm(8192, 4096, 0.1)),
        (
            "rotary",
            "B16 H16 N2048 D128",
            attn(16, 16, 16, 2048, 128, bshd),
        ),
    ];
    for (name, shape, p) in &timed_cases {
        let entry = kittens_kernels::by_name(name)?;
        let (e, _) = runner::time(entry, entry.problem(p)?.as_ref(), &timed)?;
        let (ms, copy_ms, bytes) = stage_times(&e.dynamic);
        let (figure, ratio, baseline) = if name.starts_with("attn") {
            let tf = attn_flops(p, *name == "attn_bwd") / ms / 1e9;
            (
                format!("{tf:.0} TF/s ({ms:.3} ms)"),
                tf / peak,
                "dense bf16 peak",
            )
        } else {
            let tbps = bytes / ms / 1e9;
            (
                format!("{tbps:.2} TB/s ({ms:.3} ms)"),
                copy_ms / ms,
                "copy of the same bytes",
            )
        };
        lines.push(Line {
            kernel: name,
            shape: shape.to_string(),
            figure,
            ratio: Some(ratio),
            baseline,
        });
    }
    s.line("");
    s.line(format!(
        "{:<10} {:<26} {:>22} {:>7}  vs",
        "kernel", "shape", "ours", "ratio"
    ));
    for l in &lines {
        s.line(format!(
            "{:<10} {:<26} {:>22} {:>7}  {}",
            l.kernel,
            l.shape,
            l.figure,
            l.ratio.map_or("-".into(), |r| format!("{r:.3}")),
            l.baseline
        ));
    }
    s.line(format!(
        "attention against cuDNN and FlashAttention-2: python -m kittens.bench attn; {:.0} s in all",
        t0.elapsed().as_secs_f64()
    ));
    anyhow::ensure!(
        all_correct,
        "a kernel failed its correctness check on the GPU"
    );
    Ok(json!({
        "device": device,
        "checks": checked,
        "timed": lines.iter().map(|l| json!({
            "kernel": l.kernel, "shape": l.shape, "figure": l.figure, "ratio": l.ratio,
            "baseline": l.baseline,
        })).collect::<Vec<_>>(),
        "gemm_bf16": g,
        "gemm_fp8": f,
        "seconds": t0.elapsed().as_secs_f64(),
    }))
}
