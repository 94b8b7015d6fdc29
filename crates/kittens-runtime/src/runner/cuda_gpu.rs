//! The `cuda` backend: the kernel lowered for sm_90a, compiled by NVRTC (through the checked disk
//! cache) and launched on an NVIDIA Hopper GPU through the one generic launch
//! ([`crate::cuda::launch`]): tensors by name, checked against the tile program's declarations,
//! tensor maps encoded from the declared layouts. Nothing here knows a kernel: the runner hands every
//! registry kernel's stages through [`Backend::execute`] as it does to the interpreter and the
//! emulators, so `kittens run <kernel> --backend cuda` gives the same report.

use std::rc::Rc;
use std::time::Instant;

use super::{About, Backend, Execution, Job, RunError};
use crate::cuda::bench_time::{time_launches, Timing};
use crate::cuda::launch::{LoadedKernel, TensorArg};
use crate::cuda::{Device, DeviceBuffer, Stream};
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
use kittens_kernels::budget::WorkLimit;

/// A GPU run is bounded by the device memory of its tensors (allocation fails cleanly), not by time.
pub const CUDA_WORK: WorkLimit = WorkLimit {
    macs: 1 << 50,
    executor: "CUDA on an NVIDIA GPU",
};

/// An NVIDIA Hopper GPU, by ordinal.
#[derive(Debug, Clone)]
pub struct CudaGpu {
    pub ordinal: usize,
    /// After the checked launch, time the kernel (`None`: run once).
    pub timed: Option<Timed>,
}

/// How a [`CudaGpu`] times a launch: `warmup` launches, then the median of `iters` timed by CUDA
/// events, interleaved with a device-to-device copy of as many bytes as the kernel's tensors hold
/// (half of them read, half written: the traffic a memory-bound kernel cannot beat).
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub warmup: usize,
    pub iters: usize,
}

impl CudaGpu {
    pub fn new(ordinal: usize) -> Self {
        CudaGpu {
            ordinal,
            timed: None,
        }
    }

    /// The same GPU timing every launch as `t` says.
    pub fn timed(ordinal: usize, t: Timed) -> Self {
        CudaGpu {
            ordinal,
            timed: Some(t),
        }
    }
}

fn gpu(e: impl std::fmt::Display) -> RunError {
    RunError::CodeObject(format!("cuda: {e}"))
}

/// The kernel's declared dims and strides (elements) of global `i` at the job's parameters.
fn layout(job: &Job, i: usize) -> Result<(Vec<u64>, Vec<u64>), RunError> {
    let g = &job.kernel.globals[i];
    let env = kittens_ir::Env {
        params: &job.launch.params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let eval = |e: &kittens_ir::Expr| {
        e.eval(&env)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| gpu(format!("tensor `{}`: `{e}` does not evaluate", g.name)))
    };
    Ok((
        g.dims.iter().map(eval).collect::<Result<_, _>>()?,
        g.strides.iter().map(eval).collect::<Result<_, _>>()?,
    ))
}

impl Backend for CudaGpu {
    fn about(&self) -> About {
        About {
            name: "cuda",
            target: Target::Sm90a,
            work: CUDA_WORK,
        }
    }

