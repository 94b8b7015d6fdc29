//! cuBLASLt's FP8 GEMM, the vendor reference `gemm_fp8` is measured against: `cublasLtMatmul` with
//! e4m3 A and B, per-tensor f32 scales passed by device pointer (`CUBLASLT_MATMUL_DESC_A_SCALE_POINTER`,
//! `B_SCALE_POINTER`), fp32 accumulation and bf16 D — what `torch._scaled_mm` calls. Loaded at run
//! time through `cudarc`, after cuBLAS's loader (`super::cublas`) has opened `libcublasLt.so.13` by
//! full path.
//!
//! Layout (cuBLASLt documentation, `cublasLtMatmul`, FP8 requirements: A transposed, B not, "TN"):
//! the row-major `C = A·Bᵀ` (A M×K, B N×K, C M×N) is the column-major `Cᵀ (N×M) = op(B')·A'` with
//! `B'` our B stored as a K×N column-major matrix (leading dimension K) taken transposed, and `A'` our
//! A stored as K×M (leading dimension K) as is.

use std::ffi::c_void;

use cudarc::cublaslt::sys as lt;

use super::driver::{DeviceBuffer, Stream};
use super::CudaError;

fn check(s: lt::cublasStatus_t, call: &str) -> Result<(), CudaError> {
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Cublas(format!("{call}: {s:?}")))
    }
}

/// How cuBLASLt accumulates the fp8 products (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Accumulation {
    /// The default (`torch._scaled_mm`'s `use_fast_accum=False`): partial sums are promoted to full
    /// fp32 registers at intervals.
    Promoted,
    /// Fast accumulation: the tensor core's accumulator throughout, as a chain of `wgmma` does.
    Fast,
}

/// Workspace given to cuBLASLt (its documentation recommends 32 MiB on Hopper).
const WORKSPACE: usize = 32 << 20;

/// A cuBLASLt handle with its workspace.
pub struct CublasLt {
    handle: lt::cublasLtHandle_t,
    workspace: DeviceBuffer,
    pub library: String,
}

/// The descriptors of one problem: freed on drop.
struct Plan {
    desc: lt::cublasLtMatmulDesc_t,
    layouts: [lt::cublasLtMatrixLayout_t; 3],
    pref: lt::cublasLtMatmulPreference_t,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each created once in `CublasLt::plan` (null when its creation failed: skipped).
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.pref.is_null() {
                lt::cublasLtMatmulPreferenceDestroy(self.pref);
            }
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

/// One planned FP8 GEMM: the descriptors and the algorithm cuBLASLt's heuristic chose.
pub struct Fp8Gemm {
    plan: Plan,
    algo: lt::cublasLtMatmulAlgo_t,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub accumulation: Accumulation,
}

impl CublasLt {
    /// A handle and a 32 MiB workspace on `dev` (its context current).
    pub fn new(dev: &std::rc::Rc<super::Device>) -> Result<CublasLt, CudaError> {
        let library = super::cublas::load()?;
        let workspace = dev.alloc(WORKSPACE)?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: out-parameter; destroyed in Drop.
        check(unsafe { lt::cublasLtCreate(&mut handle) }, "cublasLtCreate")?;
        Ok(CublasLt {
            handle,
            workspace,
            library: library.replace("libcublas.so", "libcublasLt.so"),
        })
    }

