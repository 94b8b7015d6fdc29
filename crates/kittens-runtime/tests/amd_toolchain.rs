//! Finding and running the AMDGPU compiler: search order, the error that says what
//! to install, the code object's ELF header, Debian clang-19 for gfx942, and the analysis of a loop.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::{builtin_kernel_source, translation_unit};
use kittens_hw::Arch;
use kittens_runtime::amd::{analyze, AmdError, ClangSource, ToolchainSearch, ZIGLANG_VERSION};
use std::path::{Path, PathBuf};

/// A throwaway directory tree with empty files standing in for compilers.
fn fake_tree(tag: &str, files: &[&str]) -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("kittens-amd-search-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for f in files {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"").unwrap();
    }
    root
}

fn search(root: &Path, env: bool) -> ToolchainSearch {
    ToolchainSearch {
        env_override: env.then(|| root.join("env/bin/clang")),
        rocm_clang: root.join("rocm/llvm/bin/clang"),
        toolchains: Ok(root.join("cache/toolchains")),
        debian_clang: root.join("debian/clang-19"),
    }
}

#[test]
fn search_order_is_env_rocm_cache_debian() {
    let all = [
        "env/bin/clang",
        "rocm/llvm/bin/clang",
        "rocm/llvm/bin/ld.lld",
        "cache/toolchains/ziglang/ziglang/zig",
        "debian/clang-19",
    ];
    let root = fake_tree("order", &all);
    let found = search(&root, true).find(Arch::Cdna4).unwrap();
    assert_eq!(
        (found.source, found.clang.program.clone()),
        (ClangSource::Env, root.join("env/bin/clang"))
    );
    let found = search(&root, false).find(Arch::Cdna4).unwrap();
    assert_eq!(found.source, ClangSource::Rocm);
    assert_eq!(found.lld.program, root.join("rocm/llvm/bin/ld.lld"));
    std::fs::remove_dir_all(root.join("rocm")).unwrap();
    let found = search(&root, false).find(Arch::Cdna4).unwrap();
    assert_eq!(
        (found.source, found.clang.prefix.clone()),
        (ClangSource::Ziglang, vec!["clang".to_string()])
    );
    assert_eq!(found.lld.prefix, vec!["ld.lld".to_string()]);
    std::fs::remove_dir_all(root.join("cache")).unwrap();
    assert_eq!(
        search(&root, false).find(Arch::Cdna3).unwrap().source,
        ClangSource::DebianClang19
    );
    // clang-19 predates gfx950: with only it present, gfx950 has no compiler and the error says why.
    match search(&root, false).find(Arch::Cdna4) {
        Err(e @ AmdError::ClangNotFound { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("install-amdgpu-clang.sh")
                    && msg.contains(ZIGLANG_VERSION)
                    && msg.contains("gfx950"),
                "{msg}"
            );
        }
        other => panic!("expected ClangNotFound, got {other:?}"),
    }
    assert!(matches!(
        search(&root, false).find(Arch::Hopper),
        Err(AmdError::UnknownTarget(_))
    ));
    std::fs::remove_dir_all(root).unwrap();
}

/// EM_AMDGPU and the EF_AMDGPU_MACH values of gfx942 (0x4c) and gfx950 (0x4f) (AMDGPUUsage, "ELF Header").
#[test]
fn code_object_is_an_amdgpu_elf_for_the_target() {
    for (arch, mach) in [(Arch::Cdna3, 0x4c_u32), (Arch::Cdna4, 0x4f)] {
        let src = builtin_kernel_source("prelude_smoke", arch).unwrap();
        let out = clang_for(arch).compile(&src, arch).expect("compile + link");
        let elf = &out.code_object;
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(
            u16::from_le_bytes([elf[16], elf[17]]),
            3,
            "ET_DYN shared object"
        );
        assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 224, "EM_AMDGPU");
        let flags = u32::from_le_bytes([elf[48], elf[49], elf[50], elf[51]]);
        assert_eq!(flags & 0xff, mach, "EF_AMDGPU_MACH for {}", arch.target());
    }
}

