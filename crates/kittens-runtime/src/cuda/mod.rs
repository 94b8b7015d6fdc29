//! CUDA for NVIDIA Hopper (sm_90a): NVRTC compilation ([`nvrtc`](mod@nvrtc)) with a checked on-disk cache
//! ([`crate::cache`]), the driver API (devices, buffers, streams, events, launches, tensor maps: [`driver`]),
//! cuBLAS for reference GEMMs ([`cublas`]) and cuBLASLt for the FP8 one ([`cublaslt`]), the GEMM
//! benchmarks ([`bench`](mod@bench); [`bench_fp8`] for `gemm_fp8`), judged by the one test rule,
//! `kittens_kernels::reference::check_rule`. Sizes are checked before they reach the driver ([`limits`]). Every library is
//! loaded at run time through `cudarc` (docs/architecture.md principle 5), from absolute paths only ([`libs`]):
//! building needs no CUDA, and a machine without a driver gets [`CudaError::NoDriver`] instead of a
//! crash.

pub mod args;
pub mod attn;
pub mod bench;
pub mod bench_check;
pub mod bench_fp8;
mod bench_inputs;
pub mod bench_mem;
pub mod bench_report;
pub mod bench_shapes;
pub mod bench_time;
pub mod caller;
mod compiled;
mod counters;
pub mod cublas;
pub mod cublaslt;
pub mod device_call;
pub mod dispatch;
pub mod driver;
pub mod gemm_kernel;
pub mod gemm_pad;
pub mod launch;
pub mod libs;
pub mod limits;
pub mod nvrtc;
mod strip_kernel;

pub use crate::cache::{CacheError, Compiler, KernelCache};
pub use compiled::{CudaCompileReport, CudaModuleImage};
pub use driver::{Device, DeviceBuffer, Event, Function, Module, Stream, TensorMap};
pub use nvrtc::{compile, compile_with_cache, nvrtc, parse_ptxas_log, ptx, NvrtcInfo};

/// Everything that can go wrong between CUDA source and a timed launch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error("NVRTC not found: {0}")]
    NvrtcMissing(String),
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("CUDA compilation failed:\n{0}")]
    Compile(String),
    #[error("`{0}` is not a CUDA target (expected e.g. sm_90a)")]
    BadTarget(String),
    #[error("no NVIDIA driver on this machine ({0})")]
    NoDriver(String),
    #[error("the NVIDIA driver found no usable GPU: {0}")]
    NoDevice(String),
    #[error("{call} failed: {msg}")]
    Driver { call: &'static str, msg: String },
    #[error("cuBLAS: {0}")]
    Cublas(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A library found where it cannot be trusted (see [`crate::trust`]).
    #[error("library not loaded: {0}")]
    Untrusted(#[from] crate::trust::TrustError),
    #[error(transparent)]
    Size(#[from] limits::SizeError),
}

/// [`CudaError::Invalid`] from any message: one constructor for every module of the CUDA side.
pub(crate) fn invalid(e: impl std::fmt::Display) -> CudaError {
    CudaError::Invalid(e.to_string())
}

/// Compiles `source` for `target` and returns only the report (what `kittens compile --target sm_90a`
/// prints). `kernel` is the `extern "C"` name of the kernel to report on.
pub fn compile_report(
    source: &str,
    kernel: &str,
    target: &str,
    dynamic_shared_bytes: u32,
) -> Result<CudaCompileReport, CudaError> {
    compile(source, kernel, target, dynamic_shared_bytes).map(|m| m.report)
}

/// The report as one JSON document.
pub fn compile_report_json(report: &CudaCompileReport) -> serde_json::Value {
    serde_json::to_value(report).unwrap_or(serde_json::Value::Null)
}
