//! The CUDA path: the caller's device pointers and stream go to `kittens_runtime::cuda::caller` (the
//! GEMM) and `caller_attn` (the attention forward), which launch the lowered sm_90a kernels in the
//! device's primary context (PyTorch's). CUDA tensors never take a silent trip through the CPU.

use kittens_hw::Target;
use kittens_kernels::attn_bwd::Causal;
use kittens_kernels::attn_fwd::{self, AttnConfig};
use kittens_kernels::reference::AttnShape;
use kittens_runtime::cuda::caller::{self, GemmPointers, KernelLoad};
use kittens_runtime::cuda::caller_attn::{self, AttnKernelConfig, AttnPointers};
use kittens_runtime::cuda::caller_mem;
use kittens_runtime::cuda::gemm_kernel::lower_tile;
use kittens_runtime::cuda::CudaError;

use crate::view::{ApiError, Attention, Matmul};

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

/// Enqueues `out = a @ b` on `stream` of device `ordinal`; returns the kernel load on a device's first call.
///
/// # Safety
/// The addresses in `p` must be live device arrays of the checked shapes on that device, kept alive by
/// the caller until the stream has run the launch (PyTorch's caching allocator does this for tensors used
/// on their own current stream).
pub unsafe fn matmul(
    p: &Matmul,
    ordinal: i32,
    stream: u64,
) -> Result<Option<KernelLoad>, ApiError> {
    let ptrs = GemmPointers {
        a: p.a,
        // b = w.T: the kernel's B (N×K row-major) is w, at b's own address; or b row-major (K×N).
        b: p.b,
        c: p.c,
        m: p.m,
        n: p.n,
        k: p.k,
        b_layout: p.b_layout,
    };
    // SAFETY: forwarded from the caller.
    unsafe { caller::gemm_bf16_abt(ordinal, stream, &ptrs, lower_tile) }.map_err(cuda_error)
}

/// Enqueues the attention forward on `stream` of device `ordinal`, with the key split where the
/// planner says it pays (decoding: few query rows against a long cache); returns the kernel loads of
/// the first call of a configuration (head dim, mask, layout, split) on a device.
///
/// # Safety
/// As for [`matmul`]: live device arrays of the checked shapes, kept alive until the stream has run.
pub unsafe fn attention(
    p: &Attention,
    causal: Causal,
    ordinal: i32,
    stream: u64,
) -> Result<Vec<KernelLoad>, ApiError> {
    let ptrs = AttnPointers {
        q: p.q,
        k: p.k,
        v: p.v,
        o: p.o,
        lse: p.lse,
        seq_kv: p.seq_kv,
        bottom_right: causal == Causal::BottomRight,
        shape: AttnShape {
            batch: p.batch,
            heads: p.heads,
            heads_kv: p.heads_kv,
            seq: p.seq,
            dim: p.dim,
            layout: p.layout,
        },
        causal: causal != Causal::No,
        kv_splits: p.kv_splits,
    };
    // SAFETY: forwarded from the caller.
    unsafe { caller_attn::attention_fwd(ordinal, stream, &ptrs, lowered_attention) }.map_err(|e| {
        match e {
            CudaError::Invalid(m) => ApiError::Value(format!("kittens.attention on CUDA: {m}")),
            other => cuda_error(other),
        }
    })
}

/// The registry's `attn_fwd` as built for the H100 (`AttnConfig::for_gpu`: the producer/consumer
/// schedule), at the problem's head dimension, mask, memory order and key split, lowered for sm_90a;
/// or, for the merge launch of a split, its merge (`attn_fwd::split::build_merge`).
fn lowered_attention(cfg: &AttnKernelConfig) -> Result<kittens_codegen::Lowered, CudaError> {
    let invalid = |e: String| CudaError::Invalid(e);
    let entry = kittens_kernels::by_name("attn_fwd").map_err(|e| invalid(e.to_string()))?;
    let gpu = kittens_hw::gpu("h100").map_err(|e| invalid(e.to_string()))?;
    let dim = u32::try_from(cfg.dim).map_err(|_| invalid(format!("head dim {}", cfg.dim)))?;
    let config = AttnConfig {
        dim,
        causal: cfg.causal,
        bottom_right: cfg.bottom_right,
        layout: cfg.layout,
        lse: cfg.lse,
        kv_splits: cfg.kv_splits,
        ..AttnConfig::for_gpu(gpu)
    };
    let k = if cfg.merge {
        attn_fwd::split::build_merge(&config)
    } else {
        attn_fwd::build(&config)
    }
    .map_err(|e| invalid(format!("building {} for sm_90a: {e}", entry.name)))?;
    kittens_codegen::lower(&k, Target::Sm90a)
        .map_err(|e| invalid(format!("lowering {}: {e}", entry.name)))
}

