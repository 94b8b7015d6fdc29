//! NVRTC: finding the library, compiling CUDA C++ to an sm_90a cubin, reading the compiler's resource
//! report, and the on-disk cache ([`super::cache`]) keyed by source, target, options and the compiler's
//! full version.
//!
//! NVRTC is loaded at run time through `cudarc` (docs/architecture.md principle 5), from absolute folders only
//! ([`super::libs`]): `$KITTENS_NVRTC`, the PyPI wheel that `scripts/install-nvrtc.sh` puts in the
//! user's toolchain folder (`<user cache>/toolchains/nvrtc`), the CUDA toolkit's places, then the
//! loader's search path; each library file checked by [`crate::trust::check_file`] before it is opened.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::OnceLock;

use cudarc::nvrtc::sys as nv;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::compiled::{CudaCompileReport, CudaModuleImage};
use super::libs::{candidates, open_global, usable, Candidate};
use super::CudaError;
use crate::cache::{CacheError, Compiler, KernelCache};

/// Where NVRTC was found and the version it reports.
#[derive(Debug, Clone, Serialize)]
pub struct NvrtcInfo {
    pub path: String,
    /// `nvrtcVersion`: major and minor only.
    pub version: (i32, i32),
    /// The full version as the compiler writes it into the PTX it generates, e.g. "Compiler Build ID:
    /// CL-36424714; Cuda compilation tools, release 13.0, V13.0.88": two builds of one minor version
    /// may generate different code, so the cache key holds this, not `version`.
    pub full_version: Option<String>,
}

/// Keeps the preloaded libraries open for the life of the process.
struct Loaded {
    info: NvrtcInfo,
    _libs: Vec<libloading::Library>,
}

/// NVRTC's candidate folders, in order: `$KITTENS_NVRTC` (a folder or the library itself; absolute),
/// the user's toolchain folder (`scripts/install-nvrtc.sh`), then the CUDA toolkit's usual places.
fn candidate_dirs() -> Result<Vec<Candidate>, CudaError> {
    let mut c = candidates(
        "KITTENS_NVRTC",
        std::env::var_os("KITTENS_NVRTC"),
        Some("nvrtc/nvidia/cu13/lib"),
        &[
            "/usr/local/cuda/lib64",
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/usr/lib/x86_64-linux-gnu",
        ],
    )
    .map_err(|e| CudaError::NvrtcMissing(e.to_string()))?;
    c.dedup();
    Ok(c)
}

fn load() -> Result<Loaded, CudaError> {
    let mut tried = Vec::new();
    for c in candidate_dirs()? {
        let lib = c.dir.join("libnvrtc.so.13");
        if !usable(&c, std::slice::from_ref(&lib), &mut tried)
            .map_err(|e| CudaError::NvrtcMissing(e.to_string()))?
        {
            continue;
        }
        let mut libs = Vec::new();
        // The builtins library is opened by NVRTC by name; preload it from the same folder, checked
        // as the library is.
        let builtins = c.dir.join("libnvrtc-builtins.so.13.0");
        if std::fs::symlink_metadata(&builtins).is_ok() {
            match &c.cache {
                Some(cache) => crate::trust::check_cached_file(cache, &builtins),
                None => crate::trust::check_file(&builtins),
            }
            .map_err(|e| CudaError::NvrtcMissing(format!("not loaded: {e}")))?;
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
            full_version: full_version(),
        },
        _libs: libs,
    })
}

/// Compiles an empty kernel to PTX and reads the compiler's identification from the PTX header
/// (`// Compiler Build ID: ...`, `// Cuda compilation tools, release X.Y, VX.Y.Z`). None when the
/// header does not say.
fn full_version() -> Option<String> {
    let opts = ["--gpu-architecture=compute_90".to_string()];
    let ptx = compile_to_ptx(
        "extern \"C\" __global__ void kittens_version_probe() {}",
        &opts,
    )
    .ok()?;
    parse_ptx_version(&ptx)
}

