//! The `cpu` backend: the tile-language interpreter (`kittens_kernels::exec::interpret`), which
//! executes the kernel's tile program with the storage numerics of its dtypes.

use super::{About, Backend, Execution, Job, RunError};
use kittens_hw::Target;
use kittens_kernels::budget;
use kittens_kernels::exec::interpret;
use std::time::Instant;

/// The interpreter as a runner backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interpreter;

impl Backend for Interpreter {
    fn about(&self) -> About {
        About {
            name: "cpu",
            target: Target::Cpu,
            work: budget::INTERPRETER_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        // One block's shared and register tiles live on the host while it runs.
        budget::check_block_state(job.kernel)?;
        let (l, t0) = (job.launch, Instant::now());
        let (output, stats) = interpret(job.kernel, &l.params, job.inputs.to_vec(), l.output)?;
        Ok(Execution {
            output,
            blocks: stats.blocks,
            waves_per_block: stats.waves_per_block,
            compile_seconds: 0.0,
            run_seconds: t0.elapsed().as_secs_f64(),
            dynamic: None,
        })
    }
}
