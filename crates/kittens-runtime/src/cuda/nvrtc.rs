//! NVRTC: finding the library, compiling CUDA C++ to an sm_90a cubin, reading the compiler's resource
//! report, and an on-disk cache keyed by source, target, options and compiler version.
//!
//! NVRTC is loaded at run time through `cudarc` (docs/architecture.md principle 5). `cudarc` opens libraries by their
//! file name only, so a copy found elsewhere (the PyPI wheel in `.cache/nvrtc`) is opened first by its full
//! path with `RTLD_GLOBAL`: the dynamic loader then answers `cudarc`'s later `dlopen("libnvrtc.so.13")`
//! with the library already in the process, matched by its SONAME.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nvrtc::sys as nv;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::CudaError;

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

/// Where NVRTC was found and the version it reports.
#[derive(Debug, Clone, Serialize)]
pub struct NvrtcInfo {
    pub path: String,
    pub version: (i32, i32),
}

/// Keeps the preloaded libraries open for the life of the process.
struct Loaded {
    info: NvrtcInfo,
    _libs: Vec<libloading::Library>,
}

/// NVRTC's candidate folders, in order: `$KITTENS_NVRTC` (a folder or the library itself), the project's
/// cache (`scripts/install-nvrtc.sh`) under the current folder and under the source tree this binary was
/// built from, then the CUDA toolkit's usual places.
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(p) = std::env::var("KITTENS_NVRTC") {
        let p = PathBuf::from(p);
        dirs.push(if p.is_file() {
            p.parent().map(Path::to_path_buf).unwrap_or(p)
        } else {
            p
        });
    }
    let wheel = Path::new(".cache/nvrtc/nvidia/cu13/lib");
    dirs.push(wheel.to_path_buf());
    dirs.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(wheel),
    );
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// Opens a library with `RTLD_GLOBAL`, so later opens by SONAME find it.
fn open_global(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading NVIDIA's libraries runs their initialisers, which have no preconditions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL).map(Into::into) }
}

fn load() -> Result<Loaded, CudaError> {
    let mut tried = Vec::new();
    for dir in candidate_dirs() {
        let lib = dir.join("libnvrtc.so.13");
        if !lib.is_file() {
            tried.push(lib.display().to_string());
            continue;
        }
        let mut libs = Vec::new();
        // The builtins library is opened by NVRTC by name; preload it from the same folder.
        let builtins = dir.join("libnvrtc-builtins.so.13.0");
        if builtins.is_file() {
            libs.push(open_global(&builtins).map_err(|e| CudaError::NvrtcMissing(e.to_string()))?);
        }
        libs.push(open_global(&lib).map_err(|e| CudaError::NvrtcMissing(e.to_string()))?);
        return finish(lib.display().to_string(), libs);
    }
    // Last: whatever the dynamic loader finds by name (ldconfig).
    match open_global(Path::new("libnvrtc.so.13")) {
        Ok(l) => finish("libnvrtc.so.13 (ldconfig)".into(), vec![l]),
        Err(e) => Err(CudaError::NvrtcMissing(format!(
            "tried {} and the loader's search path ({e}); run scripts/install-nvrtc.sh or set KITTENS_NVRTC",
            tried.join(", ")
        ))),
    }
}

fn finish(path: String, libs: Vec<libloading::Library>) -> Result<Loaded, CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    check(
        unsafe { nv::nvrtcVersion(&mut major, &mut minor) },
        "nvrtcVersion",
    )?;
    Ok(Loaded {
        info: NvrtcInfo {
            path,
            version: (major, minor),
        },
        _libs: libs,
    })
}

/// Finds and loads NVRTC once per process.
pub fn nvrtc() -> Result<&'static NvrtcInfo, CudaError> {
    static LOADED: OnceLock<Result<Loaded, CudaError>> = OnceLock::new();
    match LOADED.get_or_init(load) {
        Ok(l) => Ok(&l.info),
        Err(e) => Err(e.clone()),
    }
}

