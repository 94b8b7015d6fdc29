//! Closed-set flags of the CLI as clap `ValueEnum`s, so `--help` lists the values and clap refuses
//! anything else. Sets a library already names (targets, dtypes, layouts, shared-memory instructions,
//! operands) are parsed by the library's `FromStr` instead, whose error lists the valid names and which
//! keeps the library's aliases.

use anyhow::{anyhow, Context};
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::gemm::GemmSchedule;

/// `kittens run --schedule`: the GEMM's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// 8-wave ping-pong (HipKittens E.1).
    #[value(alias = "ping-pong", alias = "pingpong8")]
    Pingpong,
    /// 4-wave interleave (HipKittens §3.3.2); on hip-emu the target's `interleave4` variant.
    #[value(alias = "i4", alias = "interleave4")]
    Interleave,
    /// Producer/consumer (Hopper).
    #[value(alias = "producer-consumer")]
    Ws,
}

impl From<ScheduleArg> for GemmSchedule {
    fn from(s: ScheduleArg) -> GemmSchedule {
        match s {
            ScheduleArg::Pingpong => GemmSchedule::PingPong8,
            ScheduleArg::Interleave => GemmSchedule::Interleave4,
            ScheduleArg::Ws => GemmSchedule::ProducerConsumer,
        }
    }
}

/// `kittens run --layout`: the attention tensors' layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttnLayoutArg {
    /// `[batch, seq, heads, dim]`.
    Bshd,
    /// `[batch, heads, seq, dim]`.
    Bhsd,
}

impl From<AttnLayoutArg> for AttnLayout {
    fn from(l: AttnLayoutArg) -> AttnLayout {
        match l {
            AttnLayoutArg::Bshd => AttnLayout::Bshd,
            AttnLayoutArg::Bhsd => AttnLayout::Bhsd,
        }
    }
}

/// `kittens run --backend`: where a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// The tile-language interpreter.
    Cpu,
    /// The lowered HIP of an AMD target, compiled for this CPU against the emulation header.
    HipEmu,
    /// The AMD code object clang builds for the target, run by the ISA emulator.
    IsaEmu,
    /// The same code object on an AMD GPU through the HIP runtime (ROCm's libamdhip64).
    Hip,
    /// The kernel lowered for sm_90a, compiled by NVRTC and launched on an NVIDIA Hopper GPU through
    /// the generic launch (`kittens_runtime::cuda::launch`).
    Cuda,
}

/// A small default for a parameter, so that loops run a handful of iterations; data words (seeds,
/// counters) default to 0, as `kittens run`'s.
fn default_param(name: &str, word: bool) -> i64 {
    match name {
        _ if word => 0,
        "m" | "n" | "seq" | "seq_kv" => 512,
        "k" => 1024,
        "batch" | "heads_kv" => 1,
        "heads" => 2,
        _ => 256,
    }
}

/// The values of a kernel's parameters (`names`, `words` marking data words) from `-p name=value`
/// flags, the rest at their defaults: what `check` and a kernel file's `run` analyse and launch.
pub(crate) fn param_values(
    names: &[String],
    words: &[bool],
    given: &[String],
) -> anyhow::Result<Vec<i64>> {
    let mut values: Vec<i64> = names
        .iter()
        .zip(words)
        .map(|(n, &w)| default_param(n, w))
        .collect();
    for g in given {
        let (name, value) = g
            .split_once('=')
            .ok_or_else(|| anyhow!("--param `{g}`: expected name=value"))?;
        let i = names.iter().position(|n| n == name.trim()).ok_or_else(|| {
            anyhow!(
                "--param `{name}`: the kernel's parameters are {}",
                names.join(", ")
            )
        })?;
        values[i] = value
            .trim()
            .parse()
            .with_context(|| format!("--param `{g}`: not an integer"))?;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn aliases_parse() {
        assert_eq!(
            ScheduleArg::from_str("ping-pong", false),
            Ok(ScheduleArg::Pingpong)
        );
        assert_eq!(
            ScheduleArg::from_str("i4", false),
            Ok(ScheduleArg::Interleave)
        );
        assert_eq!(
            GemmSchedule::from(ScheduleArg::Ws),
            GemmSchedule::ProducerConsumer
        );
        assert!(BackendArg::from_str("gfx942", false).is_err());
    }
}
