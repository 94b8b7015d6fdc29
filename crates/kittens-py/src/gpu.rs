//! The CUDA path: the caller's device pointers and stream go to `kittens_runtime::cuda::caller` (the
//! GEMM) and `caller_attn` (the attention forward), which launch the lowered sm_90a kernels in the
//! device's primary context (PyTorch's). CUDA tensors never take a silent trip through the CPU.

use kittens_hw::Target;
use kittens_kernels::attn_fwd::{self, AttnConfig};
use kittens_kernels::reference::AttnShape;
use kittens_runtime::cuda::caller::{self, GemmPointers, KernelLoad};
use kittens_runtime::cuda::caller_attn::{self, AttnKernelConfig, AttnPointers};
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

/// Enqueues the attention forward on `stream` of device `ordinal`; returns the kernel load on the first
/// call of a configuration (head dim, mask, layout) on a device.
///
/// # Safety
/// As for [`matmul`]: live device arrays of the checked shapes, kept alive until the stream has run.
pub unsafe fn attention(
    p: &Attention,
    causal: bool,
    ordinal: i32,
    stream: u64,
) -> Result<Option<KernelLoad>, ApiError> {
    let ptrs = AttnPointers {
        q: p.q,
        k: p.k,
        v: p.v,
        o: p.o,
        shape: AttnShape {
            batch: p.batch,
            heads: p.heads,
            heads_kv: p.heads_kv,
            seq: p.seq,
            dim: p.dim,
            layout: p.layout,
        },
        causal,
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
/// schedule), at the problem's head dimension, mask and memory order, lowered for sm_90a.
fn lowered_attention(cfg: &AttnKernelConfig) -> Result<kittens_codegen::Lowered, CudaError> {
    let invalid = |e: String| CudaError::Invalid(e);
    let entry = kittens_kernels::by_name("attn_fwd").map_err(|e| invalid(e.to_string()))?;
    let gpu = kittens_hw::gpu("h100").map_err(|e| invalid(e.to_string()))?;
    let dim = u32::try_from(cfg.dim).map_err(|_| invalid(format!("head dim {}", cfg.dim)))?;
    let k = attn_fwd::build(&AttnConfig {
        dim,
        causal: cfg.causal,
        layout: cfg.layout,
        ..AttnConfig::for_gpu(gpu)
    })
    .map_err(|e| invalid(format!("building {} for sm_90a: {e}", entry.name)))?;
    kittens_codegen::lower(&k, Target::Sm90a)
        .map_err(|e| invalid(format!("lowering {}: {e}", entry.name)))
}
