//! The attention backward on CUDA (`kittens_runtime::cuda::caller_attn_bwd`: FlashAttention-3's atomic
//! form or the two-launch form) and the report line of a kernel's first load; every other kernel reaches
//! CUDA tensors through the prepared calls ([`crate::prepared`]).

use kittens_hw::Target;
use kittens_runtime::cuda::caller::KernelLoad;
use kittens_runtime::cuda::CudaError;

use crate::view::ApiError;

fn cuda_error(e: CudaError) -> ApiError {
    match e {
        CudaError::Invalid(m) => ApiError::Value(m),
        other => ApiError::Runtime(format!("CUDA: {other}")),
    }
}

/// What a verbose caller is told about the first launch on a device.
pub fn describe(load: &KernelLoad) -> String {
    let c = &load.compile;
    format!(
        "kittens: {} on {}: {} in {:.2} s (NVRTC {}, {} registers, {} B spills, {} B dynamic shared)",
        load.kernel,
        load.device,
        if c.cached {
            "loaded from the disk cache"
        } else {
            "compiled"
        },
        load.seconds,
        c.nvrtc_version,
        c.registers,
        c.spill_stores,
        c.dynamic_shared_bytes
    )
}

/// Enqueues the attention backward (`attn_bwd`'s Hopper launches of `p.form`) on `stream` of device `ordinal`
/// over raw device addresses; returns the kernel loads of a configuration's first call on a device.
///
/// # Safety
/// The addresses must be live device arrays of `p.shape` on that device (the runtime checks each range
/// against the driver's allocation before launching), kept alive until the stream has run.
pub unsafe fn attention_backward(
    p: &kittens_runtime::cuda::caller_attn_bwd::AttnBwdPointers,
    ordinal: i32,
    stream: u64,
) -> Result<Vec<KernelLoad>, ApiError> {
    use kittens_runtime::cuda::caller_attn_bwd::attention_bwd;
    // SAFETY: forwarded from the caller.
    unsafe { attention_bwd(ordinal, stream, p, lowered_attention_bwd) }.map_err(|e| match e {
        CudaError::Invalid(m) => {
            ApiError::Value(format!("kittens._attention_backward on CUDA: {m}"))
        }
        other => cuda_error(other),
    })
}

/// `attn_bwd`'s Hopper program `cfg.schedule` at the configuration, lowered for sm_90a.
fn lowered_attention_bwd(
    cfg: &kittens_runtime::cuda::caller_attn_bwd::AttnBwdKernelConfig,
) -> Result<kittens_codegen::Lowered, CudaError> {
    use kittens_kernels::attn_bwd::{build, BwdConfig, BwdTurns};
    let invalid = |e: String| CudaError::Invalid(e);
    let gpu = kittens_hw::gpu("h100").map_err(|e| invalid(e.to_string()))?;
    let dim = u32::try_from(cfg.dim).map_err(|_| invalid(format!("head dim {}", cfg.dim)))?;
    let base = BwdConfig::for_gpu(gpu);
    // Measurement knob (docs/performance.md, "attn_bwd"): the key blocks' warpgroup turns, `none|scores|both`.
    let turns = match std::env::var("KITTENS_ATTN_BWD_TURNS").as_deref() {
        Ok("none") => BwdTurns::None,
        Ok("scores") => BwdTurns::Scores,
        Ok("both") => BwdTurns::Both,
        Ok(other) => {
            return Err(invalid(format!(
                "KITTENS_ATTN_BWD_TURNS = {other:?}: none, scores or both"
            )))
        }
        Err(_) => base.turns,
    };
    let k = build(&BwdConfig {
        schedule: cfg.schedule,
        dim,
        causal: cfg.causal,
        layout: cfg.layout,
        turns,
        ..base
    })
    .map_err(|e| invalid(format!("building attn_bwd for sm_90a: {e}")))?;
    kittens_codegen::lower(&k, Target::Sm90a)
        .map_err(|e| invalid(format!("lowering attn_bwd: {e}")))
}
