//! `kittens bench gemm_bf16 --target gfx942|gfx950`: on an AMD GPU, the code object for the target
//! against hipBLASLt (or rocBLAS) in the same run (`kittens_runtime::amd::bench`). Without ROCm it
//! says so ("no ROCm runtime found (libamdhip64.so)") and runs the same code object on the ISA
//! emulator at a small ragged shape instead: numerics only, no speed.

use super::bench_args::{emit_json, utc_now, Args};
use anyhow::{bail, Context};
use kittens_hw::Target;
use kittens_runtime::amd::bench::{run_amd_gemm_bench, AmdBenchError, AmdGemmReport};
use kittens_runtime::amd::hip::HipError;

/// Shape of the emulator fallback: partial tiles in M, N and K, a second or so on the emulator.
const EMU_SHAPE: (usize, usize, usize) = (72, 40, 68);

pub fn run(a: &Args, target: Target) -> anyhow::Result<()> {
    if a.kernel.name != "gemm_bf16" {
        bail!(
            "on an AMD target only gemm_bf16 has a benchmark (against hipBLASLt or rocBLAS); `{}` has none",
            a.kernel.name
        );
    }
    let mut shapes: Vec<(usize, usize, usize)> = a.sizes.iter().map(|&s| (s, s, s)).collect();
    if let Some(list) = &a.shapes {
        shapes.extend(kittens_runtime::cuda::bench_shapes::parse_shapes(list)?);
    }
    if shapes.is_empty() {
        shapes = vec![(4096, 4096, 4096), (8192, 8192, 8192)];
    }
    match run_amd_gemm_bench(target, &shapes, a.warmup, a.iters.max(1)) {
        Ok(r) => report(&r, a.json.as_deref()),
        Err(AmdBenchError::Hip(e @ (HipError::NoRocm { .. } | HipError::NoDevice))) => {
            no_rocm(&e, target, a.json.as_deref())
        }
        Err(e) => Err(e).context("gemm_bf16 benchmark on the AMD GPU"),
    }
}

fn report(r: &AmdGemmReport, json: Option<&str>) -> anyhow::Result<()> {
    let doc = serde_json::json!({
        "benchmark": format!("gemm_bf16 vs {} (C = A·Bᵀ, bf16 in/out, fp32 accumulation)", r.vendor),
        "date": utc_now(),
        "report": r,
    });
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&doc)?;
        if path == "-" {
            println!("{text}");
        } else {
            std::fs::write(path, text + "\n").with_context(|| format!("writing {path}"))?;
        }
    }
    if json != Some("-") {
        println!(
            "gemm_bf16 on {} vs {} ({}), median of {} launches",
            r.target, r.vendor, r.vendor_path, r.iters
        );
        for w in &r.rows {
            println!(
                "  {}x{}x{}: ours {:.1} TFLOP/s, {} {:.1} TFLOP/s, ratio {:.3}; f64 spot rows rel err {:.2e} (theirs {:.2e}): {}",
                w.m, w.n, w.k, w.ours_tflops, r.vendor, w.vendor_tflops, w.ratio, w.ours_rel_err,
                w.vendor_rel_err, if w.passed { "ok" } else { "FAILED" }
            );
        }
    }
    let bad: Vec<String> = r
        .rows
        .iter()
        .filter(|w| !w.passed)
        .map(|w| format!("{}x{}x{}", w.m, w.n, w.k))
        .collect();
    if !bad.is_empty() {
        bail!("gemm_bf16 failed its check at {}", bad.join(", "));
    }
    Ok(())
}

/// No ROCm (or no AMD GPU): say so, then run the same code object on the ISA emulator.
fn no_rocm(e: &HipError, target: Target, json: Option<&str>) -> anyhow::Result<()> {
    use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
    use kittens_runtime::runner::{run, IsaEmu};
    let (m, n, k) = EMU_SHAPE;
    let mut p = GemmProblem::new(GemmKind::Bf16, m, n, k);
    p.run.seed = 1;
    let entry = kittens_kernels::by_name("gemm_bf16")?;
    let r = run(entry, &p, &IsaEmu::new(target)?).context("gemm_bf16 on the ISA emulator")?;
    let doc = serde_json::json!({
        "status": "no_rocm",
        "reason": e.to_string(),
        "fallback": { "backend": "isa-emu", "passed": r.passed, "run": r },
    });
    if emit_json(json, &doc)? {
        println!("{e}. No AMD GPU to time on: running the same code object on the ISA emulator instead (numerics only, no speed).");
        println!(
            "  gemm_bf16 {m}x{n}x{k} for {target} on isa-emu: relative error vs f64 {:.2e} — {}",
            r.error.rel_err,
            if r.passed { "ok" } else { "FAIL" }
        );
    }
    if !r.passed {
        bail!(
            "gemm_bf16 on the ISA emulator: relative error {:.2e}",
            r.error.rel_err
        );
    }
    Ok(())
}
