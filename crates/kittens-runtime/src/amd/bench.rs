//! `kittens bench gemm_bf16 --target gfx942|gfx950` on an AMD GPU: the code object `kittens compile`
//! builds, launched through the HIP runtime, against the vendor GEMM (hipBLASLt, else rocBLAS,
//! [`super::blas`]) on the same bf16 inputs in the same run, timed with HIP events, launches of the
//! two interleaved. The kernel arguments and the launch geometry come from the functions the ISA
//! emulator's runs use ([`crate::runner::isa_emu`]), so the emulator tests this launch contract.
//! Correctness: every output against the vendor's, and both against f64 on spot rows.

use super::blas::{BlasError, VendorGemm};
use super::hip::{HipError, HipRuntime};
use crate::runner::isa_emu::{arg_values, blocks, build, tensor_bytes};
use crate::runner::{Job, RunError};
use kittens_amdsim::kernarg::pack;
use kittens_hw::Target;
use kittens_ir::numerics::from_bytes;
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};
use kittens_kernels::problem::KernelProblem;
use rand::rngs::SmallRng;
use rand::SeedableRng;

#[derive(Debug, thiserror::Error)]
pub enum AmdBenchError {
    #[error(transparent)]
    Hip(#[from] HipError),
    #[error("vendor GEMM: {0}")]
    Blas(#[from] BlasError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Kernel(#[from] kittens_kernels::KernelError),
}

/// One timed shape.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AmdGemmRow {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ours_ms: f64,
    pub vendor_ms: f64,
    pub ours_tflops: f64,
    pub vendor_tflops: f64,
    /// ours / vendor throughput.
    pub ratio: f64,
    /// Relative L2 error against f64 on the spot rows: ours and the vendor's.
    pub ours_rel_err: f64,
    pub vendor_rel_err: f64,
    /// Largest |ours - vendor| / max |vendor| over the whole output.
    pub max_diff_vs_vendor: f64,
    /// Ours within twice the vendor's f64 error plus a floor of 2^-9 (bf16's half ulp).
    pub passed: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AmdGemmReport {
    pub target: Target,
    pub vendor: &'static str,
    pub vendor_path: String,
    pub hip_path: String,
    pub iters: usize,
    pub rows: Vec<AmdGemmRow>,
}

/// Rows of C the f64 spot check computes: the first, the last and two in between.
fn spot_rows(m: usize) -> Vec<usize> {
    let mut v = vec![0, m / 3, (2 * m) / 3, m - 1];
    v.dedup();
    v
}

/// Relative L2 error of `got` against the f64 product on `rows` (row-major A M×K, B N×K).
fn spot_error(got: &[f32], a: &[f32], b: &[f32], (n, k): (usize, usize), rows: &[usize]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for &r in rows {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|x| a[r * k + x] as f64 * b[j * k + x] as f64)
                .sum();
            num += (got[r * n + j] as f64 - want).powi(2);
            den += want * want;
        }
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// Benchmark `gemm_bf16` for `target` at `shapes` against the vendor GEMM: `warmup` untimed rounds,
/// then `iters` interleaved launches of each (ours, vendor, ours, ...), each timed on its own.
pub fn run_amd_gemm_bench(
    target: Target,
    shapes: &[(usize, usize, usize)],
    warmup: usize,
    iters: usize,
) -> Result<AmdGemmReport, AmdBenchError> {
    let rt = HipRuntime::load()?;
    let vendor = VendorGemm::load(&rt)?;
    let arch = target.arch().ok_or(RunError::NotAmd(target))?;
    let mut rows = Vec::new();
    for &(m, n, k) in shapes {
        let mut p = GemmProblem::new(GemmKind::Bf16, m, n, k);
        p.run.seed = (m ^ n ^ k) as u64;
        let plan = p.plan(target)?;
        let kernel = p.build(target)?;
        let inputs = p.draw(
            &kernel,
            &plan.launch,
            &mut SmallRng::seed_from_u64(p.run.seed),
        );
        let job = Job {
            kernel: &kernel,
            launch: &plan.launch,
            inputs: &inputs,
        };
        let built = build(&kernel, target, arch)?;
        let tensors = tensor_bytes(&job);
        let bufs = tensors
            .iter()
            .map(|t| rt.upload(t))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<u64> = bufs.iter().map(|b| b.addr()).collect();
        let kernarg = pack(&built.co, &arg_values(&job, &built.lowered, &addrs)?)
            .map_err(|e| RunError::CodeObject(e.to_string()))?;
        let grid = blocks(&job, &built.lowered)?;
        let module = rt.load_module(&built.code_object, &built.co.name)?;
        let ours = || {
            module.launch(
                &kernarg,
                built.co.kernarg_segment_size as usize,
                grid,
                built.lowered.threads,
            )
        };
        let c_vendor = rt.zeroed(tensors[2].len())?;
        let prepared = vendor.prepare(m, n, k)?;
        let theirs = || vendor.gemm(&prepared, addrs[0], addrs[1], c_vendor.addr());
        for _ in 0..warmup.max(1) {
            ours()?;
            theirs()?;
        }
        rt.synchronize()?;
        let (mut t_ours, mut t_vendor) = (Vec::new(), Vec::new());
        for _ in 0..iters.max(1) {
            t_ours.push(rt.time_ms(ours)? as f64);
            t_vendor.push(rt.time_ms(theirs)? as f64);
        }
        vendor.release(prepared);
        let dtype = kernel.globals[2].dtype;
        let got = from_bytes(&bufs[2].download()?, dtype).unwrap_or_default();
        let want = from_bytes(&c_vendor.download()?, dtype).unwrap_or_default();
        let spots = spot_rows(m);
        let ours_rel_err = spot_error(&got, &inputs[0], &inputs[1], (n, k), &spots);
        let vendor_rel_err = spot_error(&want, &inputs[0], &inputs[1], (n, k), &spots);
        let scale = want.iter().fold(0f64, |s, &x| s.max((x as f64).abs()));
        let max_diff = got
            .iter()
            .zip(&want)
            .fold(0f64, |s, (&x, &y)| s.max((x as f64 - y as f64).abs()))
            / scale.max(f64::MIN_POSITIVE);
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (ours_ms, vendor_ms) = (median(&mut t_ours), median(&mut t_vendor));
        let flop = 2.0 * m as f64 * n as f64 * k as f64;
        rows.push(AmdGemmRow {
            m,
            n,
            k,
            ours_ms,
            vendor_ms,
            ours_tflops: flop / ours_ms / 1e9,
            vendor_tflops: flop / vendor_ms / 1e9,
            ratio: vendor_ms / ours_ms,
            ours_rel_err,
            vendor_rel_err,
            max_diff_vs_vendor: max_diff,
            passed: got.len() == want.len()
                && ours_rel_err.is_finite()
                && ours_rel_err <= 2.0 * vendor_rel_err + 1.0 / 512.0,
        });
    }
    Ok(AmdGemmReport {
        target,
        vendor: vendor.name,
        vendor_path: vendor.path.clone(),
        hip_path: rt.path.clone(),
        iters,
        rows,
    })
}
