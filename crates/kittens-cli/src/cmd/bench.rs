//! `kittens bench <kernel>`: a registry kernel lowered for sm_90a against the vendor library on the GPU,
//! measured in the same run. `gemm_bf16` is measured against cuBLAS (`kittens_runtime::cuda::bench`),
//! `gemm_fp8` against cuBLASLt (`bench_fp8.rs`).
//! Without an NVIDIA driver it says so and runs the same tile program on the CPU backend (the
//! interpreter) against the f64 reference: numerics only, no speed.

use anyhow::{bail, Context};
use kittens_hw::Target;
use kittens_runtime::cuda::bench::{run_gemm_bench, GemmBenchReport};
use kittens_runtime::cuda::CudaError;

use super::bench_args::{emit_json, failed_rows, options, print_table, utc_now, Args};

pub fn run(a: Args) -> anyhow::Result<()> {
    match a.target {
        Some(t) if t.arch().is_some_and(|x| x.is_amd()) => return super::bench_amd::run(&a, t),
        Some(Target::Sm90a) | None => {}
        Some(t) => bail!("--target {t}: the benchmarks run on sm_90a (default), gfx942 or gfx950"),
    }
    // The registry says whether the kernel lowers to the GPU the benchmark runs on.
    let target = Target::Sm90a;
    let lowered = super::compile::lowered(a.kernel, target);
    if a.kernel.name == "attn_fwd" {
        lowered?;
        return super::bench_attn::run(&a);
    }
    if matches!(a.kernel.name, "layernorm" | "rotary") {
        lowered?;
        return super::bench_mem::run(&a);
    }
    if a.kernel.name == "gemm_fp8" {
        lowered?;
        return super::bench_fp8::run(&a);
    }
    if !a.block.is_empty() || a.window.is_some() || !a.block_rows.is_empty() || !a.stages.is_empty()
    {
        bail!("--block, --block-rows, --stages and --window configure gemm_fp8's benchmark only");
    }
    if a.kernel.name != "gemm_bf16" {
        lowered?;
        bail!(
            "`kittens bench` compares gemm_bf16, gemm_fp8 and attn_fwd with vendor libraries and \
             sweeps layernorm/rotary configurations; time `{0}` as every caller runs it with \
             `kittens run {0} --backend cuda --time 100` (against a copy of its bytes), or from \
             Python with `python -m kittens.bench`",
            a.kernel.name
        );
    }
    lowered?;
    let opts = options(&a)?;
    let report = match run_gemm_bench(&opts) {
        Ok(r) => r,
        Err(e @ (CudaError::NoDriver(_) | CudaError::NoDevice(_))) => {
            return no_gpu(&e, a.json.as_deref())
        }
        Err(e) => return Err(e).context("GEMM benchmark on the GPU"),
    };
    let doc = document(&report);
    if emit_json(a.json.as_deref(), &doc)? {
        print_table(&report);
        if let (Some(path), Some(png)) = (a.json.as_deref(), &a.plot) {
            plot(path, png);
        }
    }
    // Every row ran (or said why not) before this: one bad shape costs its row, not the run.
    failed_rows(&report, "GEMM")
}

/// Shape of the CPU fallback: one 128×256 tile-row and a half (partial tiles), three K steps and a
/// partial one — small enough for the interpreter in about a second.
const CPU_SHAPE: (usize, usize, usize) = (192, 320, 200);

/// The GPU is not there: say so plainly, then run the same tile program (the producer/consumer
/// `gemm_bf16` that the sm_90a lowering compiles) on the CPU backend, the tile-language interpreter, and
/// report its error against the f64 reference. No timing: the interpreter says nothing about speed.
fn no_gpu(e: &CudaError, json: Option<&str>) -> anyhow::Result<()> {
    use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
    use kittens_kernels::gemm::GemmConfig;
    use kittens_runtime::runner::{run, Interpreter};
    let msg = format!(
        "no NVIDIA GPU: {e}. Falling back to the CPU backend (the tile-language interpreter): \
         gemm_bf16's Hopper tile program against an f64 reference, numerics only, no speed figures."
    );
    let h100 = Target::Sm90a.gpu().context("GPU catalog")?;
    let (m, n, k) = CPU_SHAPE;
    let mut p = GemmProblem {
        gemm: GemmConfig::for_gpu(h100),
        ..GemmProblem::new(GemmKind::Bf16, m, n, k)
    };
    p.run.seed = 1;
    let entry = kittens_kernels::by_name("gemm_bf16")?;
    let r = run(entry, &p, &Interpreter).context("gemm_bf16 on the CPU backend")?;
    let passed = r.passed;
    let doc = serde_json::json!({
        "status": "no_gpu",
        "reason": e.to_string(),
        "fallback": { "backend": "cpu", "passed": passed, "run": r },
    });
    if emit_json(json, &doc)? {
        println!("{msg}");
        println!(
            "  gemm_bf16 {m}x{n}x{k} (producer/consumer tile program, {} blocks x {} waves): \
             relative error vs f64 {:.2e} (max {:.2e}) — {}",
            r.blocks,
            r.waves_per_block,
            r.error.rel_err,
            r.error.max_rel,
            if passed { "ok" } else { "FAIL" }
        );
    }
    if !passed {
        bail!(
            "gemm_bf16 on the CPU backend: relative error {:.2e}",
            r.error.rel_err
        );
    }
    Ok(())
}

/// The report plus when it was measured and the source it was built from (the commit embedded at build
/// time, with whether the tree had uncommitted changes then).
fn document(r: &GemmBenchReport) -> serde_json::Value {
    use kittens_runtime::build_info::BUILD;
    serde_json::json!({
        "benchmark": "gemm_bf16 vs cuBLAS (C = A·Bᵀ, or A·B with --b-layout kn; bf16 in/out, fp32 accumulation)",
        "date": utc_now(),
        "commit": BUILD.commit,
        "dirty": BUILD.dirty,
        "report": r,
    })
}

/// The command that draws the plot of the JSON document. It is printed, not run: the script lives in
/// the repository, and a relative path run from the current folder would execute whatever a folder
/// the command happens to run in holds under that name.
fn plot_command(json: &str, png: &str) -> String {
    format!("python3 bench/plot_gemm.py {json} {png}")
}

fn plot(json: &str, png: &str) {
    eprintln!(
        "  plot: from the repository's root (needs matplotlib), run: {}",
        plot_command(json, png)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver the bench runs the tile program on the CPU backend and records its error
    /// against the f64 reference (computed here, not assumed).
    #[test]
    fn no_gpu_falls_back_to_the_cpu_backend() {
        let tmp = tempfile::tempdir().expect("a private temporary folder");
        let path = tmp.path().join("bench_cpu.json");
        let p = path.to_str().expect("utf-8 temp path");
        no_gpu(&CudaError::NoDriver("test: no libcuda".into()), Some(p)).expect("fallback runs");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("written")).expect("json");
        let _ = std::fs::remove_file(&path);
        assert_eq!(doc["status"], "no_gpu");
        assert_eq!(doc["fallback"]["backend"], "cpu");
        let err = doc["fallback"]["run"]["rel_err"].as_f64().expect("rel_err");
        // bf16 output rounding: above 1e-4 (a real comparison happened), under 1e-2.
        assert!(err > 1e-4 && err < 1e-2, "rel_err {err}");
        assert_eq!(
            doc["fallback"]["run"]["shape"]["schedule"],
            "producer/consumer"
        );
    }
}