/// The compiler identification lines of a PTX header, joined with "; ".
pub fn parse_ptx_version(ptx: &str) -> Option<String> {
    let lines: Vec<&str> = ptx
        .lines()
        .take_while(|l| l.starts_with("//") || l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("//").map(str::trim))
        .filter(|l| l.starts_with("Compiler Build ID") || l.starts_with("Cuda compilation tools"))
        .collect();
    lines
        .iter()
        .any(|l| l.starts_with("Cuda compilation tools"))
        .then(|| lines.join("; "))
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
fn options(target: &str, version: (i32, i32)) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={target}"),
        "-std=c++17".into(),
        "-default-device".into(),
        "-Xptxas=-v".into(),
        "-lineinfo".into(),
    ];
    // NVRTC 12.9 added a cache of its own: a hit skips ptxas, so the log has no `-v` report (registers,
    // spills) and the compile could not be checked. Seen on the H100 with NVRTC 13.0: the first compile
    // of a source on a machine reported, every later one (in a fresh process and with our own cache
    // empty) came back with an empty log. Our cache (`super::cache`) keeps the cubin with its report.
    if version >= (12, 9) {
        o.push("--no-cache".into());
    }
    o
}

/// The cache key: a SHA-256 over everything that decides the cubin — the source, the kernel reported on,
/// the target, the options and the compiler's full version.
fn cache_key(source: &str, kernel: &str, target: &str, opts: &[String], version: &str) -> String {
    let mut h = Sha256::new();
    for part in [source, kernel, target, &opts.join(" "), version] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The cache the environment names, checked once per process; when it cannot be used, compilation goes
/// on uncached and the reason is printed once.
fn default_cache() -> Option<&'static KernelCache> {
    static CACHE: OnceLock<Result<KernelCache, CacheError>> = OnceLock::new();
    match CACHE.get_or_init(|| KernelCache::from_env(Compiler::Nvrtc)) {
        Ok(c) => Some(c),
        Err(e) => {
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| eprintln!("NVRTC cache not used: {e}"));
            None
        }
    }
}

/// Compiles `source` for `target` (e.g. `sm_90a`) and reports on `kernel`, using the on-disk cache the
/// environment names ([`KernelCache::from_env`]). `dynamic_shared_bytes` is copied into the report so
/// it can say the kernel's whole shared footprint.
pub fn compile(
    source: &str,
    kernel: &str,
    target: &str,
    dynamic_shared_bytes: u32,
) -> Result<CudaModuleImage, CudaError> {
    compile_with_cache(
        source,
        kernel,
        target,
        dynamic_shared_bytes,
        default_cache(),
    )
}

/// The PTX NVRTC makes of `source` for `target`'s virtual architecture (`sm_90a` → `compute_90a`), with
/// the options [`compile`] uses: what the lowering's source became after the compiler's inlining and
/// constant folding, for tests of what the GPU is given (no GPU needed). Not cached.
pub fn ptx(source: &str, target: &str) -> Result<String, CudaError> {
    let Some(arch) = target.strip_prefix("sm_") else {
        return Err(CudaError::BadTarget(target.to_string()));
    };
    let info = nvrtc()?;
    let mut opts = options(&format!("compute_{arch}"), info.version);
    opts.retain(|o| o != "-Xptxas=-v");
    compile_to_ptx(source, &opts)
}

