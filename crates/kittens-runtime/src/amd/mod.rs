//! AMD CDNA toolchain and code-object analysis, with no ROCm install (docs/architecture.md principle 5).
//!
//! - [`toolchain`]: find an AMDGPU clang ($KITTENS_AMDGPU_CLANG, ROCm's, PyPI `ziglang`'s in the user's
//!   toolchain folder, Debian's clang-19 for gfx942; every one checked by [`crate::trust`]), install
//!   `ziglang` there, and compile HIP source to assembly and a code object (each step through the
//!   compile cache, [`cached`]);
//! - [`analysis`]: read the AMDHSA metadata and the assembly listing into a [`CodeObjectReport`]
//!   (registers, spills, scratch, LDS, waves per SIMD, instruction mix of the whole kernel and of the
//!   hot loop);
//! - [`emulate`]: the lowered HIP compiled for the host against an emulation header and run on given
//!   tensors (the runner's `hip-emu` backend, `kittens run --backend hip-emu`).
//!
//! No AMD GPU exists for this project: everything here is what the compiler says, never a speed.

pub mod analysis;
pub mod bench;
pub mod blas;
pub mod cached;
pub mod emulate;
pub mod hip;
pub mod toolchain;

pub use analysis::{analyze, CodeObjectReport, InstructionMix, LoopReport};
pub use toolchain::{
    find_clang, install_ziglang, install_ziglang_for_user, toolchains_dir, zig_in, AmdgpuClang,
    ClangSource, CompiledHip, ToolchainSearch, ZIGLANG_VERSION,
};

use kittens_hw::Arch;
use std::path::PathBuf;
use thiserror::Error;

/// Everything that can go wrong finding a compiler, compiling, or reading its output.
#[derive(Debug, Error)]
pub enum AmdError {
    /// The target is not one of the AMD targets (gfx942, gfx950).
    #[error("`{0}` is not an AMD target (gfx942 or gfx950)")]
    UnknownTarget(String),
    /// No usable AMDGPU clang was found; the message says what to run.
    #[error(
        "no AMDGPU clang for {target} found (looked at: {looked}). Install one with \
         `scripts/install-amdgpu-clang.sh` (PyPI ziglang {zig} into {cache}), or set \
         KITTENS_AMDGPU_CLANG to a clang that targets {target}{hint}"
    )]
    ClangNotFound {
        target: &'static str,
        looked: String,
        cache: String,
        zig: &'static str,
        hint: &'static str,
    },
    /// A compiler was found where it cannot be trusted (a relative path, or a file or folder others
    /// may write); the message names the path and the reason.
    #[error("{what} is not used: {source}")]
    Untrusted {
        what: String,
        source: crate::trust::TrustError,
    },
    /// A program could not be started.
    #[error("could not run `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// A program ran and failed.
    #[error("`{command}` failed with {status}:\n{stderr}")]
    ToolFailed {
        command: String,
        status: String,
        stderr: String,
    },
    /// Reading or writing a temporary or cache file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The assembly lacks what the analysis needs.
    #[error("code-object analysis: {0}")]
    Analysis(String),
}

/// The GPU model whose figures the analysis uses for an AMD architecture: the one its target is
/// configured for (`kittens_hw::Target::gpu`: MI300X for gfx942, MI350X for gfx950).
pub fn gpu_of(arch: Arch) -> Result<&'static kittens_hw::Gpu, AmdError> {
    match kittens_hw::Target::from(arch).gpu() {
        Some(g) if arch.is_amd() => Ok(g),
        _ => Err(AmdError::UnknownTarget(arch.target().to_string())),
    }
}
