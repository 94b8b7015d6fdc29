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
use kittens_codegen::KernelArg;
use kittens_hw::dtype::DType;
use kittens_hw::{Arch, Target};
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
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

fn isa(e: impl std::fmt::Display) -> RunError {
    RunError::Isa(e.to_string())
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
        let Job {
            kernel,
            launch,
            inputs,
        } = *job;
        let t0 = Instant::now();
        let lowered = kittens_codegen::lower(kernel, self.target).map_err(isa)?;
        let clang = find_clang(self.arch).map_err(isa)?;
        let compiled = clang.compile(&lowered.source, self.arch).map_err(isa)?;
        let mut co = CodeObject::load(&compiled.code_object).map_err(isa)?;
        if let Some(p) = &self.patch {
            p(&mut co);
        }
        let prog = Program::new(&co).map_err(isa)?;
        let compile_seconds = t0.elapsed().as_secs_f64();

        // Tensors in declaration order: the inputs, then the output poisoned with NaN.
        let dtype = |i: usize| kernel.globals.get(i).map_or(DType::Bf16, |g| g.dtype);
        let out_dtype = dtype(inputs.len());
        let mut mem = Memory::new();
        let mut addrs: Vec<u64> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| mem.alloc(to_bytes(t, dtype(i), Rounding::Rtne)))
            .collect();
        let nan = vec![f32::NAN; launch.output];
        addrs.push(mem.alloc(to_bytes(&nan, out_dtype, Rounding::Rtne)));
        let values = lowered
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
            .collect::<Result<Vec<_>, _>>()?;
        let kernarg = mem.alloc(pack(&co, &values).map_err(isa)?);
        let named: Vec<(&str, i64)> = kernel
            .params
            .iter()
            .zip(&launch.params)
            .map(|(p, &v)| (p.name.as_str(), v))
            .collect();
        let blocks = lowered
            .blocks(&named, 1)
            .ok_or_else(|| isa("the launch's block count does not evaluate"))?;
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
                workgroup_size: lowered.threads,
                kernarg,
            },
            &opts,
            &mut stats,
        )
        .map_err(isa)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let out = mem
            .get(addrs[inputs.len()])
            .ok_or_else(|| isa("the output buffer vanished"))?;
        let output = from_bytes(out, out_dtype).unwrap_or_default();
        let dynamic = serde_json::json!({
            "seed": self.seed,
            "code_object": {
                "bytes": compiled.code_object.len(),
                "instructions": prog.instrs.len(),
                "vgprs": co.vgpr_count,
                "sgprs": co.sgpr_count,
                "lds_bytes": co.group_segment_size,
            },
            "stats": stats,
        });
        Ok(Execution {
            output,
            blocks: blocks as u64,
            waves_per_block: lowered.threads.div_ceil(64),
            compile_seconds,
            run_seconds,
            dynamic: Some(dynamic),
        })
    }
}
