//! Running a kernel on the CPU interpreter on random inputs and checking it against its f64 reference —
//! what `kittens run --backend cpu` and the tests do.

use crate::attn_fwd::{AttnConfig, AttnLayout};
use crate::gemm_bf16::GemmConfig;
use crate::reference::{self, AttnShape, ErrorReport};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::{interp, Kernel};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

/// Problem sizes and tile choices for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub attn: AttnShape,
    pub causal: bool,
    pub gemm: GemmConfig,
    /// Tile sizes of the attention kernel; `dim` is taken from `attn.dim`.
    pub attn_cfg: AttnConfig,
    pub seed: u64,
}

impl Default for Problem {
    fn default() -> Self {
        Problem {
            m: 256,
            n: 256,
            k: 192,
            attn: AttnShape {
                batch: 1,
                heads: 4,
                heads_kv: 2,
                seq: 256,
                dim: 64,
                layout: AttnLayout::Bshd,
            },
            causal: false,
            gemm: GemmConfig::default(),
            attn_cfg: AttnConfig {
                q_rows: 16,
                kv_block: 32,
                ..AttnConfig::default()
            },
            seed: 0,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub kernel: String,
    pub shape: serde_json::Value,
    #[serde(flatten)]
    pub error: ErrorReport,
    pub blocks: u64,
    pub waves_per_block: u32,
    pub interp_seconds: f64,
    pub reference_seconds: f64,
}

/// Uniform values in [-1, 1) rounded to `dtype` (so the reference sees exactly what the kernel stores).
pub fn random(rng: &mut SmallRng, len: usize, dtype: DType) -> Vec<f32> {
    (0..len)
        .map(|_| round(rng.gen_range(-1.0f32..1.0), dtype, Rounding::Rtne))
        .collect()
}

fn run_interp(
    k: &Kernel,
    params: &[i64],
    tensors: &mut [Vec<f32>],
) -> Result<(interp::RunStats, f64), KernelError> {
    let t = Instant::now();
    let stats = interp::run(k, params, tensors)?;
    Ok((stats, t.elapsed().as_secs_f64()))
}

fn attn_config(p: &Problem) -> AttnConfig {
    let sh = p.attn;
    AttnConfig {
        dim: sh.dim as u32,
        causal: p.causal,
        layout: sh.layout,
        ..p.attn_cfg
    }
}

/// The kernel `run` executes for `p`.
pub fn build(name: &str, p: &Problem) -> Result<Kernel, KernelError> {
    match name {
        "gemm_bf16" => crate::gemm_bf16::build(&p.gemm),
        "attn_fwd" => crate::attn_fwd::build(&attn_config(p)),
        _ => Err(KernelError::Unknown(name.into())),
    }
}

/// Builds kernel `name` for `p`, runs it on the interpreter and compares with the f64 reference.
pub fn run(name: &str, p: &Problem) -> Result<RunReport, KernelError> {
    let mut rng = SmallRng::seed_from_u64(p.seed);
    match name {
        "gemm_bf16" => {
            let k = build(name, p)?;
            let a = random(&mut rng, p.m * p.k, DType::Bf16);
            let b = random(&mut rng, p.n * p.k, DType::Bf16);
            let mut t = vec![a, b, vec![0.0; p.m * p.n]];
            let (stats, secs) = run_interp(&k, &[p.m as i64, p.n as i64, p.k as i64], &mut t)?;
            let r0 = Instant::now();
            let r = reference::gemm_abt(&t[0], &t[1], p.m, p.n, p.k);
            let shape = serde_json::json!({
                "m": p.m, "n": p.n, "k": p.k, "block": p.gemm.block, "k_step": p.gemm.k_step,
                "schedule": k.schedule.name(),
            });
            Ok(report(
                &k,
                shape,
                reference::compare(&t[2], &r),
                stats,
                secs,
                r0.elapsed().as_secs_f64(),
            ))
        }
        "attn_fwd" => {
            let sh = p.attn;
            let cfg = attn_config(p);
            let k = build(name, p)?;
            let q = random(&mut rng, sh.len(sh.heads), DType::Bf16);
            let kk = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let v = random(&mut rng, sh.len(sh.heads_kv), DType::Bf16);
            let mut t = vec![q, kk, v, vec![0.0; sh.len(sh.heads)]];
            let params = [sh.batch, sh.heads, sh.heads_kv, sh.seq].map(|x| x as i64);
            let (stats, secs) = run_interp(&k, &params, &mut t)?;
            let r0 = Instant::now();
            let r = reference::attention(&t[0], &t[1], &t[2], &sh, p.causal);
            let shape = serde_json::json!({"attn": sh, "causal": p.causal, "q_rows": cfg.q_rows, "kv_block": cfg.kv_block});
            Ok(report(
                &k,
                shape,
                reference::compare(&t[3], &r),
                stats,
                secs,
                r0.elapsed().as_secs_f64(),
            ))
        }
        _ => Err(KernelError::Unknown(name.into())),
    }
}

fn report(
    k: &Kernel,
    shape: serde_json::Value,
    error: ErrorReport,
    s: interp::RunStats,
    secs: f64,
    rsecs: f64,
) -> RunReport {
    RunReport {
        kernel: k.name.clone(),
        shape,
        error,
        blocks: s.blocks,
        waves_per_block: s.waves_per_block,
        interp_seconds: secs,
        reference_seconds: rsecs,
    }
}
