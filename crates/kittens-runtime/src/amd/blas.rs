//! The vendor GEMM an AMD benchmark compares with, opened at run time like the HIP runtime:
//! hipBLASLt (`hipblasLtMatmul` with the library's heuristic choice of algorithm), or rocBLAS
//! (`rocblas_gemm_ex`) where hipBLASLt is missing. Both compute C = A·Bᵀ in bf16 with f32
//! accumulation on row-major A (M×K), B (N×K) and C (M×N), as kittens' `gemm_bf16` does.
//!
//! Both libraries are column-major: row-major C (M×N) is column-major Cᵀ (N×M), and
//! Cᵀ = B·Aᵀ, where the row-major N×K buffer B read column-major is Bᵀ (K×N, transposed by the op)
//! and the row-major M×K buffer A read column-major is Aᵀ (K×M, used as is). So the call is
//! `gemm(op_a = T, op_b = N, m = N, n = M, k = K, a = B, lda = K, b = A, ldb = K, c = C, ldc = N)`.
//!
//! Enumerators and signatures are those of ROCm's `hipblaslt.h`, `hipblas-common.h`,
//! `library_types.h` (hipDataType) and `rocblas-types.h` / `rocblas-functions.h`.

use super::hip::{DeviceBuffer, HipRuntime};
use libloading::{Library, Symbol};
use std::ffi::{c_int, c_void};

type Ptr = *mut c_void;
type Status = c_int;

/// hipDataType (library_types.h).
const HIP_R_32F: c_int = 0;
const HIP_R_16BF: c_int = 14;
/// hipblasComputeType_t.
const HIPBLAS_COMPUTE_32F: c_int = 2;
/// hipblasOperation_t and rocblas_operation share their values.
const OP_N: c_int = 111;
const OP_T: c_int = 112;
/// hipblasLtMatmulDescAttributes_t / hipblasLtMatmulPreferenceAttributes_t.
const LT_DESC_TRANSA: c_int = 0;
const LT_DESC_TRANSB: c_int = 1;
const LT_PREF_MAX_WORKSPACE_BYTES: c_int = 1;
/// rocblas_datatype and rocblas_gemm_algo.
const ROCBLAS_BF16_R: c_int = 168;
const ROCBLAS_F32_R: c_int = 151;
const ROCBLAS_GEMM_ALGO_STANDARD: c_int = 0;

/// Workspace the hipBLASLt heuristic may ask for.
const LT_WORKSPACE: usize = 64 << 20;

/// hipblasLtMatmulAlgo_t: 16 opaque bytes and the workspace bound.
#[repr(C)]
#[derive(Clone, Copy)]
struct LtAlgo {
    data: [u8; 16],
    max_workspace_bytes: usize,
}

/// hipblasLtMatmulHeuristicResult_t.
#[repr(C)]
#[derive(Clone, Copy)]
struct LtHeuristic {
    algo: LtAlgo,
    workspace_size: usize,
    state: Status,
    waves_count: f32,
    reserved: [c_int; 4],
}

