//! The `isa-emu` backend: the kernel lowered for an AMD target, compiled by clang into a real code
//! object, and that code object run by the ISA emulator (kittens-amdsim): the machine code the GPU
//! would run, with its waits, barriers and asynchronous memory, on the host. Arguments are packed
//! from the code object's own metadata ([`kittens_amdsim::kernarg::pack`]), the launch geometry is
//! the lowering's ([`kittens_codegen::Lowered::blocks`], [`kittens_codegen::Lowered::threads`]).

use super::{About, Backend, Execution, Job, RunError};
use crate::amd::find_clang;
use kittens_amdsim::exec::{self, Dispatch, Memory, Options, Program, Stats};
use kittens_amdsim::kernarg::{pack, ArgValue};
use kittens_amdsim::Kernel as CodeObject;
use kittens_codegen::{KernelArg, Lowered};
use kittens_hw::dtype::DType;
use kittens_hw::{Arch, Target};
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
use kittens_ir::Kernel;
use kittens_kernels::budget::WorkLimit;
use std::sync::Arc;
use std::time::Instant;

/// Most multiply-adds one emulated run may do: the emulator does about 10^8 MFMA multiply-adds per
/// second, plus everything else a wave issues.
pub const ISA_EMU_WORK: WorkLimit = WorkLimit {
    macs: 1 << 30,
    executor: "ISA emulation",
};

/// A change to the machine code before it runs (fault injection: a test removes a wait and shows
/// the emulator catches it).
pub type CodePatch = Arc<dyn Fn(&mut CodeObject) + Send + Sync>;

/// The ISA emulator for one AMD target.
#[derive(Clone)]
pub struct IsaEmu {
    target: Target,
    arch: Arch,
    /// The emulator's scheduling and latency seed.
    pub seed: u64,
    /// Applied to the loaded code object before it is decoded; `None` runs the compiler's bytes.
    pub patch: Option<CodePatch>,
}

impl std::fmt::Debug for IsaEmu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsaEmu")
            .field("target", &self.target)
            .field("seed", &self.seed)
            .field("patched", &self.patch.is_some())
            .finish()
    }
}

impl IsaEmu {
    pub fn new(target: Target) -> Result<Self, RunError> {
        match target.gpu() {
            Some(gpu) if gpu.arch.is_amd() => Ok(IsaEmu {
                target,
                arch: gpu.arch,
                seed: Options::default().seed,
                patch: None,
            }),
            _ => Err(RunError::NotAmd(target)),
        }
    }
}

pub(crate) fn isa(e: impl std::fmt::Display) -> RunError {
    RunError::CodeObject(e.to_string())
}

