//! The `cuda` backend: a kernel's launches run as one prepared call (`crate::cuda::dispatch`, the
//! path every Python call takes: lowered for sm_90a, compiled by NVRTC through the checked disk cache,
//! tensors checked against each launch's declarations, tensor maps from the declared layouts) on
//! buffers of their own ([`crate::cuda::device_call`]). Nothing here knows a kernel: the runner hands
//! every registry kernel's stages over ([`Backend::execute_call`]) as it hands them one by one to the
//! interpreter and the emulators, so `kittens run <kernel> --backend cuda` gives the same report —
//! including calls whose launches share a tensor they read and write (the atomic backward's dQ).

use std::rc::Rc;
use std::time::Instant;

use super::{About, Backend, Execution, Job, RunError};
use crate::cuda::device_call::DeviceCall;
use crate::cuda::dispatch::StageSpec;
use crate::cuda::{Device, Stream};
use kittens_hw::Target;
use kittens_kernels::budget::WorkLimit;
use kittens_kernels::problem::Stage;

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

/// The names of the tensors a call returns: each launch's outputs (its globals after its inputs)
/// that no later launch reads, in launch order — the runner's rule for chained launches.
fn call_outputs(stages: &[Stage]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, st) in stages.iter().enumerate() {
        let n_in = st.launch.inputs.len();
        for (g, &len) in st.kernel.globals.iter().skip(n_in).zip(&st.launch.outputs) {
            let read_later = stages[i + 1..].iter().any(|later| {
                later.kernel.globals[..later.launch.inputs.len().min(later.kernel.globals.len())]
                    .iter()
                    .any(|h| h.name == g.name)
            });
            if !read_later {
                out.push((g.name.clone(), len));
            }
        }
    }
    out
}

impl CudaGpu {
    /// Runs `stages` as one prepared call (`crate::cuda::dispatch`, what the Python package runs)
    /// on buffers of their own: the run's inputs uploaded by their `names`, outputs poisoned with
    /// NaN, the tensors passing between launches left on the device.
    fn call(
        &self,
        stages: &[Stage],
        names: &[String],
        inputs: &[Vec<f32>],
    ) -> Result<(Execution, Vec<String>), RunError> {
        let dev: Rc<Device> = Device::open(self.ordinal).map_err(gpu)?;
        if dev.compute_capability != (9, 0) {
            return Err(gpu(format!(
                "{} (compute capability {}.{}) cannot run sm_90a code (Hopper, 9.0)",
                dev.name, dev.compute_capability.0, dev.compute_capability.1
            )));
        }
        let first = stages.first().ok_or_else(|| gpu("a run with no launch"))?;
        let own = first
            .kernel
            .globals
            .iter()
            .take(inputs.len())
            .map(|g| &g.name);
        let named = !own.eq(names.iter());
        if !named
            && (inputs.len() != first.launch.inputs.len()
                || first.kernel.globals.len() < inputs.len())
        {
            return Err(gpu(format!(
                "the run draws {} inputs but its first launch `{}` takes {}: the runner hands a \
                 run's inputs to its first launch, which this call's launches do not fit (a \
                 prepared call takes the caller's tensors by name: `kittens_runtime::cuda::dispatch`, \
                 the Python package)",
                inputs.len(),
                first.kernel.name,
                first.launch.inputs.len()
            )));
        }
        let specs: Vec<StageSpec> = stages
            .iter()
            .map(|s| StageSpec {
                kernel: s.kernel.clone(),
                params: s
                    .kernel
                    .params
                    .iter()
                    .zip(&s.launch.params)
                    .map(|(d, &v)| (d.name.clone(), v))
                    .collect(),
            })
            .collect();
        let t0 = Instant::now();
        let mut call = DeviceCall::new(&dev, &specs).map_err(gpu)?;
        let compile_seconds = t0.elapsed().as_secs_f64();
        if names.len() != inputs.len() {
            return Err(gpu(format!(
                "{} inputs named for {} drawn",
                names.len(),
                inputs.len()
            )));
        }
        for (name, values) in names.iter().zip(inputs) {
            call.upload(name, values).map_err(gpu)?;
        }
        let stream = Stream::new().map_err(gpu)?;
        let t1 = Instant::now();
        call.launch(&stream).map_err(gpu)?;
        stream.synchronize().map_err(gpu)?;
        let run_seconds = t1.elapsed().as_secs_f64();
        let (mut output, mut names) = (Vec::new(), Vec::new());
        for (name, len) in call_outputs(stages) {
            let v = call.download(&name).map_err(gpu)?;
            if v.len() != len {
                return Err(gpu(format!(
                    "tensor `{name}` holds {} elements; the launch declares {len}",
                    v.len()
                )));
            }
            output.extend(v);
            names.push(name);
        }
        let timing = match self.timed {
            None => serde_json::Value::Null,
            Some(t) => {
                // A device-to-device copy of as many bytes as the call's tensors hold, interleaved.
                let bytes: usize = call.bytes();
                let half = (bytes / 2).max(2);
                let src = dev.alloc(half).map_err(gpu)?;
                let mut dst = dev.alloc(half).map_err(gpu)?;
                let mut copy = |_: usize| dst.copy_from(&src);
                let ms = call
                    .time_with(&stream, t.warmup, t.iters, vec![&mut copy])
                    .map_err(gpu)?;
                serde_json::json!({
                    "median_ms": ms[0], "copy_ms": ms[1], "tensor_bytes": bytes,
                    "iters": t.iters.max(1), "warmup": t.warmup, "timing": "interleaved",
                })
            }
        };
        let kernels = call.kernels();
        let geometry = call.geometry();
        let per_launch: Vec<serde_json::Value> = kernels
            .iter()
            .zip(&geometry)
            .map(|(k, (grid, threads))| {
                serde_json::json!({
                    "kernel": k.kernel, "blocks": grid, "threads": threads,
                    "registers": k.compile.registers, "spill_stores": k.compile.spill_stores,
                    "dynamic_shared_bytes": k.compile.dynamic_shared_bytes,
                    "cached_compile": k.compile.cached,
                })
            })
            .collect();
        Ok((
            Execution {
                output,
                blocks: geometry.iter().map(|&(g, _)| u64::from(g)).sum(),
                waves_per_block: geometry.first().map_or(0, |&(_, t)| t.div_ceil(32)),
                compile_seconds,
                run_seconds,
                dynamic: Some(serde_json::json!({
                    "device": dev.name,
                    "multiprocessors": dev.multiprocessors,
                    "launches": per_launch,
                    "timed": timing,
                })),
            },
            names,
        ))
    }
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
        let stage = Stage {
            kernel: job.kernel.clone(),
            launch: job.launch.clone(),
        };
        let names: Vec<String> = (job.kernel.globals.iter())
            .take(job.inputs.len())
            .map(|g| g.name.clone())
            .collect();
        self.call(std::slice::from_ref(&stage), &names, job.inputs)
            .map(|(e, _)| e)
    }

    fn execute_call(
        &self,
        stages: &[Stage],
        names: &[String],
        inputs: &[Vec<f32>],
    ) -> Option<Result<(Execution, Vec<String>), RunError>> {
        Some(self.call(stages, names, inputs))
    }
}
