//! A registry kernel, configured for an AMD GPU as `kittens compile` configures it, run through the
//! emulation on the same random inputs as the CPU interpreter's run (`kittens_kernels::cpu::run`: same
//! seed, same order) and checked against the f64 reference — what `kittens run --backend hip-emu` prints.

use super::{EmuError, Emulator, HostTensor};
use kittens_hw::dtype::DType;
use kittens_hw::Gpu;
use kittens_kernels::attn_fwd::{self, AttnConfig};
use kittens_kernels::cpu::{random, Problem};
use kittens_kernels::gemm_bf16::{self, GemmConfig};
use kittens_kernels::reference::{self, ErrorReport};
use kittens_kernels::KernelError;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// Largest `rel_err` a run may show and still pass: the tolerance of the interpreter's runs (the CLI's
/// demo suite and the kernel tests use 1e-2 for bf16 inputs with fp32 accumulation).
pub const HIP_EMU_TOLERANCE: f64 = 1e-2;

/// Most multiply-adds one emulated run may do: every HIP thread is a host thread, so the emulation runs
/// about 10^7 of them per second; 2^31 is a few minutes.
pub const EMU_MAX_MACS: u64 = 1 << 31;

/// What `kittens run --backend hip-emu` reports: the CPU run's error measures, and `passed`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EmuReport {
    pub kernel: String,
    pub target: &'static str,
    /// The GPU the kernel was configured for (its tiles, staging and LDS budget).
    pub configured_for: &'static str,
    pub shape: serde_json::Value,
    #[serde(flatten)]
    pub error: ErrorReport,
    pub tolerance: f64,
    pub passed: bool,
    pub blocks: u64,
    pub waves_per_block: u32,
    pub compile_seconds: f64,
    pub run_seconds: f64,
    pub reference_seconds: f64,
}

fn bits(v: &[f32]) -> Vec<u8> {
    // The values are bf16 already (cpu::random rounds them): the upper half of each f32.
    v.iter()
        .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
        .collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|p| f32::from_bits((u16::from_le_bytes([p[0], p[1]]) as u32) << 16))
        .collect()
}

/// Bf16 bits of NaN for every element: an element the kernel does not write shows as an error.
fn nan_bf16(len: usize) -> Vec<u8> {
    std::iter::repeat_n([0xc0u8, 0x7f], len).flatten().collect()
}

fn too_big(kernel: &str, what: String) -> EmuError {
    EmuError::Launch {
        kernel: kernel.into(),
        msg: what,
    }
}

/// Product of `dims`, or an error naming the limit.
fn checked_product(kernel: &str, dims: &[usize]) -> Result<u64, EmuError> {
    dims.iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
        .filter(|&n| n <= EMU_MAX_MACS)
        .ok_or_else(|| {
            too_big(
                kernel,
                format!("{dims:?} is over the emulation's budget of {EMU_MAX_MACS} multiply-adds"),
            )
        })
}

/// Run registry kernel `name` (`gemm_bf16`, `attn_fwd`) configured for `gpu` at `p`'s sizes (attention
/// also takes `p`'s head dim, causality and layout; tile sizes are the GPU's), on `p.seed`'s inputs.
pub fn run_registry(name: &str, p: &Problem, gpu: &Gpu) -> Result<EmuReport, EmuError> {
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let kernel_err = |e: KernelError| too_big(name, e.to_string());
    match name {
        "gemm_bf16" => {
            checked_product(name, &[p.m, p.n, p.k])?;
            let cfg = GemmConfig::for_gpu(gpu);
            let kernel = gemm_bf16::build(&cfg).map_err(kernel_err)?;
            let t0 = Instant::now();
            let emu = Emulator::build(&kernel, gpu.arch)?;
            let compile_seconds = t0.elapsed().as_secs_f64();
            let a = random(&mut rng, p.m * p.k, DType::Bf16);
            let b = random(&mut rng, p.n * p.k, DType::Bf16);
            let mut t = vec![
                HostTensor::Data(bits(&a)),
                HostTensor::Data(bits(&b)),
                HostTensor::Data(nan_bf16(p.m * p.n)),
            ];
            let params = [p.m, p.n, p.k].map(|x| x as i64);
            let t1 = Instant::now();
            emu.run(&params, &mut t, None)?;
            let run_seconds = t1.elapsed().as_secs_f64();
            let HostTensor::Data(c) = &t[2] else {
                unreachable!("C is a data tensor")
            };
            let t2 = Instant::now();
            let r = reference::gemm_abt(&a, &b, p.m, p.n, p.k);
            let shape = serde_json::json!({
                "m": p.m, "n": p.n, "k": p.k, "block": cfg.block, "k_step": cfg.k_step,
                "schedule": kernel.schedule.name(),
            });
            Ok(report(
                &emu,
                gpu,
                shape,
                reference::compare(&floats(c), &r),
                &params,
                [compile_seconds, run_seconds, t2.elapsed().as_secs_f64()],
            )?)
        }
        "gemm_fp8" => run_gemm_fp8(p, gpu, &mut rng),
        "attn_fwd" => {
            let sh = p.attn;
            checked_product(
                name,
                &[sh.batch, sh.heads, sh.seq, sh.seq, sh.dim.saturating_mul(2)],
            )?;
            let cfg = AttnConfig {
                dim: u32::try_from(sh.dim)
                    .map_err(|_| too_big(name, "--dim is too large".into()))?,
                causal: p.causal,
                layout: sh.layout,
                ..AttnConfig::default()
            };
            let kernel = attn_fwd::build(&cfg).map_err(kernel_err)?;
            let t0 = Instant::now();
            let emu = Emulator::build(&kernel, gpu.arch)?;
            let compile_seconds = t0.elapsed().as_secs_f64();
            let q = random(&mut rng, sh.len(sh.heads), DType::Bf16);
            let k = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let v = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let mut t = vec![
                HostTensor::Data(bits(&q)),
                HostTensor::Data(bits(&k)),
                HostTensor::Data(bits(&v)),
                HostTensor::Data(nan_bf16(sh.len(sh.heads))),
            ];
            let params = [sh.batch, sh.heads, sh.heads_kv, sh.seq].map(|x| x as i64);
            let t1 = Instant::now();
            emu.run(&params, &mut t, None)?;
            let run_seconds = t1.elapsed().as_secs_f64();
            let HostTensor::Data(o) = &t[3] else {
                unreachable!("O is a data tensor")
            };
            let t2 = Instant::now();
            let r = reference::attention(&q, &k, &v, &sh, p.causal);
            let shape = serde_json::json!({"attn": sh, "causal": p.causal, "q_rows": cfg.q_rows, "kv_block": cfg.kv_block});
            Ok(report(
                &emu,
                gpu,
                shape,
                reference::compare(&floats(o), &r),
                &params,
                [compile_seconds, run_seconds, t2.elapsed().as_secs_f64()],
            )?)
        }
        other => Err(kernel_err(KernelError::Unknown(other.into()))),
    }
}