impl Backend for IsaEmu {
    fn about(&self) -> About {
        About {
            name: "isa-emu",
            target: self.target,
            work: ISA_EMU_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let Job { kernel, inputs, .. } = *job;
        let t0 = Instant::now();
        let mut built = build(kernel, self.target, self.arch)?;
        if let Some(p) = &self.patch {
            p(&mut built.co);
        }
        let prog = Program::new(&built.co).map_err(isa)?;
        let compile_seconds = t0.elapsed().as_secs_f64();

        let mut mem = Memory::new();
        let tensors = tensor_bytes(job);
        let addrs: Vec<u64> = tensors.into_iter().map(|t| mem.alloc(t)).collect();
        let values = arg_values(job, &built.lowered, &addrs)?;
        let kernarg = mem.alloc(pack(&built.co, &values).map_err(isa)?);
        let blocks = blocks(job, &built.lowered)?;
        let opts = Options {
            seed: self.seed,
            ..Options::default()
        };
        let mut stats = Stats::default();
        let t1 = Instant::now();
        exec::run(
            &prog,
            &mut mem,
            Dispatch {
                workgroups: [blocks, 1, 1],
                workgroup_size: built.lowered.threads,
                kernarg,
            },
            &opts,
            &mut stats,
        )
        .map_err(isa)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let mut output = Vec::with_capacity(job.launch.output_len());
        for i in 0..job.launch.outputs.len() {
            let out = mem
                .get(addrs[inputs.len() + i])
                .ok_or_else(|| isa("an output buffer vanished"))?;
            decode_output(job, i, out, &mut output);
        }
        let dynamic = serde_json::json!({
            "seed": self.seed,
            "code_object": {
                "bytes": built.bytes,
                "instructions": prog.instrs.len(),
                "vgprs": built.co.vgpr_count,
                "sgprs": built.co.sgpr_count,
                "lds_bytes": built.co.group_segment_size,
            },
            "banks": super::isa_banks::compare(kernel, self.arch, &stats),
            "stats": stats,
        });
        Ok(Execution {
            output,
            blocks: blocks as u64,
            waves_per_block: built.lowered.threads.div_ceil(64),
            compile_seconds,
            run_seconds,
            dynamic: Some(dynamic),
        })
    }
}

/// A kernel lowered for an AMD target, compiled by clang, its code object loaded.
pub(crate) struct Built {
    pub lowered: Lowered,
    pub code_object: Vec<u8>,
    pub bytes: usize,
    pub co: CodeObject,
}

/// Lower, compile and load `kernel` for `target` (what `kittens compile` builds).
pub(crate) fn build(kernel: &Kernel, target: Target, arch: Arch) -> Result<Built, RunError> {
    let lowered = kittens_codegen::lower(kernel, target).map_err(isa)?;
    let clang = find_clang(arch).map_err(isa)?;
    let compiled = clang.compile(&lowered.source, arch).map_err(isa)?;
    let co = CodeObject::load(&compiled.code_object).map_err(isa)?;
    Ok(Built {
        lowered,
        bytes: compiled.code_object.len(),
        code_object: compiled.code_object,
        co,
    })
}

fn dtype(job: &Job, i: usize) -> DType {
    job.kernel.globals.get(i).map_or(DType::Bf16, |g| g.dtype)
}

/// The tensors' bytes in declaration order: the inputs in their dtypes, then each output poisoned
/// with NaN (an element the kernel does not write fails the comparison).
pub(crate) fn tensor_bytes(job: &Job) -> Vec<Vec<u8>> {
    let n_in = job.inputs.len();
    let mut v: Vec<Vec<u8>> = job
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| to_bytes(t, dtype(job, i), Rounding::Rtne))
        .collect();
    for (i, &n) in job.launch.outputs.iter().enumerate() {
        let nan = vec![f32::NAN; n];
        v.push(to_bytes(&nan, dtype(job, n_in + i), Rounding::Rtne));
    }
    v
}

/// Output `i`'s bytes as f32 values, appended to `out` (the runner takes the outputs concatenated in
/// declaration order; a ragged buffer decodes to nothing, which it reports as a wrong length).
pub(crate) fn decode_output(job: &Job, i: usize, bytes: &[u8], out: &mut Vec<f32>) {
    out.extend(from_bytes(bytes, dtype(job, job.inputs.len() + i)).unwrap_or_default());
}

/// The explicit kernel arguments in the lowering's order: tensors by their device addresses
/// (`addrs`, declaration order), parameters as 32-bit integers.
pub(crate) fn arg_values(
    job: &Job,
    lowered: &Lowered,
    addrs: &[u64],
) -> Result<Vec<ArgValue>, RunError> {
    let (kernel, launch) = (job.kernel, job.launch);
    lowered
        .args
        .iter()
        .map(|a| match a {
            KernelArg::Global { name } => kernel
                .globals
                .iter()
                .position(|g| &g.name == name)
                .and_then(|k| addrs.get(k))
                .map(|&p| ArgValue::Ptr(p))
                .ok_or_else(|| isa(format!("no tensor `{name}` for the kernel argument"))),
            KernelArg::Param { name } => {
                let k = kernel.params.iter().position(|p| &p.name == name);
                let v = k.and_then(|k| launch.params.get(k)).copied();
                let v = v.ok_or_else(|| isa(format!("no parameter `{name}`")))?;
                i32::try_from(v)
                    .map(ArgValue::I32)
                    .map_err(|_| isa(format!("parameter {name} = {v} is not a 32-bit int")))
            }
            KernelArg::TensorMap(_) => Err(isa("a tensor map argument on an AMD target")),
        })
        .collect()
}

/// Workgroups of the launch (the lowering's grid rule at the job's parameters).
pub(crate) fn blocks(job: &Job, lowered: &Lowered) -> Result<u32, RunError> {
    let named: Vec<(&str, i64)> = job
        .kernel
        .params
        .iter()
        .zip(&job.launch.params)
        .map(|(p, &v)| (p.name.as_str(), v))
        .collect();
    lowered
        .blocks(&named, 1)
        .ok_or_else(|| isa("the launch's block count does not evaluate"))
}