    /// Plans `C = (sa·A)·(sb·B)ᵀ` for row-major e4m3 A (M×K), B (N×K) and bf16 C (M×N), the scales
    /// read from device memory at each launch. The sizes are cuBLASLt's to refuse (K a multiple of 16
    /// for fp8); its refusal is an error naming the call.
    pub fn plan_fp8(
        &self,
        m: usize,
        n: usize,
        k: usize,
        scales: [&DeviceBuffer; 2],
        accumulation: Accumulation,
    ) -> Result<Fp8Gemm, CudaError> {
        let dim = |what: &str, v: usize| -> Result<u64, CudaError> {
            if v == 0 || v > i32::MAX as usize {
                Err(CudaError::Invalid(format!(
                    "cuBLASLt {what} = {v} (1 to {})",
                    i32::MAX
                )))
            } else {
                Ok(v as u64)
            }
        };
        let (mu, nu, ku) = (dim("M", m)?, dim("N", n)?, dim("K", k)?);
        if scales.iter().any(|s| s.bytes() < 4) {
            return Err(CudaError::Invalid(
                "cuBLASLt scales: one f32 each".to_string(),
            ));
        }
        let mut plan = Plan {
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            pref: std::ptr::null_mut(),
        };
        use lt::cublasLtMatmulDescAttributes_t as D;
        // SAFETY: out-parameters and attribute values of the sizes the attributes take (int32 for the
        // transposes, a device pointer for the scales, int8 for fast accumulation, uint64 for the
        // workspace); every object goes into `plan`, freed on drop.
        unsafe {
            check(
                lt::cublasLtMatmulDescCreate(
                    &mut plan.desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType_t::CUDA_R_32F,
                ),
                "cublasLtMatmulDescCreate",
            )?;
            let set = |attr: D, v: *const c_void, size: usize| {
                check(
                    lt::cublasLtMatmulDescSetAttribute(plan.desc, attr, v, size),
                    "cublasLtMatmulDescSetAttribute",
                )
            };
            let (op_t, op_n) = (1i32, 0i32); // CUBLAS_OP_T, CUBLAS_OP_N
            set(D::CUBLASLT_MATMUL_DESC_TRANSA, ptr_of(&op_t), 4)?;
            set(D::CUBLASLT_MATMUL_DESC_TRANSB, ptr_of(&op_n), 4)?;
            // cuBLASLt's A is our B and its B our A.
            let (sa, sb) = (scales[1].ptr(), scales[0].ptr());
            set(D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ptr_of(&sa), 8)?;
            set(D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, ptr_of(&sb), 8)?;
            let fast = i8::from(accumulation == Accumulation::Fast);
            set(D::CUBLASLT_MATMUL_DESC_FAST_ACCUM, ptr_of(&fast), 1)?;
            let e4m3 = lt::cudaDataType_t::CUDA_R_8F_E4M3;
            let bf16 = lt::cudaDataType_t::CUDA_R_16BF;
            for (i, (ty, rows, cols)) in [(e4m3, ku, nu), (e4m3, ku, mu), (bf16, nu, mu)]
                .into_iter()
                .enumerate()
            {
                check(
                    lt::cublasLtMatrixLayoutCreate(
                        &mut plan.layouts[i],
                        ty,
                        rows,
                        cols,
                        rows as i64,
                    ),
                    "cublasLtMatrixLayoutCreate",
                )?;
            }
            check(
                lt::cublasLtMatmulPreferenceCreate(&mut plan.pref),
                "cublasLtMatmulPreferenceCreate",
            )?;
            let ws = WORKSPACE as u64;
            check(
                lt::cublasLtMatmulPreferenceSetAttribute(
                    plan.pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    ptr_of(&ws),
                    8,
                ),
                "cublasLtMatmulPreferenceSetAttribute",
            )?;
            let mut result: lt::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
            let mut found = 0i32;
            let [la, lb, lc] = plan.layouts;
            check(
                lt::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    la,
                    lb,
                    lc,
                    lc,
                    plan.pref,
                    1,
                    &mut result,
                    &mut found,
                ),
                "cublasLtMatmulAlgoGetHeuristic",
            )?;
            if found < 1 {
                return Err(CudaError::Cublas(format!(
                    "cuBLASLt has no fp8 algorithm for {m}x{n}x{k}"
                )));
            }
            Ok(Fp8Gemm {
                plan,
                algo: result.algo,
                m,
                n,
                k,
                accumulation,
            })
        }
    }

    /// One launch of a planned GEMM on `stream`; the buffers are checked against the plan's sizes.
    pub fn run(
        &self,
        g: &Fp8Gemm,
        stream: &Stream,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &mut DeviceBuffer,
    ) -> Result<(), CudaError> {
        let need = |what: &str, buf: &DeviceBuffer, n: usize| {
            if buf.bytes() < n {
                Err(CudaError::Invalid(format!(
                    "cuBLASLt {what}: {} bytes, needs {n}",
                    buf.bytes()
                )))
            } else {
                Ok(())
            }
        };
        need("A", a, g.m * g.k)?;
        need("B", b, g.n * g.k)?;
        need("C", c, g.m * g.n * 2)?;
        let (alpha, beta) = (1f32, 0f32);
        let [la, lb, lc] = g.plan.layouts;
        // SAFETY: the buffers hold the planned operands (checked above); the descriptors live in `g`;
        // the workspace is ours, of the size the preference named.
        check(
            unsafe {
                lt::cublasLtMatmul(
                    self.handle,
                    g.plan.desc,
                    ptr_of(&alpha),
                    b.ptr() as *const c_void,
                    la,
                    a.ptr() as *const c_void,
                    lb,
                    ptr_of(&beta),
                    c.ptr() as *const c_void,
                    lc,
                    c.ptr() as *mut c_void,
                    lc,
                    &g.algo,
                    self.workspace.ptr() as *mut c_void,
                    WORKSPACE,
                    stream.raw() as lt::cudaStream_t,
                )
            },
            "cublasLtMatmul",
        )
    }
}

fn ptr_of<T>(v: &T) -> *const c_void {
    (v as *const T).cast::<c_void>()
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            lt::cublasLtDestroy(self.handle);
        }
    }
}
