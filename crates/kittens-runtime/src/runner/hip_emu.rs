//! The `hip-emu` backend: the kernel's lowered HIP for an AMD target, compiled for this CPU against the
//! emulation header and run there ([`crate::amd::emulate`]). Tensors travel in their declared dtypes
//! (bf16, fp8, f32); the output is poisoned with NaN, so an element the kernel does not write fails
//! the comparison.

use super::{About, Backend, Execution, Job, RunError};
use crate::amd::emulate::{Emulator, HostTensor};
use kittens_hw::dtype::DType;
use kittens_hw::{Arch, Target};
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
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

/// The little-endian storage of `values` in `dtype` (the runner's values are exact in their tensor's
/// dtype already, so the rounding mode changes nothing).
fn encode(values: &[f32], dtype: DType) -> Vec<u8> {
    to_bytes(values, dtype, Rounding::Rtne)
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
        // Inputs are declared first and the output last (`Launch`), each in its own dtype.
        let dtype = |i: usize| kernel.globals.get(i).map_or(DType::Bf16, |g| g.dtype);
        let out_dtype = dtype(inputs.len());
        let mut tensors: Vec<HostTensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| HostTensor::Data(encode(t, dtype(i))))
            .collect();
        tensors.push(HostTensor::Data(encode(
            &vec![f32::NAN; launch.output],
            out_dtype,
        )));
        let t1 = Instant::now();
        emu.run(&launch.params, &mut tensors, None)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let output = match tensors.pop() {
            // A ragged buffer decodes to nothing, which the runner reports as a wrong length.
            Some(HostTensor::Data(o)) => from_bytes(&o, out_dtype).unwrap_or_default(),
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
            dynamic: None,
        })
    }
}