    fn execute(&self, job: &Job) -> Result<Execution, RunError> {
        let dev: Rc<Device> = Device::open(self.ordinal).map_err(gpu)?;
        if dev.compute_capability != (9, 0) {
            return Err(gpu(format!(
                "{} (compute capability {}.{}) cannot run sm_90a code (Hopper, 9.0)",
                dev.name, dev.compute_capability.0, dev.compute_capability.1
            )));
        }
        let t0 = Instant::now();
        let lowered = kittens_codegen::lower(job.kernel, Target::Sm90a).map_err(gpu)?;
        let kernel = LoadedKernel::load(&dev, lowered).map_err(gpu)?;
        let compile_seconds = t0.elapsed().as_secs_f64();

        let n_in = job.inputs.len();
        let tensors = job.launch.inputs.len() + job.launch.outputs.len();
        if tensors != job.kernel.globals.len() || n_in != job.launch.inputs.len() {
            return Err(gpu(format!(
                "`{}` declares {} tensors; the launch has {} inputs ({} given) and {} outputs",
                job.kernel.name,
                job.kernel.globals.len(),
                job.launch.inputs.len(),
                n_in,
                job.launch.outputs.len()
            )));
        }
        let dtype = |i: usize| job.kernel.globals.get(i).map_or(DType::Bf16, |g| g.dtype);
        let mut bufs: Vec<DeviceBuffer> = Vec::with_capacity(job.kernel.globals.len());
        for (i, &len) in job
            .launch
            .inputs
            .iter()
            .chain(&job.launch.outputs)
            .enumerate()
        {
            let host = match job.inputs.get(i) {
                Some(t) => to_bytes(t, dtype(i), Rounding::Rtne),
                // Outputs start as NaN: an element the kernel does not write fails the comparison.
                None => to_bytes(&vec![f32::NAN; len], dtype(i), Rounding::Rtne),
            };
            let mut b = dev.alloc(host.len()).map_err(gpu)?;
            b.upload(&host).map_err(gpu)?;
            bufs.push(b);
        }
        let layouts: Vec<(Vec<u64>, Vec<u64>)> = (0..bufs.len())
            .map(|i| layout(job, i))
            .collect::<Result<_, _>>()?;
        let tensors: Vec<TensorArg> = job
            .kernel
            .globals
            .iter()
            .zip(&bufs)
            .zip(&layouts)
            .map(|((g, b), (shape, strides))| TensorArg {
                name: &g.name,
                ptr: b.ptr(),
                shape,
                strides,
                dtype: g.dtype,
            })
            .collect();
        let params: Vec<(&str, i64)> = job
            .kernel
            .params
            .iter()
            .zip(&job.launch.params)
            .map(|(p, &v)| (p.name.as_str(), v))
            .collect();
        // The declared layouts must lie inside the buffers the problem sized.
        let placed = crate::cuda::launch::check_args(job.kernel, &params, &tensors).map_err(gpu)?;
        for ((_, span), (g, b)) in placed
            .spans
            .iter()
            .zip(job.kernel.globals.iter().zip(&bufs))
        {
            if *span > b.bytes() as u64 {
                return Err(gpu(format!(
                    "tensor `{}` spans {span} bytes, its buffer holds {}",
                    g.name,
                    b.bytes()
                )));
            }
        }
        let stream = Stream::new().map_err(gpu)?;
        let t1 = Instant::now();
        // SAFETY: every tensor is a live buffer of this device at least as large as its span (checked
        // above), kept until the stream is synchronised below; inputs and outputs are distinct buffers.
        let blocks = unsafe { kernel.launch(&stream, &params, &tensors) }.map_err(gpu)?;
        stream.synchronize().map_err(gpu)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let mut output = Vec::with_capacity(job.launch.output_len());
        for (i, b) in bufs.iter().enumerate().skip(n_in) {
            let mut host = vec![0u8; b.bytes()];
            b.download(&mut host).map_err(gpu)?;
            output.extend(from_bytes(&host, dtype(i)).map_err(gpu)?);
        }
        let timing = match self.timed {
            None => serde_json::Value::Null,
            Some(t) => {
                let bytes: usize = bufs.iter().map(|b| b.bytes()).sum();
                let half = (bytes / 2).max(2);
                let src = dev.alloc(half).map_err(gpu)?;
                let mut dst = dev.alloc(half).map_err(gpu)?;
                let mut ours = |_: usize| {
                    // SAFETY: as the checked launch above; the buffers outlive the timing.
                    unsafe { kernel.launch(&stream, &params, &tensors) }
                        .map(|_| ())
                        .map_err(|e| crate::cuda::CudaError::Invalid(e.to_string()))
                };
                let mut copy = |_: usize| dst.copy_from(&src);
                let ms = time_launches(
                    &stream,
                    t.warmup,
                    t.iters.max(1),
                    Timing::Interleaved,
                    &mut [&mut ours, &mut copy],
                )
                .map_err(gpu)?;
                serde_json::json!({
                    "median_ms": ms[0], "copy_ms": ms[1], "tensor_bytes": bytes,
                    "iters": t.iters.max(1), "warmup": t.warmup, "timing": "interleaved",
                })
            }
        };
        let c = &kernel.compile;
        Ok(Execution {
            output,
            blocks: u64::from(blocks),
            waves_per_block: kernel.lowered.threads.div_ceil(32),
            compile_seconds,
            run_seconds,
            dynamic: Some(serde_json::json!({
                "device": dev.name,
                "multiprocessors": dev.multiprocessors,
                "registers": c.registers,
                "spill_stores": c.spill_stores,
                "dynamic_shared_bytes": c.dynamic_shared_bytes,
                "cached_compile": c.cached,
                "timed": timing,
            })),
        })
    }
}