/// Enqueues dropout + residual + layernorm on `stream` of device `ordinal`; returns the kernel load on
/// the first call of a configuration (D, p, eps) on a device.
///
/// # Safety
/// As for [`matmul`]: live device arrays of the checked shapes, kept alive until the stream has run.
pub unsafe fn layernorm(
    p: &crate::view_mem::LayerNorm,
    norm: &kittens_kernels::problem::NormShape,
    eps: f32,
    ordinal: i32,
    stream: u64,
) -> Result<Option<KernelLoad>, ApiError> {
    use kittens_kernels::layernorm::{problem::words, LayerNormConfig};
    let gpu = kittens_hw::gpu("h100").map_err(|e| ApiError::Runtime(e.to_string()))?;
    let dim = u32::try_from(p.dim).map_err(|_| ApiError::Value(format!("D = {}", p.dim)))?;
    let cfg = LayerNormConfig {
        eps,
        ..LayerNormConfig::for_gpu(gpu, dim, norm.p)
    };
    let rows = i64::try_from(p.rows)
        .ok()
        .filter(|r| *r <= i64::from(i32::MAX))
        .ok_or_else(|| ApiError::Value(format!("{} rows (at most 2^31 - 1)", p.rows)))?;
    let n = (p.rows as u64)
        .saturating_mul(p.dim as u64)
        .saturating_mul(2);
    let d = p.dim as u64 * 2;
    let tensors = [
        ("x", p.x, n),
        ("residual", p.residual, n),
        ("weight", p.weight, d),
        ("bias", p.bias, d),
        ("out", p.out, 2 * n),
    ];
    let [s0, s1] = words(norm.dropout_seed);
    let [o0, o1] = words(norm.offset);
    let params = [
        ("rows", rows),
        ("seed_lo", s0),
        ("seed_hi", s1),
        ("offset_lo", o0),
        ("offset_hi", o1),
    ];
    let call = caller_mem::StripCall {
        key: format!("layernorm {cfg:?}"),
        tensors: &tensors,
        params: &params,
    };
    let lower = || -> Result<kittens_codegen::Lowered, CudaError> {
        let k = kittens_kernels::layernorm::build(&cfg)
            .map_err(|e| CudaError::Invalid(format!("building layernorm for sm_90a: {e}")))?;
        kittens_codegen::lower(&k, Target::Sm90a)
            .map_err(|e| CudaError::Invalid(format!("lowering layernorm: {e}")))
    };
    // The configuration's checks (D, p) before the driver is touched.
    kittens_kernels::layernorm::build(&cfg).map_err(|e| ApiError::Value(e.to_string()))?;
    // SAFETY: forwarded from the caller.
    unsafe { caller_mem::launch_strip(ordinal, stream, &call, &lower) }.map_err(cuda_error)
}

/// Enqueues the rotary embedding on `stream` of device `ordinal` (`out` may be `q`).
///
/// # Safety
/// As for [`matmul`].
pub unsafe fn rotary(
    p: &crate::view_mem::Rotary,
    interleaved: bool,
    ordinal: i32,
    stream: u64,
) -> Result<Option<KernelLoad>, ApiError> {
    use kittens_kernels::rotary::RotaryConfig;
    let dim = u32::try_from(p.dim).map_err(|_| ApiError::Value(format!("D = {}", p.dim)))?;
    let cfg = RotaryConfig::new(dim, p.layout, interleaved);
    kittens_kernels::rotary::build(&cfg).map_err(|e| ApiError::Value(e.to_string()))?;
    let int = |name: &str, v: usize| {
        i64::try_from(v)
            .ok()
            .filter(|x| *x <= i64::from(i32::MAX))
            .ok_or_else(|| ApiError::Value(format!("{name} = {v} (at most 2^31 - 1)")))
    };
    let params = [
        ("batch", int("B", p.batch)?),
        ("heads", int("H", p.heads)?),
        ("seq", int("N", p.seq)?),
    ];
    let n = (p.batch as u64)
        .saturating_mul(p.heads as u64)
        .saturating_mul(p.seq as u64)
        .saturating_mul(p.dim as u64)
        .saturating_mul(2);
    let t = (p.seq as u64).saturating_mul(p.dim as u64);
    let tensors = [
        ("x", p.q, n),
        ("cos", p.cos, t),
        ("sin", p.sin, t),
        ("out", p.out, n),
    ];
    let call = caller_mem::StripCall {
        key: format!("rotary {cfg:?}"),
        tensors: &tensors,
        params: &params,
    };
    let lower = || -> Result<kittens_codegen::Lowered, CudaError> {
        let k = kittens_kernels::rotary::build(&cfg)
            .map_err(|e| CudaError::Invalid(format!("building rotary for sm_90a: {e}")))?;
        kittens_codegen::lower(&k, Target::Sm90a)
            .map_err(|e| CudaError::Invalid(format!("lowering rotary: {e}")))
    };
    // SAFETY: forwarded from the caller.
    unsafe { caller_mem::launch_strip(ordinal, stream, &call, &lower) }.map_err(cuda_error)
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
