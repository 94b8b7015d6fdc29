//! Compile targets: the one place a target name (`gfx942`, `gfx950`, `sm_90a`, `cpu`) is parsed and
//! turned into the GPU models it serves and their budgets.
//!
//! A target is what a kernel is built and lowered for; a GPU model ([`Gpu`]) is a product with figures.
//! Several models share one target (gfx942: MI300X and MI325X), so a kernel configured for a target is
//! configured for the most constrained model of it ([`Target::gpu`]): the code object then fits every
//! GPU the target serves.

use crate::gpu::{Arch, Gpu, ALL};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Where a kernel runs: an AMD or NVIDIA compiler target, or the CPU interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Target {
    /// AMD CDNA3, HIP (MI300X, MI325X).
    #[serde(rename = "gfx942")]
    Gfx942,
    /// AMD CDNA4, HIP (MI350X, MI355X).
    #[serde(rename = "gfx950")]
    Gfx950,
    /// NVIDIA Hopper, CUDA (H100, H200).
    #[serde(rename = "sm_90a")]
    Sm90a,
    /// The tile-language interpreter on the host.
    #[serde(rename = "cpu")]
    Cpu,
}

/// The language a target's kernels are written out in. (What executes them is a
/// `kittens_runtime::runner::Backend`: the interpreter, an emulator or a GPU.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// HIP C++ through an AMDGPU clang.
    Hip,
    /// CUDA C++ through NVRTC.
    Cuda,
    /// No source: the interpreter runs the tile IR.
    Cpu,
}

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Language::Hip => "HIP",
            Language::Cuda => "CUDA",
            Language::Cpu => "interpreter",
        }
    }
}

/// A target name that is none of [`Target::ALL`]; the message lists every valid name with its language.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown target `{0}`; valid targets: {list}", list = Target::valid_names())]
pub struct UnknownTarget(pub String);

impl Target {
    /// Every target, GPU targets first.
    pub const ALL: [Target; 4] = [Target::Gfx942, Target::Gfx950, Target::Sm90a, Target::Cpu];

    /// The name used on the command line and by the compilers.
    pub fn name(self) -> &'static str {
        match self {
            Target::Gfx942 => "gfx942",
            Target::Gfx950 => "gfx950",
            Target::Sm90a => "sm_90a",
            Target::Cpu => "cpu",
        }
    }

    pub fn language(self) -> Language {
        match self {
            Target::Gfx942 | Target::Gfx950 => Language::Hip,
            Target::Sm90a => Language::Cuda,
            Target::Cpu => Language::Cpu,
        }
    }

    /// The instruction-set family of the target's GPUs; `None` for the CPU.
    pub fn arch(self) -> Option<Arch> {
        match self {
            Target::Gfx942 => Some(Arch::Cdna3),
            Target::Gfx950 => Some(Arch::Cdna4),
            Target::Sm90a => Some(Arch::Hopper),
            Target::Cpu => None,
        }
    }

    /// The catalog's GPUs this target serves, in catalog order (empty for the CPU).
    pub fn gpus(self) -> Vec<&'static Gpu> {
        ALL.into_iter()
            .filter(|g| Some(g.arch) == self.arch())
            .collect()
    }

    /// The GPU a kernel for this target is configured for: of the target's GPUs, the one with the least
    /// shared memory per block (the first in the catalog on a tie), so the result fits every one of them
    /// (gfx942: MI300X, 64 KiB; gfx950: MI350X, 160 KiB; sm_90a: H100, 227 KiB). `None` for the CPU.
    pub fn gpu(self) -> Option<&'static Gpu> {
        self.gpus()
            .into_iter()
            .min_by_key(|g| g.shared_bytes_per_block)
    }

    /// Shared memory one block may allocate on every GPU of the target; `None` for the CPU.
    pub fn shared_bytes_per_block(self) -> Option<u32> {
        self.gpu().map(|g| g.shared_bytes_per_block)
    }

    /// `gfx942 (HIP), gfx950 (HIP), sm_90a (CUDA), cpu (interpreter)`.
    pub fn valid_names() -> String {
        Target::ALL
            .iter()
            .map(|t| format!("{} ({})", t.name(), t.language().name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl From<Arch> for Target {
    fn from(arch: Arch) -> Target {
        match arch {
            Arch::Cdna3 => Target::Gfx942,
            Arch::Cdna4 => Target::Gfx950,
            Arch::Hopper => Target::Sm90a,
        }
    }
}

impl FromStr for Target {
    type Err = UnknownTarget;
    fn from_str(s: &str) -> Result<Target, UnknownTarget> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownTarget(s.to_string()))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in Target::ALL {
            assert_eq!(t.name().parse::<Target>(), Ok(t));
            assert_eq!(t.to_string(), t.name());
        }
        for a in [Arch::Cdna3, Arch::Cdna4, Arch::Hopper] {
            assert_eq!(Target::from(a).arch(), Some(a));
            assert_eq!(Target::from(a).name(), a.target());
        }
    }

    /// A name of another vendor's target is not called an unknown AMD (or CUDA) target: the error
    /// lists every backend's names.
    #[test]
    fn unknown_names_list_every_language() {
        for bad in ["sm_80", "gfx90a", "GFX942", ""] {
            let msg = bad.parse::<Target>().unwrap_err().to_string();
            for want in [
                "gfx942 (HIP)",
                "gfx950 (HIP)",
                "sm_90a (CUDA)",
                "cpu (interpreter)",
            ] {
                assert!(msg.contains(want), "{msg}");
            }
            assert!(
                msg.contains(&format!("`{bad}`")) && !msg.contains("AMD"),
                "{msg}"
            );
        }
    }

    /// Each GPU target serves exactly the catalog's models of its family, and is configured for the one
    /// with the least shared memory per block.
    #[test]
    fn targets_serve_their_catalog_models() {
        let names = |t: Target| t.gpus().iter().map(|g| g.name).collect::<Vec<_>>();
        assert_eq!(names(Target::Gfx942), ["mi300x", "mi325x"]);
        assert_eq!(names(Target::Gfx950), ["mi350x", "mi355x"]);
        assert_eq!(names(Target::Sm90a), ["h100", "h200"]);
        assert!(names(Target::Cpu).is_empty() && Target::Cpu.gpu().is_none());
        for t in [Target::Gfx942, Target::Gfx950, Target::Sm90a] {
            let g = t.gpu().expect("a GPU target has a model");
            for other in t.gpus() {
                assert!(g.shared_bytes_per_block <= other.shared_bytes_per_block);
            }
            assert_eq!(t.shared_bytes_per_block(), Some(g.shared_bytes_per_block));
        }
        assert_eq!(Target::Gfx942.gpu().map(|g| g.name), Some("mi300x"));
        assert_eq!(Target::Gfx950.gpu().map(|g| g.name), Some("mi350x"));
        assert_eq!(Target::Sm90a.gpu().map(|g| g.name), Some("h100"));
    }
}
