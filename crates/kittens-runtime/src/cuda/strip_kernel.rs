//! Strip programs (`kittens_codegen::strip`) run beside a GEMM kernel: the split-K reduction
//! (`gemm_kernel.rs`) and the padded copy of an operand (`gemm_pad.rs`), each lowered for sm_90a,
//! compiled, loaded and launched by its tensors' names ([`StripKernel`]).

use std::rc::Rc;

use kittens_codegen::Lowered;

use super::args::PackedArgs;
use super::driver::{Device, Function, Stream};
use super::{compile, invalid, CudaError};

/// A strip program (`kittens_codegen::strip`) the GEMM launchers run beside the kernel: the split-K
/// reduction, the padded copy of an operand. Lowered for sm_90a, compiled (NVRTC, cached), loaded;
/// launched with one block per tile of its grid and its tensors by name.
pub(crate) struct StripKernel {
    function: Function,
    lowered: Lowered,
}

impl StripKernel {
    pub(crate) fn load(dev: &Rc<Device>, k: &kittens_ir::Kernel) -> Result<StripKernel, CudaError> {
        let l = kittens_codegen::lower(k, kittens_hw::Target::Sm90a)
            .map_err(|e| invalid(format!("lowering {}: {e}", k.name)))?;
        let shared = l.dynamic_shared_bytes();
        let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.entry, shared)?;
        Ok(StripKernel {
            function,
            lowered: l,
        })
    }

    /// Enqueues one launch with integer parameters `params` and tensor addresses `tensors` (by name).
    pub(crate) fn launch(
        &self,
        stream: &Stream,
        params: &[(&str, i64)],
        tensors: &[(&str, u64)],
    ) -> Result<(), CudaError> {
        self.launch_as(stream, params, tensors, false)
    }

    /// [`StripKernel::launch`], `programmatic`: as the programmatic dependent of the kernel before it
    /// on `stream` (strip kernels wait for that grid at entry, `griddepcontrol.wait`).
    pub(crate) fn launch_as(
        &self,
        stream: &Stream,
        params: &[(&str, i64)],
        tensors: &[(&str, u64)],
        programmatic: bool,
    ) -> Result<(), CudaError> {
        let l = &self.lowered;
        let address = |name: &str| {
            tensors
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, p)| p)
                .ok_or_else(|| invalid(format!("{} takes `{name}`", l.entry)))
        };
        let mut args = PackedArgs::pack(
            l,
            params,
            |_| Err(invalid("a strip program takes no tensor maps")),
            address,
        )?;
        let mut ptrs = args.pointers();
        let grid = l
            .blocks(params, 1)
            .ok_or_else(|| invalid(format!("grid of {}", l.entry)))?;
        if grid == 0 {
            return Ok(());
        }
        // SAFETY: one pointer per argument in the lowering's order and types (`PackedArgs`); the
        // caller keeps the tensors alive until the launch has run on `stream`; a programmatic launch
        // waits for the grid before it at the kernel's entry (the strip dialect's prologue).
        unsafe {
            self.function.launch_as(
                (grid, 1, 1),
                (l.threads, 1, 1),
                stream,
                &mut ptrs,
                programmatic,
            )
        }
    }
}
