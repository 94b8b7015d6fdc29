//! The NVRTC compile cache with the real compiler: a hit returns exactly what was compiled, a truncated
//! or corrupted cubin on disk is recompiled (never returned), concurrent compiles of one kernel into one
//! cache all succeed, and the key holds NVRTC's full version.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::{ensure_nvrtc, fresh_cache};
use kittens_runtime::cuda::{compile_with_cache, nvrtc};

/// A small kernel that still gives ptxas something to report.
const KERNEL: &str = r#"
extern "C" __global__ void cache_probe(const float* x, float* y, unsigned n) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i] + 1.0f;
}
"#;

fn compile_in(
    cache: &kittens_runtime::cuda::KernelCache,
) -> kittens_runtime::cuda::CudaModuleImage {
    compile_with_cache(KERNEL, "cache_probe", "sm_90a", 0, Some(cache))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn nvrtc_reports_its_full_version() {
    ensure_nvrtc();
    let info = nvrtc().unwrap();
    let full = info
        .full_version
        .as_deref()
        .expect("PTX header names the compiler");
    let (major, minor) = info.version;
    eprintln!("NVRTC {major}.{minor} at {}: {full}", info.path);
    assert!(
        full.contains(&format!("release {major}.{minor}, V{major}.{minor}.")),
        "{full} vs nvrtcVersion {major}.{minor}"
    );
}

#[test]
fn truncated_cache_entry_is_recompiled() {
    ensure_nvrtc();
    let cache = fresh_cache("nvrtc-trunc");
    let first = compile_in(&cache);
    assert!(!first.report.cached, "a fresh cache cannot hit");
    let hit = compile_in(&cache);
    assert!(hit.report.cached);
    assert_eq!(hit.cubin, first.cubin);
    let cubin_file = std::fs::read_dir(cache.dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "cubin"))
        .expect("the entry's cubin");
    // A writer killed halfway (the old in-place write) leaves a prefix of the cubin.
    std::fs::write(&cubin_file, &first.cubin[..first.cubin.len() / 3]).unwrap();
    let again = compile_in(&cache);
    assert!(!again.report.cached, "a truncated cubin must be recompiled");
    assert_eq!(again.cubin, first.cubin);
    // The recompile repaired the entry.
    assert_eq!(std::fs::read(&cubin_file).unwrap(), first.cubin);
    assert!(compile_in(&cache).report.cached);
    // Same length, corrupted content.
    let mut bad = first.cubin.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(&cubin_file, &bad).unwrap();
    let again = compile_in(&cache);
    assert!(!again.report.cached && again.cubin == first.cubin);
}

#[test]
fn concurrent_compiles_of_one_kernel_all_succeed() {
    ensure_nvrtc();
    let cache = fresh_cache("nvrtc-conc");
    let images: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| compile_in(&cache))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    assert!(images.iter().all(|i| i.cubin == images[0].cubin));
    let hit = compile_in(&cache);
    assert!(hit.report.cached && hit.cubin == images[0].cubin);
    let names: Vec<String> = std::fs::read_dir(cache.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "one cubin and one record, no temporaries: {names:?}"
    );
}
