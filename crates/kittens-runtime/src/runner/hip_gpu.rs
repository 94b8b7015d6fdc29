//! The `hip` backend: the same code object the `isa-emu` backend runs, launched on an AMD GPU through
//! the HIP runtime loaded at run time ([`crate::amd::hip`]). Tensors, argument packing and launch
//! geometry come from the functions the emulator backend uses ([`super::isa_emu`]), so every run of
//! the emulator also tests this path's launch contract. Without ROCm it fails with a clear
//! "no ROCm runtime found (libamdhip64.so)" error before anything is compiled.

use super::isa_emu::{arg_values, blocks, build, decode_output, isa, tensor_bytes};
use super::{About, Backend, Execution, Job, RunError};
use crate::amd::hip::HipRuntime;
use kittens_amdsim::kernarg::pack;
use kittens_hw::{Arch, Target};
use kittens_kernels::budget::WorkLimit;
use std::time::Instant;

/// A GPU run is bounded by the host memory of its tensors, not by time: the work limit is large.
pub const HIP_WORK: WorkLimit = WorkLimit {
    macs: 1 << 46,
    executor: "HIP on an AMD GPU",
};

/// An AMD GPU through HIP, for one target.
#[derive(Debug, Clone)]
pub struct HipGpu {
    target: Target,
    arch: Arch,
}

impl HipGpu {
    pub fn new(target: Target) -> Result<Self, RunError> {
        match target.gpu() {
            Some(gpu) if gpu.arch.is_amd() => Ok(HipGpu {
                target,
                arch: gpu.arch,
            }),
            _ => Err(RunError::NotAmd(target)),
        }
    }
}

impl Backend for HipGpu {
    fn about(&self) -> About {
        About {
            name: "hip",
            target: self.target,
            work: HIP_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let rt = HipRuntime::load().map_err(isa)?;
        let t0 = Instant::now();
        let built = build(job.kernel, self.target, self.arch)?;
        let compile_seconds = t0.elapsed().as_secs_f64();
        let buffers = tensor_bytes(job)
            .iter()
            .map(|t| rt.upload(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(isa)?;
        let addrs: Vec<u64> = buffers.iter().map(|b| b.addr()).collect();
        let values = arg_values(job, &built.lowered, &addrs)?;
        let kernarg = pack(&built.co, &values).map_err(isa)?;
        let grid = blocks(job, &built.lowered)?;
        let t1 = Instant::now();
        rt.launch(
            &built.code_object,
            &built.co.name,
            &kernarg,
            built.co.kernarg_segment_size as usize,
            grid,
            built.lowered.threads,
        )
        .map_err(isa)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let mut output = Vec::with_capacity(job.launch.output_len());
        for (i, b) in buffers[job.inputs.len()..].iter().enumerate() {
            decode_output(job, i, &b.download().map_err(isa)?, &mut output);
        }
        Ok(Execution {
            output,
            blocks: grid as u64,
            waves_per_block: built.lowered.threads.div_ceil(64),
            compile_seconds,
            run_seconds,
            dynamic: None,
        })
    }
}
