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

/// The child's side of [`two_processes_compile_into_one_fresh_cache_at_once`]: set in its environment.
const RACE_DIR: &str = "KITTENS_TEST_CACHE_RACE_DIR";

/// Two processes (as two ranks of a distributed job) open a cache folder that does not exist yet and
/// compile the same kernel into it at the same moment: both succeed with the same cubin, and the folder
/// ends with one whole entry and no temporaries. The test binary runs itself twice as the children; a
/// start file that appears only once both are running makes them race.
#[test]
fn two_processes_compile_into_one_fresh_cache_at_once() {
    ensure_nvrtc();
    if let Some(dir) = std::env::var_os(RACE_DIR) {
        let dir = std::path::PathBuf::from(dir);
        let go = dir.with_extension("go");
        let t0 = std::time::Instant::now();
        while !go.exists() {
            assert!(
                t0.elapsed().as_secs() < 120,
                "the start file never appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Both children create the folder (recursively, at once) and compile.
        let cache =
            kittens_runtime::cuda::KernelCache::at(&dir, kittens_runtime::cuda::Compiler::Nvrtc)
                .expect("the cache opens");
        let image = compile_in(&cache);
        use std::fmt::Write;
        let mut hex = String::new();
        for b in &image.cubin {
            let _ = write!(hex, "{b:02x}");
        }
        println!("RACE-CUBIN {hex}");
        return;
    }
    let base = cuda_common::fresh_dir("race");
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join("cache").join("cuda"); // neither level exists yet
    let go = dir.with_extension("go");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "two_processes_compile_into_one_fresh_cache_at_once",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RACE_DIR, &dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("the test binary starts again")
        })
        .collect();
    std::fs::create_dir_all(go.parent().unwrap()).unwrap();
    std::fs::write(&go, b"go").unwrap();
    let cubins: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "a child failed: {}\n{text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            text.lines()
                .find_map(|l| l.split_once("RACE-CUBIN ").map(|(_, hex)| hex.to_string()))
                .expect("the child reports its cubin")
        })
        .collect();
    assert_eq!(cubins[0], cubins[1], "both processes got the same cubin");
    let cache =
        kittens_runtime::cuda::KernelCache::at(&dir, kittens_runtime::cuda::Compiler::Nvrtc)
            .unwrap();
    let hit = compile_in(&cache);
    assert!(hit.report.cached, "the entry the children left is whole");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "one cubin and one record, no temporaries: {names:?}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}
