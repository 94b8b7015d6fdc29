//! The GPU half of the demo: with an NVIDIA driver, the suite against the vendor library in the same run
//! (`kittens bench`'s harness: checks against cuBLAS and f64, CUDA events, warm-up, medians, rotated inputs).

use super::Section;
use kittens_hw::Target;
use kittens_runtime::cuda::bench::{run_gemm_bench, GemmBenchOptions, Timing};
use kittens_runtime::cuda::CudaError;
use serde_json::Value;

/// Whether a usable NVIDIA GPU is present, and if not, why (said plainly by the caller).
pub fn probe() -> Result<String, CudaError> {
    Ok(kittens_runtime::cuda::driver::Device::open(0)?.name.clone())
}

pub fn run(s: &mut Section) -> anyhow::Result<Value> {
    let opts = GemmBenchOptions {
        shapes: vec![(4096, 4096, 4096), (8192, 8192, 8192)],
        timing: Timing::Blocked,
        ..GemmBenchOptions::default()
    };
    let gemm = kittens_kernels::by_name("gemm_bf16")?;
    crate::cmd::compile::lowered(gemm, Target::Sm90a)?;
    let r = run_gemm_bench(&opts)?;
    s.line(format!(
        "{} — gemm_bf16 (lowered tile program) vs cuBLAS, blocked timing",
        r.device
    ));
    for row in &r.rows {
        s.line(format!(
            "{:>6}^3  ours {:>6.1} TFLOP/s  cuBLAS {:>6.1}  ratio {:.3}  {}",
            row.m,
            row.ours_tflops,
            row.cublas_tflops,
            row.ratio,
            if row.passed { "correct" } else { "WRONG" }
        ));
    }
    anyhow::ensure!(
        r.rows.iter().chain(&r.checks).all(|x| x.passed),
        "gemm_bf16 failed a correctness check"
    );
    Ok(serde_json::to_value(&r)?)
}