#[derive(Debug, thiserror::Error)]
pub enum BlasError {
    #[error("neither hipBLASLt nor rocBLAS found (looked at: {looked})")]
    NotFound { looked: String },
    #[error("{lib} lacks `{name}`")]
    Symbol { lib: String, name: &'static str },
    #[error("{call} failed with status {status}")]
    Call { call: &'static str, status: Status },
    #[error("hipBLASLt found no algorithm for {m}x{n}x{k}")]
    NoAlgorithm { m: usize, n: usize, k: usize },
    #[error(transparent)]
    Hip(#[from] super::hip::HipError),
    /// `KITTENS_HIPBLASLT_LIB` or `KITTENS_ROCBLAS_LIB` names a library that cannot be trusted.
    #[error("vendor BLAS not loaded: {0}")]
    Untrusted(#[from] crate::trust::TrustError),
    #[error("GEMM extent {0} does not fit the library's 32-bit sizes")]
    Extent(usize),
}

fn ok(call: &'static str, status: Status) -> Result<(), BlasError> {
    if status == 0 {
        Ok(())
    } else {
        Err(BlasError::Call { call, status })
    }
}

#[allow(clippy::type_complexity)]
struct LtApi {
    create: unsafe extern "C" fn(*mut Ptr) -> Status,
    desc_create: unsafe extern "C" fn(*mut Ptr, c_int, c_int) -> Status,
    desc_set: unsafe extern "C" fn(Ptr, c_int, *const c_void, usize) -> Status,
    desc_destroy: unsafe extern "C" fn(Ptr) -> Status,
    layout_create: unsafe extern "C" fn(*mut Ptr, c_int, u64, u64, i64) -> Status,
    layout_destroy: unsafe extern "C" fn(Ptr) -> Status,
    pref_create: unsafe extern "C" fn(*mut Ptr) -> Status,
    pref_set: unsafe extern "C" fn(Ptr, c_int, *const c_void, usize) -> Status,
    pref_destroy: unsafe extern "C" fn(Ptr) -> Status,
    heuristic: unsafe extern "C" fn(
        Ptr,
        Ptr,
        Ptr,
        Ptr,
        Ptr,
        Ptr,
        Ptr,
        c_int,
        *mut LtHeuristic,
        *mut c_int,
    ) -> Status,
    matmul: unsafe extern "C" fn(
        Ptr,
        Ptr,
        *const c_void,
        *const c_void,
        Ptr,
        *const c_void,
        Ptr,
        *const c_void,
        *const c_void,
        Ptr,
        *mut c_void,
        Ptr,
        *const LtAlgo,
        *mut c_void,
        usize,
        Ptr,
    ) -> Status,
}

#[allow(clippy::type_complexity)]
struct RocApi {
    create: unsafe extern "C" fn(*mut Ptr) -> Status,
    gemm_ex: unsafe extern "C" fn(
        Ptr,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        *const c_void,
        *const c_void,
        c_int,
        c_int,
        *const c_void,
        c_int,
        c_int,
        *const c_void,
        *const c_void,
        c_int,
        c_int,
        *mut c_void,
        c_int,
        c_int,
        c_int,
        c_int,
        i32,
        u32,
    ) -> Status,
}

enum Api {
    Lt(LtApi),
    Roc(RocApi),
}

/// A GEMM of one shape, ready to be queued repeatedly.
pub struct Prepared {
    m: usize,
    n: usize,
    k: usize,
    /// hipBLASLt: descriptor, layouts of A, B, C (= D), the chosen algorithm.
    lt: Option<(Ptr, [Ptr; 3], LtAlgo)>,
}

/// The vendor library, loaded.
pub struct VendorGemm<'r> {
    api: Api,
    handle: Ptr,
    pub name: &'static str,
    pub path: String,
    workspace: Option<DeviceBuffer<'r>>,
    _lib: Library,
}

/// Where the libraries are looked for, in order: `KITTENS_HIPBLASLT_LIB` / `KITTENS_ROCBLAS_LIB`
/// first (absolute paths that pass [`crate::trust::explicit_file`], else an error), then the loader's
/// search path by name and ROCm's folder.
pub fn candidates() -> Result<(Vec<String>, Vec<String>), BlasError> {
    candidates_in(|v| std::env::var_os(v))
}

/// [`candidates`] with the environment as `env` reports it.
pub fn candidates_in(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<(Vec<String>, Vec<String>), BlasError> {
    use crate::trust::{explicit, Role};
    let with_env = |var: &str, names: &[&str]| -> Result<Vec<String>, BlasError> {
        let mut v: Vec<String> = explicit(var, env(var), Role::File)?
            .map(|p| p.to_string_lossy().into_owned())
            .into_iter()
            .collect();
        v.extend(names.iter().map(|s| s.to_string()));
        Ok(v)
    };
    Ok((
        with_env(
            "KITTENS_HIPBLASLT_LIB",
            &[
                "libhipblaslt.so",
                "libhipblaslt.so.1",
                "libhipblaslt.so.0",
                "/opt/rocm/lib/libhipblaslt.so",
            ],
        )?,
        with_env(
            "KITTENS_ROCBLAS_LIB",
            &[
                "librocblas.so",
                "librocblas.so.5",
                "librocblas.so.4",
                "/opt/rocm/lib/librocblas.so",
            ],
        )?,
    ))
}

fn open(paths: &[String]) -> Option<(Library, String)> {
    paths
        .iter()
        .find_map(|p| unsafe { Library::new(p) }.ok().map(|l| (l, p.clone())))
}

impl<'r> VendorGemm<'r> {
    /// hipBLASLt if it loads, else rocBLAS.
    pub fn load(rt: &'r HipRuntime) -> Result<VendorGemm<'r>, BlasError> {
        let (lt, roc) = candidates()?;
        macro_rules! sym {
            ($lib:expr, $path:expr, $name:literal) => {{
                let s: Symbol<_> =
                    unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.map_err(|_| {
                        BlasError::Symbol {
                            lib: $path.clone(),
                            name: $name,
                        }
                    })?;
                *s
            }};
        }
        if let Some((lib, path)) = open(&lt) {
            let api = LtApi {
                create: sym!(lib, path, "hipblasLtCreate"),
                desc_create: sym!(lib, path, "hipblasLtMatmulDescCreate"),
                desc_set: sym!(lib, path, "hipblasLtMatmulDescSetAttribute"),
                desc_destroy: sym!(lib, path, "hipblasLtMatmulDescDestroy"),
                layout_create: sym!(lib, path, "hipblasLtMatrixLayoutCreate"),
                layout_destroy: sym!(lib, path, "hipblasLtMatrixLayoutDestroy"),
                pref_create: sym!(lib, path, "hipblasLtMatmulPreferenceCreate"),
                pref_set: sym!(lib, path, "hipblasLtMatmulPreferenceSetAttribute"),
                pref_destroy: sym!(lib, path, "hipblasLtMatmulPreferenceDestroy"),
                heuristic: sym!(lib, path, "hipblasLtMatmulAlgoGetHeuristic"),
                matmul: sym!(lib, path, "hipblasLtMatmul"),
            };
            let mut handle: Ptr = std::ptr::null_mut();
            ok("hipblasLtCreate", unsafe { (api.create)(&mut handle) })?;
            return Ok(VendorGemm {
                api: Api::Lt(api),
                handle,
                name: "hipBLASLt",
                path,
                workspace: Some(rt.zeroed(LT_WORKSPACE)?),
                _lib: lib,
            });
        }
        let Some((lib, path)) = open(&roc) else {
            return Err(BlasError::NotFound {
                looked: lt
                    .iter()
                    .chain(&roc)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let api = RocApi {
            create: sym!(lib, path, "rocblas_create_handle"),
            gemm_ex: sym!(lib, path, "rocblas_gemm_ex"),
        };
        let mut handle: Ptr = std::ptr::null_mut();
        ok("rocblas_create_handle", unsafe {
            (api.create)(&mut handle)
        })?;
        Ok(VendorGemm {
            api: Api::Roc(api),
            handle,
            name: "rocBLAS",
            path,
            workspace: None,
            _lib: lib,
        })
    }

    /// Describe C = A·Bᵀ at M×N×K (hipBLASLt: layouts and the heuristic's first algorithm).
    pub fn prepare(&self, m: usize, n: usize, k: usize) -> Result<Prepared, BlasError> {
        for x in [m, n, k] {
            if i32::try_from(x).is_err() {
                return Err(BlasError::Extent(x));
            }
        }
        let Api::Lt(api) = &self.api else {
            return Ok(Prepared { m, n, k, lt: None });
        };
        let mut desc: Ptr = std::ptr::null_mut();
        ok("hipblasLtMatmulDescCreate", unsafe {
            (api.desc_create)(&mut desc, HIPBLAS_COMPUTE_32F, HIP_R_32F)
        })?;
        for (attr, op) in [(LT_DESC_TRANSA, OP_T), (LT_DESC_TRANSB, OP_N)] {
            ok("hipblasLtMatmulDescSetAttribute", unsafe {
                (api.desc_set)(desc, attr, (&op as *const c_int).cast(), 4)
            })?;
        }
        // Column-major: the first operand is the N×K buffer read as K×N, the second the M×K buffer
        // read as K×M, the result N×M.
        let mut layouts = [std::ptr::null_mut(); 3];
        for (l, (rows, cols)) in layouts.iter_mut().zip([(k, n), (k, m), (n, m)]) {
            ok("hipblasLtMatrixLayoutCreate", unsafe {
                (api.layout_create)(l, HIP_R_16BF, rows as u64, cols as u64, rows as i64)
            })?;
        }
        let mut pref: Ptr = std::ptr::null_mut();
        ok("hipblasLtMatmulPreferenceCreate", unsafe {
            (api.pref_create)(&mut pref)
        })?;
        let ws = LT_WORKSPACE as u64;
        ok("hipblasLtMatmulPreferenceSetAttribute", unsafe {
            (api.pref_set)(
                pref,
                LT_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                8,
            )
        })?;
        let mut result = [LtHeuristic {
            algo: LtAlgo {
                data: [0; 16],
                max_workspace_bytes: 0,
            },
            workspace_size: 0,
            state: 0,
            waves_count: 0.0,
            reserved: [0; 4],
        }];
        let mut found: c_int = 0;
        let st = unsafe {
            (api.heuristic)(
                self.handle,
                desc,
                layouts[0],
                layouts[1],
                layouts[2],
                layouts[2],
                pref,
                1,
                result.as_mut_ptr(),
                &mut found,
            )
        };
        unsafe { (api.pref_destroy)(pref) };
        ok("hipblasLtMatmulAlgoGetHeuristic", st)?;
        if found < 1 || result[0].state != 0 {
            return Err(BlasError::NoAlgorithm { m, n, k });
        }
        Ok(Prepared {
            m,
            n,
            k,
            lt: Some((desc, layouts, result[0].algo)),
        })
    }

    /// Queue C = A·Bᵀ on the default stream (device addresses of row-major A, B, C).
    pub fn gemm(&self, p: &Prepared, a: u64, b: u64, c: u64) -> Result<(), BlasError> {
        let (alpha, beta) = (1f32, 0f32);
        let (m, n, k) = (p.m as c_int, p.n as c_int, p.k as c_int);
        let (a, b, c) = (a as Ptr, b as Ptr, c as Ptr);
        let alpha_p = (&alpha as *const f32).cast();
        let beta_p = (&beta as *const f32).cast();
        match (&self.api, &p.lt) {
            (Api::Lt(api), Some((desc, l, algo))) => {
                let ws = self
                    .workspace
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |w| w.addr() as Ptr);
                ok("hipblasLtMatmul", unsafe {
                    (api.matmul)(
                        self.handle,
                        *desc,
                        alpha_p,
                        b,
                        l[0],
                        a,
                        l[1],
                        beta_p,
                        c,
                        l[2],
                        c,
                        l[2],
                        algo,
                        ws,
                        LT_WORKSPACE,
                        std::ptr::null_mut(),
                    )
                })
            }
            (Api::Roc(api), _) => ok("rocblas_gemm_ex", unsafe {
                (api.gemm_ex)(
                    self.handle,
                    OP_T,
                    OP_N,
                    n,
                    m,
                    k,
                    alpha_p,
                    b,
                    ROCBLAS_BF16_R,
                    k,
                    a,
                    ROCBLAS_BF16_R,
                    k,
                    beta_p,
                    c,
                    ROCBLAS_BF16_R,
                    n,
                    c,
                    ROCBLAS_BF16_R,
                    n,
                    ROCBLAS_F32_R,
                    ROCBLAS_GEMM_ALGO_STANDARD,
                    0,
                    0,
                )
            }),
            (Api::Lt(_), None) => Err(BlasError::NoAlgorithm {
                m: p.m,
                n: p.n,
                k: p.k,
            }),
        }
    }

    /// Release a prepared shape's descriptors.
    pub fn release(&self, p: Prepared) {
        if let (Api::Lt(api), Some((desc, layouts, _))) = (&self.api, p.lt) {
            unsafe {
                (api.desc_destroy)(desc);
                for l in layouts {
                    (api.layout_destroy)(l);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structs passed by pointer match hipblaslt.h's layout on x86-64: hipblasLtMatmulAlgo_t is
    /// 16 bytes and a size_t (24); the heuristic result adds a size_t, a status, a float and four
    /// reserved ints (56).
    #[test]
    fn hipblaslt_struct_layouts() {
        assert_eq!(std::mem::size_of::<LtAlgo>(), 24);
        assert_eq!(std::mem::size_of::<LtHeuristic>(), 56);
        assert_eq!(std::mem::offset_of!(LtHeuristic, state), 32);
    }

    /// A relative library path would load a file of the current folder: refused, naming the variable;
    /// an absolute one leads its list.
    #[test]
    fn library_variables_must_be_absolute() {
        for (var, other) in [
            ("KITTENS_HIPBLASLT_LIB", "KITTENS_ROCBLAS_LIB"),
            ("KITTENS_ROCBLAS_LIB", "KITTENS_HIPBLASLT_LIB"),
        ] {
            let e = candidates_in(|v| (v == var).then(|| "./evil.so".into())).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("{var}=./evil.so is a relative path")),
                "{e}"
            );
            assert!(candidates_in(|v| (v == other).then(|| "evil.so".into())).is_err());
        }
        let e = super::super::hip::candidates_in(|v| {
            (v == "KITTENS_HIP_LIB").then(|| "evil.so".into())
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("KITTENS_HIP_LIB=evil.so is a relative path"),
            "{e}"
        );
        let (lt, roc) = candidates_in(|_| None).unwrap();
        assert!(lt.iter().chain(&roc).all(|p| !p.starts_with('.')));
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("libhipblaslt.so");
        std::fs::write(&lib, b"").unwrap();
        let (lt, _) =
            candidates_in(|v| (v == "KITTENS_HIPBLASLT_LIB").then(|| lib.clone().into())).unwrap();
        assert_eq!(lt[0], lib.to_string_lossy());
    }
}
