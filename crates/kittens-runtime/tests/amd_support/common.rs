//! Shared by the amd_* tests: a compiler for a target, installing PyPI ziglang into the user's toolchain
//! folder when none is found (what scripts/install-amdgpu-clang.sh does in CI).
#![allow(dead_code)]

use kittens_hw::Arch;
use kittens_runtime::amd::{find_clang, install_ziglang_for_user, AmdgpuClang, ToolchainSearch};
use std::path::PathBuf;

pub fn clang_for(arch: Arch) -> AmdgpuClang {
    find_clang(arch).unwrap_or_else(|_| {
        install_ziglang_for_user()
            .expect("installing PyPI ziglang into the user's toolchain folder");
        find_clang(arch).expect("an AMDGPU clang after installing ziglang")
    })
}

/// Debian's clang-19 alone (the gfx942 source must also build with it). Where it is missing: a failure
/// when `CI=true` (scripts/install-amdgpu-clang.sh installs it there, so a missing compiler is a broken
/// CI, not a reason to pass), `None` with a note elsewhere.
pub fn debian_clang19() -> Option<AmdgpuClang> {
    let only_clang19 = ToolchainSearch {
        env_override: None,
        rocm_clang: PathBuf::from("/nonexistent/clang"),
        toolchains: Ok(PathBuf::from("/nonexistent")),
        debian_clang: PathBuf::from("clang-19"),
    };
    match only_clang19.find(Arch::Cdna3) {
        Ok(c) => Some(c),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but Debian's clang-19 is not usable: {e}")
        }
        Err(e) => {
            eprintln!("clang-19 not found ({e}): skipped outside CI");
            None
        }
    }
}

/// Value of a `; Key: N` comment the AMDGPU asm printer writes after each kernel.
pub fn printer_comment(asm: &str, key: &str) -> u32 {
    asm.lines()
        .find_map(|l| {
            l.strip_prefix(&format!("; {key}:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no `; {key}:` comment in the assembly"))
}

/// Compiles kernel `k` for `t` (gfx942 or gfx950) with the target's clang, and on gfx942 also with
/// Debian's clang-19 where installed, and asserts no VGPR or SGPR spill and no scratch; prints each
/// compiler's report under `label`.
pub fn assert_compiles_without_spills(k: &kittens_ir::Kernel, t: kittens_hw::Target, label: &str) {
    let arch = t.gpu().unwrap().arch;
    let src = kittens_codegen::hip::lower(k, arch).unwrap().source;
    let mut clangs = vec![clang_for(arch)];
    if t == kittens_hw::Target::Gfx942 {
        clangs.extend(debian_clang19());
    }
    for c in clangs {
        let asm = c.compile_to_asm(&src, arch).unwrap();
        let ident = kittens_codegen::cexpr::ident(&k.name);
        let r = kittens_runtime::amd::analyze(&asm, arch, Some(&ident)).unwrap();
        eprintln!("{label} {t}: {}", serde_json::to_string(&r).unwrap());
        assert_eq!(
            (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
            (0, 0, 0),
            "{label} {t}"
        );
    }
}
