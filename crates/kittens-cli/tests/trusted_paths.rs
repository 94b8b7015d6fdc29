//! Where the `kittens` binary takes compilers and libraries from, with files planted in temporary
//! folders: a compiler in a cache folder that others may write is refused and never run (and the same
//! compiler in a private cache is), a relative path in an explicit variable is refused with a message
//! naming the variable, and the binary holds no path of the tree it was built in (such a path would
//! be trusted on every machine the binary is copied to).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Every variable that chooses a compiler, a library or the cache.
const CHOOSERS: [&str; 12] = [
    "KITTENS_CACHE",
    "KITTENS_COMPILE_CACHE",
    "XDG_CACHE_HOME",
    "KITTENS_AMDGPU_CLANG",
    "KITTENS_HOST_CXX",
    "KITTENS_NVRTC",
    "KITTENS_CUBLAS",
    "KITTENS_HIP_LIB",
    "KITTENS_HIPBLASLT_LIB",
    "KITTENS_ROCBLAS_LIB",
    "KITTENS_CACHE_MAX_BYTES",
    "CI",
];

fn kittens(cwd: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kittens"));
    c.args(args).current_dir(cwd);
    for v in CHOOSERS {
        c.env_remove(v);
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().expect("kittens runs")
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A cache folder holding a fake `zig` where scripts/install-amdgpu-clang.sh puts ziglang's: a shell
/// script that, when run, leaves `marker` behind.
fn plant_zig(cache: &Path, marker: &Path) {
    let zig_dir = cache.join("toolchains/ziglang/ziglang");
    std::fs::create_dir_all(&zig_dir).unwrap();
    for d in [
        cache.to_path_buf(),
        cache.join("toolchains"),
        cache.join("toolchains/ziglang"),
        zig_dir.clone(),
    ] {
        chmod(&d, 0o700);
    }
    let zig = zig_dir.join("zig");
    std::fs::write(
        &zig,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .unwrap();
    chmod(&zig, 0o755);
}

/// gfx950 has no Debian clang-19 fallback and this machine no ROCm, so the cache's zig is the
/// candidate the search reaches.
#[test]
fn a_planted_compiler_in_a_shared_cache_is_refused_and_not_run() {
    assert!(
        !Path::new("/opt/rocm/llvm/bin/clang").exists(),
        "this test needs a machine without ROCm's clang"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (cache, marker) = (tmp.path().join("cache"), tmp.path().join("zig-ran"));
    plant_zig(&cache, &marker);
    let cache_s = cache.to_str().unwrap();
    let compile = ["compile", "gemm_bf16", "--target", "gfx950", "--json"];
    for (mode, why) in [
        (0o777, "writable by every user"),
        (0o1777, "writable by every user"),
        (0o770, "writable by its group"),
    ] {
        chmod(&cache, mode);
        let out = kittens(tmp.path(), &[("KITTENS_CACHE", cache_s)], &compile);
        let t = text(&out);
        assert!(!out.status.success(), "{t}");
        assert!(t.contains(why) && t.contains(cache_s), "mode {mode:o}: {t}");
        assert!(!marker.exists(), "mode {mode:o}: the planted zig ran");
    }
    // The same folder made private: the file is trusted and run (it is no compiler, so the
    // compile fails, after running it).
    chmod(&cache, 0o700);
    let out = kittens(tmp.path(), &[("KITTENS_CACHE", cache_s)], &compile);
    assert!(!out.status.success());
    assert!(
        marker.exists(),
        "a private cache's zig is used: {}",
        text(&out)
    );
    // A group-writable zig in a private cache is refused too.
    std::fs::remove_file(&marker).unwrap();
    let zig = cache.join("toolchains/ziglang/ziglang/zig");
    chmod(&zig, 0o775);
    let out = kittens(tmp.path(), &[("KITTENS_CACHE", cache_s)], &compile);
    assert!(
        text(&out).contains("writable by its group"),
        "{}",
        text(&out)
    );
    assert!(!marker.exists());
    // Through HOME (no KITTENS_CACHE), the rule is the same.
    let home = tmp.path().join("home");
    plant_zig(&home.join(".cache/kittens"), &marker);
    chmod(&home, 0o777);
    let out = kittens(tmp.path(), &[("HOME", home.to_str().unwrap())], &compile);
    assert!(
        text(&out).contains("writable by every user"),
        "{}",
        text(&out)
    );
    assert!(!marker.exists());
}

/// An explicit variable with a relative path would load or run a file of whatever folder the command
/// runs in: refused, and the message names the variable. Each case plants the named file in the
/// current folder. (KITTENS_HIPBLASLT_LIB and KITTENS_ROCBLAS_LIB are read only once a HIP runtime
/// loaded, which no machine of this project has: kittens-runtime's `amd::blas` tests cover them.)
#[test]
fn relative_paths_in_explicit_variables_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    for f in ["evil.so", "clang", "c++"] {
        std::fs::write(cwd.join(f), b"").unwrap();
    }
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "KITTENS_HIP_LIB",
            "./evil.so",
            &["bench", "gemm_bf16", "--target", "gfx950", "--json"],
        ),
        (
            "KITTENS_AMDGPU_CLANG",
            "./clang",
            &["compile", "gemm_bf16", "--target", "gfx950", "--json"],
        ),
        (
            "KITTENS_HOST_CXX",
            "c++",
            &[
                "run",
                "gemm_bf16",
                "--backend",
                "hip-emu",
                "--target",
                "gfx950",
                "--m",
                "64",
                "--n",
                "64",
                "--k",
                "64",
            ],
        ),
        (
            "KITTENS_NVRTC",
            ".",
            &["compile", "gemm_bf16", "--target", "sm_90a", "--json"],
        ),
    ];
    for (var, value, args) in cases {
        let out = kittens(cwd, &[(var, value)], args);
        let t = text(&out);
        assert!(
            t.contains(&format!("{var}={value} is a relative path")),
            "{var}: {t}"
        );
    }
}

/// The sections of an ELF64 file whose bytes a running program can see: every section with file
/// contents except the `.debug_*` ones (DWARF names the build folder by design, and a debug build
/// carries it; nothing at run time reads it). (name, bytes)
fn loaded_sections(elf: &[u8]) -> Vec<(String, &[u8])> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 binary");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .filter_map(|i| {
            let h = header(i);
            let name_at = strtab + u32_at(h);
            let end = elf[name_at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[name_at..name_at + end]).into_owned();
            const SHT_NOBITS: usize = 8;
            let (kind, off, size) = (u32_at(h + 4), u64_at(h + 0x18), u64_at(h + 0x20));
            (kind != SHT_NOBITS && !name.starts_with(".debug"))
                .then(|| (name, &elf[off..off + size]))
        })
        .collect()
}

/// No path of the build tree in what the binary loads: a binary (or wheel) built in one folder and run
/// on another machine would otherwise trust whatever is at that path there.
#[test]
fn the_binary_holds_no_path_of_the_build_tree() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_kittens")).expect("the binary");
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tree = tree.canonicalize().unwrap();
    let tree = tree.to_str().unwrap().as_bytes();
    assert!(tree.len() > 1);
    let sections = loaded_sections(&bin);
    assert!(
        sections.iter().any(|(n, _)| n == ".rodata"),
        "parsed the section table"
    );
    for (name, bytes) in sections {
        if let Some(at) = bytes.windows(tree.len()).position(|w| w == tree) {
            let end = (at + tree.len() + 80).min(bytes.len());
            panic!(
                "section {name} of the binary holds {:?}",
                String::from_utf8_lossy(&bytes[at..end])
            );
        }
    }
}
