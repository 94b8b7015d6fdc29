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

/// Most multiply-adds one emulated run may do: every HIP thread is emulated on the host (a fiber per
/// lane, a switch at every barrier), so the emulation runs at most about 10^7 of them per second;
/// 2^31 is a few minutes.
pub const EMU_WORK: WorkLimit = WorkLimit {
    macs: 1 << 31,
    executor: "HIP emulation",
};

/// Kernels a [`HipEmu`] keeps compiled: a run of several launches (a split attention and its merge)
/// alternates between them.
const KEEP: usize = 4;

/// The host emulation of one AMD target as a runner backend. The last few kernels compiled are kept,
/// so a series of runs of one configuration compiles each of its launches once.
#[derive(Debug)]
pub struct HipEmu {
    target: Target,
    arch: Arch,
    built: Mutex<Vec<Emulator>>,
}

impl HipEmu {
    /// The backend for `target`: gfx942 or gfx950.
    pub fn new(target: Target) -> Result<Self, RunError> {
        match target.gpu() {
            Some(gpu) if gpu.arch.is_amd() => Ok(HipEmu {
                target,
                arch: gpu.arch,
                built: Mutex::new(Vec::new()),
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
        let emu = match built.iter().position(|e| e.kernel() == kernel) {
            Some(i) => built.remove(i),
            None => Emulator::build(kernel, self.arch)?,
        };
        let compile_seconds = t0.elapsed().as_secs_f64();
        // Inputs are declared first and the outputs after them (`Launch`), each in its own dtype.
        let dtype = |i: usize| kernel.globals.get(i).map_or(DType::Bf16, |g| g.dtype);
        let n_in = inputs.len();
        let mut tensors: Vec<HostTensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| HostTensor::Data(encode(t, dtype(i))))
            .collect();
        for (i, &n) in launch.outputs.iter().enumerate() {
            let poison = encode(&vec![f32::NAN; n], dtype(n_in + i));
            tensors.push(HostTensor::Data(poison));
        }
        let t1 = Instant::now();
        emu.run(&launch.params, &mut tensors, None)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let mut output = Vec::with_capacity(launch.output_len());
        for (i, t) in tensors.drain(..).enumerate().skip(n_in) {
            // A ragged buffer decodes to nothing, which the runner reports as a wrong length.
            if let HostTensor::Data(o) = t {
                output.extend(from_bytes(&o, dtype(i)).unwrap_or_default());
            }
        }
        let blocks = emu.blocks(&launch.params)?;
        let waves_per_block = emu.kernel().waves;
        built.push(emu);
        if built.len() > KEEP {
            built.remove(0);
        }
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
