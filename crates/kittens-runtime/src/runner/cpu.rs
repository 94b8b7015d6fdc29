//! The `cpu` backend: the tile-language interpreter (`kittens_kernels::exec::interpret`), which
//! executes the kernel's tile program with the storage numerics of its dtypes.

use super::{Backend, Execution, RunError};
use kittens_hw::Target;
use kittens_ir::Kernel;
use kittens_kernels::budget::{self, WorkLimit};
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::Launch;
use std::time::Instant;

/// The interpreter as a runner backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interpreter;

impl Backend for Interpreter {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn target(&self) -> Target {
        Target::Cpu
    }

    fn work_limit(&self) -> WorkLimit {
        budget::INTERPRETER_WORK
    }

    fn execute(
        &self,
        kernel: &Kernel,
        launch: &Launch,
        inputs: &[Vec<f32>],
    ) -> Result<Execution, RunError> {
        // One block's shared and register tiles live on the host while it runs.
        budget::check_block_state(kernel)?;
        let t0 = Instant::now();
        let (output, stats) = interpret(kernel, &launch.params, inputs.to_vec(), launch.output)?;
        Ok(Execution {
            output,
            blocks: stats.blocks,
            waves_per_block: stats.waves_per_block,
            compile_seconds: 0.0,
            run_seconds: t0.elapsed().as_secs_f64(),
        })
    }
}
