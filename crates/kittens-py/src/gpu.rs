//! The CUDA path: the caller's device pointers and stream go to `kittens_runtime::cuda::caller`, which
//! launches the lowered sm_90a GEMM in the device's primary context (PyTorch's). The sm_90a attention
//! is not launched on caller-owned tensors yet, so CUDA attention is an error, never a silent trip
//! through the CPU.

use kittens_hw::Target;
use kittens_runtime::cuda::caller::{self, GemmPointers, KernelLoad};
use kittens_runtime::cuda::CudaError;

use crate::view::{ApiError, Matmul};

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
        // b = w.T: the kernel's B (N×K row-major) is w, at b's own address.
        b: p.b,
        c: p.c,
        m: p.m,
        n: p.n,
        k: p.k,
    };
    // SAFETY: forwarded from the caller.
    unsafe { caller::gemm_bf16_abt(ordinal, stream, &ptrs, lowered_gemm) }.map_err(cuda_error)
}

/// The registry's `gemm_bf16`, built for sm_90a and lowered (what `kittens compile gemm_bf16 --target
/// sm_90a` compiles).
fn lowered_gemm() -> Result<kittens_codegen::Lowered, CudaError> {
    let invalid = |e: String| CudaError::Invalid(e);
    let k = kittens_kernels::by_name("gemm_bf16")
        .and_then(|e| e.build_for(Target::Sm90a))
        .map_err(|e| invalid(format!("building gemm_bf16 for sm_90a: {e}")))?;
    kittens_codegen::lower(&k, Target::Sm90a)
        .map_err(|e| invalid(format!("lowering gemm_bf16: {e}")))
}

/// CUDA attention is not there yet.
pub fn attention() -> ApiError {
    ApiError::Runtime(
        "kittens.attention has no CUDA kernel yet for the caller's tensors (attn_fwd's sm_90a lowering \
         runs in `kittens bench attn_fwd` only); it runs on CPU \
         arrays only, and CUDA tensors are never moved to the CPU behind your back"
            .into(),
    )
}
