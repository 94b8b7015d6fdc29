//! What compiling one CUDA kernel yields: the cubin ([`CudaModuleImage`]) and what NVRTC and ptxas
//! said about it ([`CudaCompileReport`]). `nvrtc.rs` produces them, `cache.rs` stores them on disk,
//! the launchers read them; this module imports none of those.

use serde::{Deserialize, Serialize};

/// What NVRTC and ptxas said about one compiled kernel. `shared_bytes` is the kernel's static shared
/// memory; the dynamic shared memory a launch asks for is the caller's (`dynamic_shared_bytes`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CudaCompileReport {
    pub kernel: String,
    pub target: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_frame: u32,
    pub shared_bytes: u32,
    pub dynamic_shared_bytes: u32,
    pub barriers: u32,
    pub cubin_bytes: usize,
    pub nvrtc_version: String,
    /// Whether the cubin came from the on-disk cache.
    pub cached: bool,
    /// Compiler warnings (ptxas lines with "warning"), e.g. C7508 when `setmaxnreg` was ignored.
    pub warnings: Vec<String>,
}

/// A compiled kernel: the cubin and its report.
#[derive(Debug, Clone)]
pub struct CudaModuleImage {
    pub cubin: Vec<u8>,
    pub report: CudaCompileReport,
}