/// docs/architecture.md §6: Debian's clang-19 must build the gfx942 source too. Required when `CI=true`
/// (scripts/install-amdgpu-clang.sh installs it there); skipped with a note elsewhere.
#[test]
fn debian_clang19_builds_gfx942() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    assert_eq!(clang.source, ClangSource::DebianClang19);
    assert!(clang.version().unwrap().contains("version 19"));
    let src = builtin_kernel_source("prelude_smoke", Arch::Cdna3).unwrap();
    let out = clang
        .compile(&src, Arch::Cdna3)
        .expect("clang-19 compiles the gfx942 prelude");
    let report = analyze(&out.asm, Arch::Cdna3, None).unwrap();
    assert!(report.instructions["v_mfma_f32_16x16x16_bf16"] > 0);
    assert!(report.within_budget());
}

/// The hot loop is the innermost backward branch: an outer loop around an inner loop of exactly two
/// MFMAs and two LDS reads per trip (unrolling disabled) must report those counts.
#[test]
fn hot_loop_is_the_innermost_loop() {
    let src = translation_unit(
        r#"using namespace kittens;
extern "C" __global__ void loopy(f32x4* out, u32 n, u32 m) {
  __shared__ u32x2 smem[256];
  const u32 base = lds_addr(&smem[0]) + thread_id() * 8;
  f32x4 c = {0, 0, 0, 0};
  for (u32 j = 0; j < m; ++j) {
    s_barrier();
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < n; ++i) {
      const u32x2 a = ds_read_b64<0>(base + i * 64);
      const u32x2 b = ds_read_b64<8>(base + i * 64);
      s_waitcnt_lgkmcnt<0>();
      mfma_f32_16x16x16_bf16(__builtin_bit_cast(b16x4, a), __builtin_bit_cast(b16x4, b), c);
      mfma_f32_16x16x16_bf16(__builtin_bit_cast(b16x4, b), __builtin_bit_cast(b16x4, a), c);
    }
  }
  out[thread_id()] = c;
}"#,
    );
    for arch in [Arch::Cdna3, Arch::Cdna4] {
        let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
        let r = analyze(&asm, arch, Some("loopy")).unwrap();
        let hot = r.hot_loop.expect("a loop");
        assert_eq!(hot.mix.mfma, 2, "{}", arch.target());
        assert_eq!(hot.mix.opcodes.get("ds_read_b64"), Some(&2));
        assert_eq!(hot.mix.s_waitcnt, 1);
        assert_eq!(
            hot.mix.s_barrier, 0,
            "the barrier belongs to the outer loop"
        );
        assert_eq!(r.mix.mfma, 2);
        assert_eq!(r.lds_bytes, 2048);
    }
}

/// The Rust installer (what `scripts/install-amdgpu-clang.sh` does) into a fresh cache; downloads
/// ~50 MB from PyPI, hence ignored by default: `cargo test -p kittens-runtime --test amd_toolchain
/// -- --ignored`.
#[test]
#[ignore]
fn installs_ziglang_into_a_fresh_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("toolchains");
    let zig = kittens_runtime::amd::install_ziglang(&cache).expect("pip install ziglang");
    let search = ToolchainSearch {
        env_override: None,
        rocm_clang: "/nonexistent".into(),
        toolchains: Ok(cache.clone()),
        debian_clang: "/nonexistent".into(),
    };
    let clang = search.find(Arch::Cdna4).expect("found in the fresh cache");
    assert_eq!(
        (clang.source, clang.clang.program.clone()),
        (ClangSource::Ziglang, zig.clone())
    );
    assert!(clang.version().unwrap().contains("clang version 22"));
    // Idempotent: a second call finds it without reinstalling.
    assert_eq!(kittens_runtime::amd::install_ziglang(&cache).unwrap(), zig);
}
