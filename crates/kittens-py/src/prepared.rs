//! The one CUDA path of the Python package: any registry kernel, prepared once per configuration and
//! layout (`kittens_runtime::cuda::dispatch`), then launched on addresses only.
//!
//! `prepare(entry, problem, tensors, device)` builds the registry entry's launches for the problem
//! (`KernelProblem::stages`, the same launches `kittens run --backend cuda` checks), checks the
//! caller's tensors (name, shape, strides, dtype) against their declarations, and returns a
//! [`Handle`]; `Handle.launch(ptrs, stream)` enqueues them. The Python side keys its handles by
//! everything that went into `prepare` (python/kittens/_dispatch/), so a loop of calls costs one
//! dictionary lookup, the outputs' allocation and one launch per stage — no per-kernel code here.

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};

use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_kernels::problem::{ArgValue, KernelProblem, NamedArgs};
use kittens_runtime::cuda::caller::KernelLoad;
use kittens_runtime::cuda::dispatch::{Prepared, TensorSpec};

/// A prepared call (see the module documentation).
#[pyclass(frozen, module = "kittens._kittens")]
pub struct Handle {
    inner: Arc<Prepared>,
}

impl Handle {
    pub(crate) fn new(inner: Arc<Prepared>) -> Handle {
        Handle { inner }
    }
}

#[pymethods]
impl Handle {
    /// Enqueues the call on `stream` with the tensors at `ptrs` (the caller's in `prepare`'s order,
    /// then the scratch). `checked`: first ask the driver that each range lies in one allocation of
    /// the prepared device (one `cuPointerGetAttributes` per tensor; the ops skip it for torch tensors,
    /// whose storage torch guarantees).
    /// `free`: the values of the free parameters `prepare` named, in its order.
    #[pyo3(signature = (ptrs, stream, free = Vec::new(), checked = false))]
    fn launch(&self, ptrs: Vec<u64>, stream: u64, free: Vec<i64>, checked: bool) -> PyResult<()> {
        // Not detached from the GIL: the launch takes microseconds, less than releasing it would.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if checked {
                self.inner.check_memory(&ptrs)?;
            }
            // SAFETY: the Python caller passes live tensors of the checked layouts on the prepared
            // device (the ops: torch tensors whose shapes, strides, dtype and device made the key),
            // kept alive by the caching allocator until the stream has run the launch.
            unsafe { self.inner.launch(&ptrs, stream, &free) }
        }));
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(PyValueError::new_err(format!("kittens: {e}"))),
            Err(_) => Err(PyRuntimeError::new_err(
                "kittens internal error (a Rust panic, caught) in a launch",
            )),
        }
    }

    /// Bytes of each scratch tensor the caller allocates for a launch (after its own tensors).
    #[getter]
    fn scratch(&self) -> Vec<u64> {
        self.inner.scratch_bytes()
    }

    /// Every tensor `launch` takes an address of, in order.
    #[getter]
    fn tensors(&self) -> Vec<String> {
        self.inner
            .tensors()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }
}

/// The problem dict as named arguments (bool, int, float, str, None, or a tuple of ints), the
/// registry entry's own problem type reading them (`KernelEntry::problem`); a name the kernel does not
/// read, or a value of the wrong kind, is a ValueError naming it.
pub(crate) fn named_args(d: &Bound<'_, PyDict>) -> PyResult<NamedArgs> {
    let mut a = NamedArgs::new();
    for (k, v) in d.iter() {
        let key: String = k.extract()?;
        let value = if v.is_none() {
            ArgValue::None
        } else if v.is_instance_of::<PyBool>() {
            ArgValue::Bool(v.extract()?)
        } else if let Ok(i) = v.extract::<i128>() {
            ArgValue::Int(i)
        } else if let Ok(x) = v.extract::<f64>() {
            ArgValue::Float(x)
        } else if let Ok(t) = v.extract::<String>() {
            ArgValue::Text(t)
        } else if let Ok(xs) = v.extract::<Vec<i64>>() {
            ArgValue::Ints(xs)
        } else {
            return Err(PyValueError::new_err(format!(
                "problem field {key:?}: {} is not a bool, int, float, str, None or tuple of ints",
                v.repr()?
            )));
        };
        a.set(&key, value);
    }
    Ok(a)
}

