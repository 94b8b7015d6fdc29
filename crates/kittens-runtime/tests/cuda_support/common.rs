//! Shared by the cuda_* tests: NVRTC (installed into the user's cache by scripts/install-nvrtc.sh when
//! none is found) and the compile cache a test compiles through ([`test_cache`]: the environment's, so
//! that a kernel several tests compile is compiled once per test run; [`fresh_cache`] for the tests of
//! the cache itself and of a first compile).
#![allow(dead_code)]

use std::path::PathBuf;

use kittens_runtime::cuda::{nvrtc, Compiler, KernelCache};

/// Finds NVRTC, installing it first if needed; panics (never skips) when it cannot be had.
pub fn ensure_nvrtc() {
    if nvrtc().is_ok() {
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let ok = std::process::Command::new("bash")
        .arg(format!("{root}/scripts/install-nvrtc.sh"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "scripts/install-nvrtc.sh failed");
    if let Err(e) = nvrtc() {
        panic!("NVRTC not loadable after installing it: {e}");
    }
}

/// An empty folder of this process, unique per `tag`.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kittens-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A compile cache a test holds: a fresh folder (removed when dropped) or the environment's (kept).
pub struct TestCache {
    cache: KernelCache,
    fresh: bool,
}

impl std::ops::Deref for TestCache {
    type Target = KernelCache;
    fn deref(&self) -> &KernelCache {
        &self.cache
    }
}

impl Drop for TestCache {
    fn drop(&mut self) {
        if self.fresh {
            let _ = std::fs::remove_dir_all(self.cache.dir());
        }
    }
}

/// A compile cache in a fresh folder, removed when dropped: every first compile in it runs NVRTC.
pub fn fresh_cache(tag: &str) -> TestCache {
    TestCache {
        cache: KernelCache::at(&fresh_dir(tag), Compiler::Nvrtc)
            .expect("a private temporary cache folder"),
        fresh: true,
    }
}

/// The compile cache the environment names (`KITTENS_COMPILE_CACHE`, which scripts/test.sh points at a
/// folder of its own run, else the user's cache): a kernel that another test compiled with the same
/// source, options and NVRTC (all in the key, `kittens_runtime::cache`) is a hit with the cubin and
/// report NVRTC returned then. A fresh folder of `tag`'s when the environment's cannot be used.
pub fn test_cache(tag: &str) -> TestCache {
    match KernelCache::from_env(Compiler::Nvrtc) {
        Ok(cache) => TestCache {
            cache,
            fresh: false,
        },
        Err(e) => {
            eprintln!("the environment's compile cache is not used ({e}): a fresh one");
            fresh_cache(tag)
        }
    }
}

/// Compiles a lowered kernel with NVRTC for sm_90a and checks what every block must satisfy: no spills
/// or stack, the H100's shared memory, no ptxas performance warning (C75xx: setmaxnreg ignored, wgmma
/// serialized).
pub fn compile_clean(
    l: &kittens_codegen::Lowered,
    cache: &kittens_runtime::cuda::KernelCache,
    what: &str,
) -> kittens_runtime::cuda::CudaCompileReport {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let image = kittens_runtime::cuda::compile_with_cache(
        &l.source,
        &l.entry,
        "sm_90a",
        l.dynamic_shared_bytes(),
        Some(cache),
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let r = image.report;
    assert_eq!(
        (r.spill_stores, r.spill_loads, r.stack_frame),
        (0, 0, 0),
        "{what}: {r:?}"
    );
    assert!(
        r.dynamic_shared_bytes <= h100.shared_bytes_per_block,
        "{what}"
    );
    assert!(
        r.warnings
            .iter()
            .all(|w| !w.contains("C75") && !w.contains("serialized")),
        "{what}: {:?}",
        r.warnings
    );
    r
}
