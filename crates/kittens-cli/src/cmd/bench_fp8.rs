//! `kittens bench gemm_fp8`: the FP8 GEMM tile program lowered for sm_90a against cuBLASLt's FP8 GEMM
//! in the same run (`kittens_runtime::cuda::bench_fp8`): e4m3 inputs, the same per-tensor scales, bf16
//! output; outputs compared with each other and with f64 on spot entries; timed against cuBLASLt with
//! its default accumulation (the ratio) and with fast accumulation (reported beside it).

use anyhow::{bail, Context};
use kittens_kernels::gemm::GemmConfig;
use kittens_runtime::cuda::bench::TileChoice;
use kittens_runtime::cuda::bench_fp8::{run_fp8_bench, Fp8BenchReport, CHECKS};
use kittens_runtime::cuda::CudaError;

use super::bench_args::{
    emit_json, failed_rows, options, print_table, utc_now, ABoxArg, Args, BLayoutArg,
};

/// The measured configurations: none (no `--block`, `--block-rows`, `--stages`, `--promote` or `--window`), the
/// registry's, as every caller runs it; else the registry's Hopper one with those changes, one per
/// block width and height listed, each checked by lowering it here (so a bad block is refused before
/// any GPU is looked for).
fn configs(a: &Args) -> anyhow::Result<Vec<GemmConfig>> {
    if a.block.is_empty()
        && a.promote.is_none()
        && a.window.is_none()
        && a.block_rows.is_empty()
        && a.stages.is_empty()
        && a.a_box == ABoxArg::Fit
    {
        return Ok(Vec::new());
    }
    let h100 = kittens_hw::Target::Sm90a.gpu().context("GPU catalog")?;
    let base = GemmConfig::fp8_for_gpu(h100);
    let widths: Vec<Option<u32>> = if a.block.is_empty() {
        vec![None]
    } else {
        a.block.iter().copied().map(Some).collect()
    };
    let heights: Vec<Option<u32>> = if a.block_rows.is_empty() {
        vec![None]
    } else {
        a.block_rows.iter().copied().map(Some).collect()
    };
    let depths: Vec<Option<u32>> = if a.stages.is_empty() {
        vec![None]
    } else {
        a.stages.iter().copied().map(Some).collect()
    };
    let mut out = Vec::new();
    for (&r, &b, &st) in heights
        .iter()
        .flat_map(|r| widths.iter().map(move |b| (r, b)))
        .flat_map(|(r, b)| depths.iter().map(move |s| (r, b, s)))
    {
        let mut cfg = base;
        if let Some(b) = b {
            cfg.block = b;
        }
        if let Some(p) = a.promote {
            cfg.promote = p;
        }
        // The ring stages that fit beside the C slabs (the configuration's 4 are for 192 columns).
        cfg.stages = match cfg.block {
            ..=128 => 6,
            129..=192 => 4,
            _ => 3,
        };
        if let Some(r) = r {
            if !matches!(r, 64 | 128) {
                bail!("--block-rows {r}: 64 or 128");
            }
            cfg.block_rows = r;
            cfg.stages = kittens_kernels::gemm::shapes::HopperTile {
                rows: r,
                cols: cfg.block,
            }
            .stages(h100);
        }
        if let Some(st) = st {
            let most = kittens_kernels::gemm::shapes::MAX_STAGES;
            if !(2..=most).contains(&st) {
                bail!("--stages {st}: 2 to {most}");
            }
            cfg.stages = st;
        }
        if a.a_box == ABoxArg::Full {
            cfg.a_rows = cfg.block_rows;
        }
        if let Some(w) = a.window {
            if w == 0 {
                bail!("--window must be at least 1");
            }
            cfg.remap = kittens_ir::GridOrder::GroupM { window: w };
        }
        let k = kittens_kernels::gemm::build(&cfg).context("building gemm_fp8 for sm_90a")?;
        kittens_codegen::lower(&k, kittens_hw::Target::Sm90a)
            .context("lowering gemm_fp8 for sm_90a")?;
        out.push(cfg);
    }
    Ok(out)
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let cfgs = configs(a)?;
    let mut opts = options(a)?;
    if opts.tiles != TileChoice::Auto {
        bail!(
            "--tiles chooses gemm_bf16's blocks; gemm_fp8 takes --block (columns of C per block)"
        );
    }
    if a.b_layout != BLayoutArg::Nk {
        bail!("gemm_fp8 takes B as N x K only (fp8 wgmma reads K-major operands): --b-layout nk");
    }
    if a.checks == "default" {
        opts.checks = CHECKS.to_vec();
    }
    let report = match run_fp8_bench(&cfgs, &opts) {
        Ok(r) => r,
        Err(e @ (CudaError::NoDriver(_) | CudaError::NoDevice(_))) => bail!(
            "no NVIDIA GPU: {e}. The FP8 GEMM's numerics run on the CPU with \
             `kittens run gemm_fp8 --backend cpu` (or `--backend hip-emu`); no speed without a GPU."
        ),
        Err(e) => return Err(e).context("FP8 GEMM benchmark on the GPU"),
    };
    let doc = document(&report);
    if emit_json(a.json.as_deref(), &doc)? {
        print(&report);
    }
    failed_rows(&report.gemm, "FP8 GEMM")
}

fn print(r: &Fp8BenchReport) {
    print_table(&r.gemm);
    println!(
        "  (cuBLAS columns: cuBLASLt FP8, default accumulation; scales {:?})",
        r.scales
    );
    for f in &r.fast_accum {
        println!(
            "  {}x{}x{}: cuBLASLt with fast accumulation {:.1} TFLOP/s, ours / it {:.3}; its C vs the default's {:.2e}, vs f64 {:.2e}, differs from ours in {} elements",
            f.m, f.n, f.k, f.cublaslt_fast_tflops, f.ratio, f.rel_err_vs_default, f.spot_err, f.differing_from_ours
        );
    }
}

fn document(r: &Fp8BenchReport) -> serde_json::Value {
    use kittens_runtime::build_info::BUILD;
    serde_json::json!({
        "benchmark": "gemm_fp8 vs cuBLASLt (C = (sa·A)·(sb·B)ᵀ, e4m3 in, bf16 out, fp32 accumulation)",
        "date": utc_now(),
        "commit": BUILD.commit,
        "dirty": BUILD.dirty,
        "report": r,
    })
}