/// `gemm_fp8` as `kittens compile` configures it for `gpu` (`GemmConfig::fp8_for_gpu`: the target's
/// fp8 format, per-tensor scales, bf16 output), on the CPU run's inputs: A and B uniform in [-1, 1)
/// rounded to that format, then the two scales in [0.5, 2).
fn run_gemm_fp8(p: &Problem, gpu: &Gpu, rng: &mut SmallRng) -> Result<EmuReport, EmuError> {
    use kittens_ir::numerics::{to_bytes, Rounding};
    let name = "gemm_fp8";
    checked_product(name, &[p.m, p.n, p.k])?;
    let cfg = GemmConfig::fp8_for_gpu(gpu);
    let kernel = gemm_bf16::build(&cfg).map_err(|e| too_big(name, e.to_string()))?;
    let t0 = Instant::now();
    let emu = Emulator::build(&kernel, gpu.arch)?;
    let compile_seconds = t0.elapsed().as_secs_f64();
    let dt = cfg.types.input;
    let a = random(rng, p.m * p.k, dt);
    let b = random(rng, p.n * p.k, dt);
    let (sa, sb) = (rng.gen_range(0.5f32..2.0), rng.gen_range(0.5f32..2.0));
    let mut t = vec![
        HostTensor::Data(to_bytes(&a, dt, Rounding::Rtne)),
        HostTensor::Data(to_bytes(&b, dt, Rounding::Rtne)),
        HostTensor::Data(sa.to_le_bytes().to_vec()),
        HostTensor::Data(sb.to_le_bytes().to_vec()),
        HostTensor::Data(nan_bf16(p.m * p.n)),
    ];
    let params = [p.m, p.n, p.k].map(|x| x as i64);
    let t1 = Instant::now();
    emu.run(&params, &mut t, None)?;
    let run_seconds = t1.elapsed().as_secs_f64();
    let HostTensor::Data(c) = &t[4] else {
        unreachable!("C is a data tensor")
    };
    let t2 = Instant::now();
    let mut r = reference::gemm_abt(&a, &b, p.m, p.n, p.k);
    let scales = cfg.types.scales.expect("fp8_for_gpu has scales");
    reference::scale_rows_cols(&mut r, p.n, scales, &[sa], &[sb]);
    let shape = serde_json::json!({
        "m": p.m, "n": p.n, "k": p.k, "block": cfg.block, "k_step": cfg.k_step,
        "schedule": kernel.schedule.name(), "input": dt, "output": cfg.types.output,
    });
    report(
        &emu,
        gpu,
        shape,
        reference::compare(&floats(c), &r),
        &params,
        [compile_seconds, run_seconds, t2.elapsed().as_secs_f64()],
    )
}

fn report(
    emu: &Emulator,
    gpu: &Gpu,
    shape: serde_json::Value,
    error: ErrorReport,
    params: &[i64],
    [compile_seconds, run_seconds, reference_seconds]: [f64; 3],
) -> Result<EmuReport, EmuError> {
    Ok(EmuReport {
        kernel: emu.kernel().name.clone(),
        target: emu.arch().target(),
        configured_for: gpu.name,
        shape,
        // NaN compares false: an unwritten element fails the run.
        passed: error.rel_err <= HIP_EMU_TOLERANCE,
        error,
        tolerance: HIP_EMU_TOLERANCE,
        blocks: emu.blocks(params)?,
        waves_per_block: emu.kernel().waves,
        compile_seconds,
        run_seconds,
        reference_seconds,
    })
}