fn check(r: nv::nvrtcResult, what: &str) -> Result<(), CudaError> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: NVRTC returns a static string for every result code.
    let msg = unsafe { CStr::from_ptr(nv::nvrtcGetErrorString(r)) }
        .to_string_lossy()
        .into_owned();
    Err(CudaError::Nvrtc(format!("{what}: {msg}")))
}

/// NVRTC options for a target such as `sm_90a`. `-Xptxas=-v` makes ptxas print registers, spills and
/// shared memory into the program log, which [`parse_ptxas_log`] reads.
fn options(target: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={target}"),
        "-std=c++17".into(),
        "-default-device".into(),
        "-Xptxas=-v".into(),
        "-lineinfo".into(),
    ]
}

/// The cache folder: `$KITTENS_CACHE`, else `$XDG_CACHE_HOME/kittens`, else `~/.cache/kittens`.
fn cache_dir() -> PathBuf {
    if let Ok(p) = std::env::var("KITTENS_CACHE") {
        return PathBuf::from(p);
    }
    if let Ok(p) = std::env::var("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("kittens");
    }
    match std::env::var("HOME") {
        Ok(h) => PathBuf::from(h).join(".cache/kittens"),
        Err(_) => std::env::temp_dir().join("kittens-cache"),
    }
    .join("cuda")
}

fn cache_key(
    source: &str,
    kernel: &str,
    target: &str,
    opts: &[String],
    version: (i32, i32),
) -> String {
    let mut h = Sha256::new();
    for part in [
        source,
        kernel,
        target,
        &opts.join(" "),
        &format!("nvrtc {}.{}", version.0, version.1),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiles `source` for `target` (e.g. `sm_90a`) and reports on `kernel`, using the on-disk cache.
/// `dynamic_shared_bytes` is copied into the report so it can say the kernel's whole shared footprint.
pub fn compile(
    source: &str,
    kernel: &str,
    target: &str,
    dynamic_shared_bytes: u32,
) -> Result<CudaModuleImage, CudaError> {
    if !target.starts_with("sm_") {
        return Err(CudaError::BadTarget(target.to_string()));
    }
    let info = nvrtc()?;
    let opts = options(target);
    let key = cache_key(source, kernel, target, &opts, info.version);
    let dir = cache_dir();
    let (cubin_path, report_path) = (
        dir.join(format!("{key}.cubin")),
        dir.join(format!("{key}.json")),
    );
    if let (Ok(cubin), Ok(json)) = (
        std::fs::read(&cubin_path),
        std::fs::read_to_string(&report_path),
    ) {
        if let Ok(mut report) = serde_json::from_str::<CudaCompileReport>(&json) {
            report.cached = true;
            report.dynamic_shared_bytes = dynamic_shared_bytes;
            return Ok(CudaModuleImage { cubin, report });
        }
    }
    let (cubin, log) = compile_uncached(source, &opts)?;
    let mut report = parse_ptxas_log(&log, kernel).ok_or_else(|| {
        CudaError::Nvrtc(format!(
            "no ptxas report for kernel `{kernel}` in the log:\n{log}"
        ))
    })?;
    report.target = target.to_string();
    report.cubin_bytes = cubin.len();
    report.nvrtc_version = format!("{}.{}", info.version.0, info.version.1);
    report.dynamic_shared_bytes = dynamic_shared_bytes;
    // A cache that cannot be written only costs a recompile next time.
    if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(&cubin_path, &cubin).is_ok() {
        if let Ok(json) = serde_json::to_string(&report) {
            let _ = std::fs::write(&report_path, json);
        }
    }
    Ok(CudaModuleImage { cubin, report })
}

/// One NVRTC compilation: returns the cubin and the program log.
fn compile_uncached(source: &str, opts: &[String]) -> Result<(Vec<u8>, String), CudaError> {
    let src =
        CString::new(source).map_err(|_| CudaError::Nvrtc("source holds a NUL byte".into()))?;
    let name = CString::new("kittens.cu").expect("literal has no NUL");
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).expect("options have no NUL"))
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings that outlive the calls; `prog` is destroyed below.
    unsafe {
        check(
            nv::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
            "nvrtcCreateProgram",
        )?;
        let status = nv::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr());
        let log = program_log(prog);
        let result = if status != nv::nvrtcResult::NVRTC_SUCCESS {
            Err(CudaError::Compile(log.clone()))
        } else {
            let mut size = 0usize;
            check(nv::nvrtcGetCUBINSize(prog, &mut size), "nvrtcGetCUBINSize").and_then(|_| {
                let mut cubin = vec![0u8; size];
                check(
                    nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()),
                    "nvrtcGetCUBIN",
                )
                .map(|_| cubin)
            })
        };
        nv::nvrtcDestroyProgram(&mut prog);
        result.map(|cubin| (cubin, log))
    }
}

