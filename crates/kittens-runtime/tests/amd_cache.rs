//! The AMDGPU clang's outputs in the compile cache, with the real compiler: a hit returns what the
//! compiler returned (the assembly its report is read from, the code object, the encoding listing),
//! a truncated, corrupted or foreign entry is recompiled (never returned), and each of the target,
//! the step and the compiler is part of the key.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::builtin_kernel_source;
use kittens_hw::Arch;
use kittens_runtime::amd::cached::{self, AmdArtifact, Step};
use kittens_runtime::amd::{analyze, AmdgpuClang};
use kittens_runtime::cache::{Compiler, KernelCache};

/// A private cache folder, removed when dropped.
struct Fresh {
    _dir: tempfile::TempDir,
    c: KernelCache,
}

fn fresh() -> Fresh {
    let t = tempfile::tempdir().unwrap();
    let c = KernelCache::at(&t.path().join("amd"), Compiler::AmdClang).unwrap();
    Fresh { _dir: t, c }
}

/// The entries of the cache folder: (output, record) paths, sorted.
fn entries(c: &KernelCache) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(c.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    v.sort();
    v
}

/// The assembly without HIP's `__hip_cuid_<hash>` symbol, which clang derives from the input file's
/// path (a fresh scratch folder per compilation): what two compilations of one source share.
fn without_cuid(asm: &str) -> String {
    asm.lines()
        .filter(|l| !l.contains("__hip_cuid_"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn prelude(arch: Arch) -> String {
    builtin_kernel_source("prelude_smoke", arch).unwrap()
}

#[test]
fn a_hit_is_what_the_compiler_returned() {
    let arch = Arch::Cdna4;
    let (clang, src, cache) = (clang_for(arch), prelude(arch), fresh());
    let first = clang
        .compile_with_cache(&src, arch, Some(&cache.c))
        .unwrap();
    assert!(!first.cached, "a fresh cache cannot hit");
    assert_eq!(
        entries(&cache.c).len(),
        2,
        "the assembly and the code object"
    );
    let hit = clang
        .compile_with_cache(&src, arch, Some(&cache.c))
        .unwrap();
    assert!(hit.cached);
    assert_eq!(
        (&hit.asm, &hit.code_object),
        (&first.asm, &first.code_object)
    );
    // The report a test reads (spills, registers, the hot loop) is the compiler's.
    let report = |asm: &str| serde_json::to_value(analyze(asm, arch, None).unwrap()).unwrap();
    assert_eq!(report(&hit.asm), report(&first.asm));
    // The assembly alone is the same entry as compile's first step.
    let asm = clang
        .compile_to_asm_with_cache(&src, arch, Some(&cache.c))
        .unwrap();
    assert_eq!(asm, first.asm);
    assert_eq!(entries(&cache.c).len(), 2);
    // Uncached, the compiler gives the same assembly but for the cuid symbol.
    let uncached = clang.compile_to_asm_with_cache(&src, arch, None).unwrap();
    assert_eq!(without_cuid(&uncached), without_cuid(&first.asm));
    assert_eq!(report(&uncached), report(&first.asm));
}

#[test]
fn truncated_corrupted_or_foreign_entries_are_recompiled() {
    let arch = Arch::Cdna3;
    let (clang, src, cache) = (clang_for(arch), prelude(arch), fresh());
    let first = clang
        .compile_with_cache(&src, arch, Some(&cache.c))
        .unwrap();
    let asm_key = cached::key(
        Step::Asm,
        arch.target(),
        &[
            "-x",
            "hip",
            "--cuda-device-only",
            "-nogpuinc",
            "-nogpulib",
            "-O3",
            "-S",
            &format!("--offload-arch={}", arch.target()),
        ],
        &[(&clang.clang.program, &clang.clang.prefix)],
        &src,
    )
    .expect("the compiler's identity is readable");
    let (out, record) = cache.c.entry_paths(&asm_key);
    assert!(
        out.exists() && record.exists(),
        "the key is the one compile used"
    );
    // Each planted entry differs from the compiler's assembly (a prefix, a changed byte, a marker
    // line), so a read that took it would show.
    let recompiled = |what: &str| {
        let again = clang.compile_to_asm_with_cache(&src, arch, Some(&cache.c));
        let again = again.unwrap();
        assert_eq!(without_cuid(&again), without_cuid(&first.asm), "{what}");
        assert!(!again.contains(PLANTED), "{what}");
        // The recompile replaced the entry: the next read is a hit with its bytes.
        let hit = clang.compile_to_asm_with_cache(&src, arch, Some(&cache.c));
        assert_eq!(hit.unwrap(), again, "{what}");
        again
    };
    const PLANTED: &str = "; planted";
    // Truncated output (a writer killed halfway).
    std::fs::write(&out, &first.asm.as_bytes()[..first.asm.len() / 3]).unwrap();
    let now = recompiled("truncated");
    // Same length, one byte changed.
    let mut bad = now.clone().into_bytes();
    bad[100] ^= 1;
    std::fs::write(&out, &bad).unwrap();
    recompiled("corrupted");
    // A whole, consistent entry of another step under this key (an ELF file where text belongs)
    // is not taken for assembly.
    let art = AmdArtifact {
        step: Step::CodeObject,
        target: arch.target().into(),
    };
    cache.c.put(&asm_key, &first.code_object, &art).unwrap();
    let now = recompiled("another step's entry");
    // A consistent entry of another target.
    let art = AmdArtifact {
        step: Step::Asm,
        target: "gfx950".into(),
    };
    let planted = format!("{now}\n{PLANTED}\n");
    cache.c.put(&asm_key, planted.as_bytes(), &art).unwrap();
    recompiled("another target's entry");
    // A whole entry whose record holds another compiler's report (NVRTC's).
    let log = "ptxas info    : Function properties for k\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 32 registers, used 0 barriers\n";
    let nvrtc = kittens_runtime::cuda::parse_ptxas_log(log, "k").unwrap();
    cache.c.put(&asm_key, planted.as_bytes(), &nvrtc).unwrap();
    recompiled("another compiler's record");
}

/// The target, the step and the compiler are all in the key: nothing is shared between them.
#[test]
fn target_step_and_compiler_are_in_the_key() {
    let cache = fresh();
    let zig = clang_for(Arch::Cdna3);
    let src = prelude(Arch::Cdna3);
    let gfx942 = zig.compile_with_cache(&src, Arch::Cdna3, Some(&cache.c));
    assert!(!gfx942.unwrap().cached);
    let gfx950 = zig
        .compile_with_cache(&src, Arch::Cdna4, Some(&cache.c))
        .unwrap();
    assert!(!gfx950.cached, "another target is another entry");
    assert!(gfx950.asm.contains("gfx950") && !gfx950.asm.contains("gfx942"));
    assert_eq!(entries(&cache.c).len(), 4);
    // The encoding listing of one assembly is a step of its own, cached like the others.
    let listing = zig.encoding_listing(&gfx950.asm, Arch::Cdna4).unwrap();
    assert!(listing.contains("encoding: ["), "{}", &listing[..200]);
    // Another compiler (Debian's clang-19, where installed; required in CI) is another key.
    if let Some(clang19) = debian_clang19() {
        let other: AmdgpuClang = clang19;
        assert_ne!(
            cached::identity((&other.clang.program, &other.clang.prefix)),
            cached::identity((&zig.clang.program, &zig.clang.prefix)),
            "two compilers, two identities"
        );
        let out = other.compile_with_cache(&src, Arch::Cdna3, Some(&cache.c));
        assert!(!out.unwrap().cached, "another compiler is another entry");
        assert_eq!(entries(&cache.c).len(), 6);
    }
}

/// A compiler whose identity cannot be read (no `--version`) is run uncached.
#[test]
fn an_unreadable_identity_is_no_key() {
    let t = tempfile::tempdir().unwrap();
    let fake = t.path().join("clang");
    std::fs::write(&fake, b"#!/bin/sh\nexit 1\n").unwrap();
    let mut perm = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o700);
    std::fs::set_permissions(&fake, perm).unwrap();
    let tool = (fake.as_path(), &[][..]);
    assert_eq!(cached::identity(tool), None);
    assert_eq!(cached::key(Step::Asm, "gfx942", &[], &[tool], "x"), None);
}