/// [`compile`] with an explicit cache, or none.
pub fn compile_with_cache(
    source: &str,
    kernel: &str,
    target: &str,
    dynamic_shared_bytes: u32,
    cache: Option<&KernelCache>,
) -> Result<CudaModuleImage, CudaError> {
    if !target.starts_with("sm_") {
        return Err(CudaError::BadTarget(target.to_string()));
    }
    let info = nvrtc()?;
    let opts = options(target, info.version);
    // Without the full version two builds could share a key: no cache then.
    let version = info.full_version.as_deref();
    let keyed = cache
        .zip(version)
        .map(|(c, v)| (c, cache_key(source, kernel, target, &opts, v)));
    if let Some((c, key)) = &keyed {
        // A cubin is an ELF file: anything else under the key is a miss.
        if let Some((cubin, mut report)) = c
            .get::<CudaCompileReport>(key)
            .filter(|(cubin, _)| cubin.starts_with(b"\x7fELF"))
        {
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
    report.nvrtc_version = version
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}.{}", info.version.0, info.version.1));
    report.dynamic_shared_bytes = dynamic_shared_bytes;
    // A cache that cannot be written only costs a recompile next time.
    if let Some((c, key)) = &keyed {
        let _ = c.put(key, &cubin, &report);
    }
    Ok(CudaModuleImage { cubin, report })
}

/// What an NVRTC compilation hands back.
#[derive(Clone, Copy)]
enum Output {
    Cubin,
    Ptx,
}

/// One NVRTC compilation: returns the cubin and the program log.
fn compile_uncached(source: &str, opts: &[String]) -> Result<(Vec<u8>, String), CudaError> {
    run_nvrtc(source, opts, Output::Cubin)
}

/// One NVRTC compilation to PTX (text).
fn compile_to_ptx(source: &str, opts: &[String]) -> Result<String, CudaError> {
    run_nvrtc(source, opts, Output::Ptx).map(|(ptx, _)| {
        String::from_utf8_lossy(&ptx)
            .trim_end_matches('\0')
            .to_string()
    })
}

fn run_nvrtc(source: &str, opts: &[String], out: Output) -> Result<(Vec<u8>, String), CudaError> {
    let src =
        CString::new(source).map_err(|_| CudaError::Nvrtc("source holds a NUL byte".into()))?;
    let name = CString::new("kittens.cu").expect("literal has no NUL");
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| CudaError::Nvrtc("an option holds a NUL byte".into()))?;
    let ptrs: Vec<*const std::ffi::c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let n_opts = i32::try_from(ptrs.len())
        .map_err(|_| CudaError::Nvrtc(format!("{} options", ptrs.len())))?;
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
        let status = nv::nvrtcCompileProgram(prog, n_opts, ptrs.as_ptr());
        let log = program_log(prog);
        let result = if status != nv::nvrtcResult::NVRTC_SUCCESS {
            Err(CudaError::Compile(log.clone()))
        } else {
            let mut size = 0usize;
            match out {
                Output::Cubin => check(nv::nvrtcGetCUBINSize(prog, &mut size), "nvrtcGetCUBINSize")
                    .and_then(|_| {
                        let mut bytes = vec![0u8; size];
                        check(
                            nv::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()),
                            "nvrtcGetCUBIN",
                        )
                        .map(|_| bytes)
                    }),
                Output::Ptx => check(nv::nvrtcGetPTXSize(prog, &mut size), "nvrtcGetPTXSize")
                    .and_then(|_| {
                        let mut bytes = vec![0u8; size];
                        check(
                            nv::nvrtcGetPTX(prog, bytes.as_mut_ptr().cast()),
                            "nvrtcGetPTX",
                        )
                        .map(|_| bytes)
                    }),
            }
        };
        nv::nvrtcDestroyProgram(&mut prog);
        result.map(|bytes| (bytes, log))
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
        // ptxas reports serialised `wgmma` chains (C7515, "Potential Performance Loss") as info, not
        // as a warning: it is the first thing to know about a Hopper kernel's speed.
        if l.contains("warning") || l.contains("Performance Loss") {
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

    /// NVRTC's own cache (12.9 on) would hide the ptxas report on a hit: it is turned off there, and
    /// only there (older NVRTCs reject the option).
    #[test]
    fn nvrtc_cache_off_where_it_exists() {
        let has = |v| options("sm_90a", v).iter().any(|o| o == "--no-cache");
        assert!(has((13, 0)) && has((12, 9)));
        assert!(!has((12, 8)) && !has((11, 8)));
    }

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

    #[test]
    fn reads_the_full_version_from_a_ptx_header() {
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-1234\n\
            // Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n\
            .version 9.0\n// Cuda compilation tools, release 99.9\n";
        assert_eq!(
            parse_ptx_version(ptx).as_deref(),
            Some("Compiler Build ID: CL-1234; Cuda compilation tools, release 13.0, V13.0.88")
        );
        assert_eq!(parse_ptx_version(".version 9.0\n"), None);
    }
}
