//! The `hip-emu` backend: the kernel's lowered HIP for an AMD target, compiled for this CPU against the
//! emulation header and run there ([`crate::amd::emulate`]). Tensors travel as bf16 bits; the output is
//! poisoned with NaN, so an element the kernel does not write fails the comparison.

use super::{About, Backend, Execution, Job, RunError};
use crate::amd::emulate::{Emulator, HostTensor};
use kittens_hw::{Arch, Target};
use kittens_kernels::budget::WorkLimit;
use std::sync::Mutex;
use std::time::Instant;

/// Most multiply-adds one emulated run may do: every HIP thread is a host thread, so the emulation runs
/// about 10^7 of them per second; 2^31 is a few minutes.
pub const EMU_WORK: WorkLimit = WorkLimit {
    macs: 1 << 31,
    executor: "HIP emulation",
};

/// The host emulation of one AMD target as a runner backend. The last kernel compiled is kept, so a
/// series of runs of one configuration compiles it once.
#[derive(Debug)]
pub struct HipEmu {
    target: Target,
    arch: Arch,
    built: Mutex<Option<Emulator>>,
}

impl HipEmu {
    /// The backend for `target`: gfx942 or gfx950.
    pub fn new(target: Target) -> Result<Self, RunError> {
        match target.gpu() {
            Some(gpu) if gpu.arch.is_amd() => Ok(HipEmu {
                target,
                arch: gpu.arch,
                built: Mutex::new(None),
            }),
            _ => Err(RunError::NotAmd(target)),
        }
    }
}

/// Bf16 bits of values that are bf16 already (the runner's inputs are): the upper half of each f32.
fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
        .collect()
}

fn bf16_floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|p| f32::from_bits((u16::from_le_bytes([p[0], p[1]]) as u32) << 16))
        .collect()
}

impl Backend for HipEmu {
    fn about(&self) -> About {
        About {
            name: "hip-emu",
            target: self.target,
            work: EMU_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let Job {
            kernel,
            launch,
            inputs,
        } = *job;
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let emu = match built.take() {
            Some(emu) if emu.kernel() == kernel => emu,
            _ => Emulator::build(kernel, self.arch)?,
        };
        let compile_seconds = t0.elapsed().as_secs_f64();
        let mut tensors: Vec<HostTensor> = inputs
            .iter()
            .map(|t| HostTensor::Data(bf16_bytes(t)))
            .collect();
        tensors.push(HostTensor::Data(bf16_bytes(&vec![f32::NAN; launch.output])));
        let t1 = Instant::now();
        emu.run(&launch.params, &mut tensors, None)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let output = match tensors.pop() {
            Some(HostTensor::Data(o)) => bf16_floats(&o),
            _ => Vec::new(),
        };
        let blocks = emu.blocks(&launch.params)?;
        let waves_per_block = emu.kernel().waves;
        *built = Some(emu);
        Ok(Execution {
            output,
            blocks,
            waves_per_block,
            compile_seconds,
            run_seconds,
        })
    }
}
