//! cuBLAS, the vendor reference the benchmark measures against: a bf16 GEMM with fp32 accumulation
//! (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`), loaded at run time through `cudarc`.

use std::ffi::c_void;
use std::path::Path;
use std::sync::OnceLock;

use cudarc::cublas::sys as cb;

use super::driver::{DeviceBuffer, Stream};
use super::libs::{candidates, open_global, usable, Candidate};
use super::limits::gemm_abt_dims;
use super::CudaError;

/// Folders that may hold `libcublas.so.13`, besides the loader's own search path: `$KITTENS_CUBLAS`
/// (absolute), the CUDA toolkit, and PyPI's `nvidia-cublas` inside the GPU machine's PyTorch environment.
fn candidate_dirs() -> Result<Vec<Candidate>, CudaError> {
    candidates(
        "KITTENS_CUBLAS",
        std::env::var_os("KITTENS_CUBLAS"),
        None,
        &[
            "/usr/local/cuda/lib64",
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
        ],
    )
    .map_err(|e| CudaError::Cublas(e.to_string()))
}

/// Opens cuBLAS (and cuBLASLt, which it needs) once, by full path where one is found, so that `cudarc`'s
/// later open by name finds it already loaded.
pub(crate) fn load() -> Result<String, CudaError> {
    static LOADED: OnceLock<Result<String, CudaError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut tried = Vec::new();
            for c in candidate_dirs()? {
                let (lt, blas) = (
                    c.dir.join("libcublasLt.so.13"),
                    c.dir.join("libcublas.so.13"),
                );
                if usable(&c, &[lt.clone(), blas.clone()], &mut tried)
                    .map_err(|e| CudaError::Cublas(e.to_string()))?
                {
                    let libs = [open_global(&lt), open_global(&blas)];
                    if libs.iter().all(Result::is_ok) {
                        libs.into_iter().flatten().for_each(std::mem::forget);
                        return Ok(blas.display().to_string());
                    }
                }
            }
            open_global(Path::new("libcublas.so.13"))
                .map(|l| {
                    std::mem::forget(l);
                    "libcublas.so.13 (ldconfig)".to_string()
                })
                .map_err(|e| CudaError::Cublas(format!("libcublas.so.13 not found: {e}")))
        })
        .clone()
}

fn check(s: cb::cublasStatus_t, call: &str) -> Result<(), CudaError> {
    if s == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Cublas(format!("{call}: {s:?}")))
    }
}

/// A cuBLAS handle bound to one stream.
pub struct Cublas {
    handle: cb::cublasHandle_t,
    pub library: String,
}

impl Cublas {
    /// Creates a handle on `stream` (the device's context must be current).
    pub fn new(stream: &Stream) -> Result<Cublas, CudaError> {
        let library = load()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: out-parameter; destroyed in Drop. The driver's and cuBLAS's stream types are the same
        // opaque CUstream_st pointer under two names.
        unsafe {
            check(cb::cublasCreate_v2(&mut handle), "cublasCreate")?;
            check(
                cb::cublasSetStream_v2(handle, stream.raw() as cb::cudaStream_t),
                "cublasSetStream",
            )?;
        }
        Ok(Cublas { handle, library })
    }

    /// C = A·Bᵀ in bf16 with fp32 accumulation, row-major: A is M×K, B is N×K, C is M×N — the same
    /// contract as the project's `gemm_bf16`. cuBLAS is column-major, so this asks for
    /// Cᵀ (N×M) = op(B)·op(A) with B transposed and A as stored ("TN", the layout of a linear layer).
    /// The sizes are checked against the buffers, and converted to cuBLAS's `int`, before the call.
    pub fn gemm_bf16_abt(
        &self,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &mut DeviceBuffer,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(), CudaError> {
        self.gemm(a, b, c, (m, n, k), true)
    }

    /// C = A·B with B stored K×N row-major (`gemm_bf16` with `BLayout::Kn`): Cᵀ = Bᵀ·Aᵀ, both as
    /// stored ("NN").
    pub fn gemm_bf16_ab(
        &self,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &mut DeviceBuffer,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(), CudaError> {
        self.gemm(a, b, c, (m, n, k), false)
    }

    fn gemm(
        &self,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &mut DeviceBuffer,
        (m, n, k): (usize, usize, usize),
        b_nk: bool,
    ) -> Result<(), CudaError> {
        let (alpha, beta) = (1f32, 0f32);
        // B holds N·K elements either way: the size check is the same.
        let (mi, ni, ki) = gemm_abt_dims((m, n, k), a.bytes(), b.bytes(), c.bytes())?;
        let (op_b, ldb) = if b_nk {
            (cb::cublasOperation_t::CUBLAS_OP_T, ki)
        } else {
            (cb::cublasOperation_t::CUBLAS_OP_N, ni)
        };
        // SAFETY: the buffers hold M×K, N×K and M×N bf16 (checked just above).
        check(
            unsafe {
                cb::cublasGemmEx(
                    self.handle,
                    op_b,
                    cb::cublasOperation_t::CUBLAS_OP_N,
                    ni,
                    mi,
                    ki,
                    (&alpha as *const f32).cast::<c_void>(),
                    b.ptr() as *const c_void,
                    cb::cudaDataType::CUDA_R_16BF,
                    ldb,
                    a.ptr() as *const c_void,
                    cb::cudaDataType::CUDA_R_16BF,
                    ki,
                    (&beta as *const f32).cast::<c_void>(),
                    c.ptr() as *mut c_void,
                    cb::cudaDataType::CUDA_R_16BF,
                    ni,
                    cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            },
            "cublasGemmEx",
        )
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            cb::cublasDestroy_v2(self.handle);
        }
    }
}
