//! Shared by the amd_* tests: a compiler for a target, installing PyPI ziglang into the project cache
//! when none is found (what scripts/install-amdgpu-clang.sh does in CI).
#![allow(dead_code)]

use kittens_hw::Arch;
use kittens_runtime::amd::{cache_dir, find_clang, install_ziglang, AmdgpuClang};

pub fn clang_for(arch: Arch) -> AmdgpuClang {
    find_clang(arch).unwrap_or_else(|_| {
        install_ziglang(&cache_dir()).expect("installing PyPI ziglang into the project cache");
        find_clang(arch).expect("an AMDGPU clang after installing ziglang")
    })
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