/// # Safety
/// `prog` must be a live NVRTC program.
unsafe fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut size = 0usize;
    if nv::nvrtcGetProgramLogSize(prog, &mut size) != nv::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()) != nv::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    String::from_utf8_lossy(&buf)
        .trim_end_matches('\0')
        .to_string()
}

/// Reads ptxas's `-v` lines for `kernel` (whose mangled name contains it):
/// `Function properties for K` / `N bytes stack frame, N bytes spill stores, N bytes spill loads` /
/// `Used N registers, used N barriers, N bytes smem, ...`. Returns None when the kernel is not there.
pub fn parse_ptxas_log(log: &str, kernel: &str) -> Option<CudaCompileReport> {
    let mut report = CudaCompileReport {
        kernel: kernel.to_string(),
        target: String::new(),
        registers: 0,
        spill_stores: 0,
        spill_loads: 0,
        stack_frame: 0,
        shared_bytes: 0,
        dynamic_shared_bytes: 0,
        barriers: 0,
        cubin_bytes: 0,
        nvrtc_version: String::new(),
        cached: false,
        warnings: Vec::new(),
    };
    let mut in_kernel = false;
    let mut found = false;
    for line in log.lines() {
        let l = line.trim();
        if l.contains("warning") {
            report.warnings.push(l.to_string());
        }
        if l.contains("Function properties for") || l.contains("Compiling entry function") {
            in_kernel = l.contains(kernel);
            continue;
        }
        if !in_kernel {
            continue;
        }
        if l.contains("stack frame") {
            report.stack_frame = number_before(l, "bytes stack frame").unwrap_or(0);
            report.spill_stores = number_before(l, "bytes spill stores").unwrap_or(0);
            report.spill_loads = number_before(l, "bytes spill loads").unwrap_or(0);
        }
        if l.contains("Used") && l.contains("registers") {
            found = true;
            report.registers = number_before(l, "registers").unwrap_or(0);
            report.barriers = number_before(l, "barriers").unwrap_or(0);
            report.shared_bytes = number_before(l, "bytes smem").unwrap_or(0);
        }
    }
    found.then_some(report)
}

/// The integer just before `suffix` in `line` ("Used 168 registers" -> 168).
fn number_before(line: &str, suffix: &str) -> Option<u32> {
    let head = &line[..line.find(suffix)?];
    head.split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_ptxas_report() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'\n\
            ptxas info    : Function properties for _Z3fooPf\n    \
            24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n";
        let r = parse_ptxas_log(log, "foo").expect("kernel present");
        assert_eq!((r.registers, r.barriers, r.shared_bytes), (168, 1, 1024));
        assert_eq!((r.stack_frame, r.spill_stores, r.spill_loads), (24, 8, 12));
        assert!(parse_ptxas_log(log, "bar").is_none());
    }
}