/// Registry entry `entry`'s problem at the dict's settings (and `extra`'s).
pub(crate) fn problem_from(
    entry: &kittens_kernels::registry::KernelEntry,
    a: &NamedArgs,
) -> PyResult<Box<dyn KernelProblem>> {
    let p = entry
        .problem(a)
        .map_err(|e| PyValueError::new_err(format!("{}: {e}", entry.name)))?;
    let unread = a.unread();
    if !unread.is_empty() {
        return Err(PyValueError::new_err(format!(
            "unknown problem field(s) {unread:?} for {}",
            entry.name
        )));
    }
    Ok(p)
}

/// A preparation's error as Python sees it: the caller's mistake (a tensor, a parameter, an invalid
/// value) a ValueError, the device's or the compiler's a RuntimeError.
pub(crate) fn launch_error(what: &str, e: kittens_runtime::cuda::launch::LaunchError) -> PyErr {
    use kittens_runtime::cuda::{launch::LaunchError, CudaError};
    let msg = format!("{what} on CUDA: {e}");
    match e {
        LaunchError::Cuda(CudaError::Invalid(_))
        | LaunchError::Tensor { .. }
        | LaunchError::Param { .. } => PyValueError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

pub(crate) fn dtype(name: &str, s: &str) -> PyResult<DType> {
    match s {
        "bfloat16" => Ok(DType::Bf16),
        "float32" => Ok(DType::F32),
        "float16" => Ok(DType::F16),
        // Index tensors (varlen offsets, `cu_seqlens_*`).
        "int32" => Ok(DType::I32),
        other => Err(PyValueError::new_err(format!(
            "{name}: dtype {other} is not one the kernels take"
        ))),
    }
}

/// Prepares registry kernel `entry` for `problem` (a dict of problem fields) on CUDA device `device`
/// with the caller's tensors `(name, shape, strides, dtype)` and the parameters `free` that each launch
/// passes (a dropout seed; see `Prepared::new`); returns the [`Handle`] and a line per
/// kernel this call compiled or loaded (empty when all were loaded before).
#[pyfunction]
pub fn prepare(
    py: Python<'_>,
    entry: &str,
    problem: &Bound<'_, PyDict>,
    tensors: Vec<(String, Vec<u64>, Vec<u64>, String)>,
    free: Vec<String>,
    device: i32,
) -> PyResult<(Handle, Vec<String>)> {
    let e = kittens_kernels::by_name(entry).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut a = named_args(problem)?;
    // The configuration is chosen for the device the call runs on (its SM count and model), not the
    // catalog's.
    a.set(
        "sms",
        kittens_runtime::cuda::dispatch::device_sms(device).map_err(|e| {
            PyRuntimeError::new_err(format!("kittens.{entry}: CUDA device {device}: {e}"))
        })?,
    );
    if let Some(g) = kittens_runtime::cuda::dispatch::device_gpu(device).map_err(|e| {
        PyRuntimeError::new_err(format!("kittens.{entry}: CUDA device {device}: {e}"))
    })? {
        a.set("gpu", g);
    }
    let p = problem_from(e, &a)?;
    let specs = tensors
        .into_iter()
        .map(|(name, shape, strides, dt)| {
            Ok(TensorSpec {
                dtype: dtype(&name, &dt)?,
                name,
                shape,
                strides,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    if !e.plan(Target::Sm90a).is_some_and(|t| t.status.available()) {
        return Err(PyValueError::new_err(format!(
            "{entry} has no sm_90a (Hopper) kernel"
        )));
    }
    let stages = kittens_runtime::cuda::dispatch::registry_stages(e, p.as_ref())
        .map_err(|err| PyValueError::new_err(format!("{entry}: {err}")))?;
    let r = py.detach(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Prepared::new(
                device,
                &stages,
                specs,
                &free.iter().map(String::as_str).collect::<Vec<_>>(),
            )
        }))
    });
    let prepared = match r {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Err(launch_error(&format!("kittens.{entry}"), e)),
        Err(_) => {
            return Err(PyRuntimeError::new_err(format!(
                "kittens internal error (a Rust panic, caught) preparing {entry}"
            )))
        }
    };
    let loads = prepared.loads.iter().map(describe).collect();
    Ok((
        Handle {
            inner: Arc::new(prepared),
        },
        loads,
    ))
}

/// What a verbose caller is told about the first launch on a device.
pub fn describe(load: &KernelLoad) -> String {
    let c = &load.compile;
    format!(
        "kittens: {} on {}: {} in {:.2} s (NVRTC {}, {} registers, {} B spills, {} B dynamic shared)",
        load.kernel,
        load.device,
        if c.cached {
            "loaded from the disk cache"
        } else {
            "compiled"
        },
        load.seconds,
        c.nvrtc_version,
        c.registers,
        c.spill_stores,
        c.dynamic_shared_bytes
    )
}
