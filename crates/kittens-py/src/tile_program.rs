//! A finished tile program from Python ([`Program`]): its JSON and listing, the CPU interpreter
//! (`kittens_ir::interp::run`, which refuses a kernel the schedule analysis finds racy), the race
//! check, the lowering report per target (budgets, source, and what the installed compilers make of
//! it), and the preparation of its CUDA launch on the one prepared-call path
//! (`kittens_runtime::cuda::dispatch::Prepared`, returned as a `prepared::Handle`; python/kittens/
//! tile.py keeps one per configuration).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use kittens_hw::{Arch, Target};
use kittens_ir::{Access, Env, Kernel};
use kittens_runtime::cuda::dispatch::{Prepared, StageSpec, TensorSpec};

use crate::prepared::{named_args, problem_from, Handle};
use crate::view::ApiError;

/// The kernel registry entry `entry` runs for `problem` on the CPU interpreter (the problem's own
/// configuration, 32-lane waves), as a tile `Program`: `Program.interpret` runs it on CPU arrays, so a
/// Python op's CPU path can be the registry kernel itself.
#[pyfunction]
pub fn registry_program(entry: &str, problem: &Bound<'_, PyDict>) -> PyResult<Program> {
    let e = kittens_kernels::by_name(entry).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let p = problem_from(e, &named_args(problem)?)?;
    let k = p
        .build(Target::Cpu)
        .map_err(|err| PyValueError::new_err(format!("{entry}: {err}")))?;
    Ok(Program::new(k))
}

/// A finished kernel (`Builder.finish()`).
#[pyclass(frozen, module = "kittens._kittens")]
pub struct Program {
    kernel: Kernel,
    json: String,
}

impl Program {
    pub fn new(kernel: Kernel) -> Program {
        let json = kittens_ir::serial::to_json(&kernel);
        Program { kernel, json }
    }

    fn err(&self, msg: impl std::fmt::Display) -> PyErr {
        PyValueError::new_err(format!("{}: {msg}", self.kernel.name))
    }

    /// The parameter values in declaration order, from a dict by name.
    fn params(&self, d: &Bound<'_, PyDict>) -> PyResult<Vec<i64>> {
        for k in d.keys() {
            let k: String = k.extract()?;
            if !self.kernel.params.iter().any(|p| p.name == k) {
                return Err(self.err(format!(
                    "unknown parameter {k:?} (it takes {:?})",
                    self.param_names()
                )));
            }
        }
        self.kernel
            .params
            .iter()
            .map(|p| match d.get_item(&p.name)? {
                Some(v) => v.extract::<i64>(),
                None => Err(self.err(format!("parameter {:?} not given", p.name))),
            })
            .collect()
    }

    fn param_names(&self) -> Vec<String> {
        self.kernel.params.iter().map(|p| p.name.clone()).collect()
    }

    /// Each tensor's dims and element strides at `params`.
    fn layouts(&self, params: &[i64]) -> PyResult<Vec<(Vec<u64>, Vec<u64>)>> {
        let env = Env {
            params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        self.kernel
            .globals
            .iter()
            .map(|g| {
                let eval = |e: &kittens_ir::Expr| {
                    e.eval(&env)
                        .and_then(|v| u64::try_from(v).ok())
                        .ok_or_else(|| {
                            self.err(format!("tensor `{}`: `{e}` at {params:?}", g.name))
                        })
                };
                Ok((
                    g.dims.iter().map(eval).collect::<PyResult<_>>()?,
                    g.strides.iter().map(eval).collect::<PyResult<_>>()?,
                ))
            })
            .collect()
    }
}

/// Elements a tensor of `dims` and `strides` spans (0 when a dimension is empty).
fn span(dims: &[u64], strides: &[u64]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims
        .iter()
        .zip(strides)
        .map(|(d, s)| ((d - 1) * s) as usize)
        .sum::<usize>()
}

#[pymethods]
impl Program {
    #[getter]
    fn name(&self) -> &str {
        &self.kernel.name
    }

    /// The parameter names, in the order the kernel declares them.
    #[getter(params)]
    fn param_list(&self) -> Vec<String> {
        self.param_names()
    }

    /// `(name, dtype, access)` of each tensor, in declaration order.
    #[getter]
    fn tensors(&self) -> Vec<(String, String, String)> {
        self.kernel
            .globals
            .iter()
            .map(|g| {
                let access = match g.access {
                    Access::Read => "read",
                    Access::Write => "write",
                    Access::ReadWrite => "read_write",
                };
                (g.name.clone(), g.dtype.name().into(), access.into())
            })
            .collect()
    }

    /// The kernel file (`kittens_ir::serial::to_json`), which `kittens ... --kernel-file` reads.
    fn json(&self) -> &str {
        &self.json
    }

    fn __str__(&self) -> String {
        self.kernel.to_string()
    }

    fn __repr__(&self) -> String {
        format!("Program({})", self.kernel.name)
    }

    /// Runs the kernel on the CPU interpreter. `tensors`: name → array (anything `numpy.asarray`
    /// takes; bf16 tensors hold bf16 values in float32); a written tensor may be omitted.
    /// Returns name → float32 array of every tensor the kernel writes, shaped as declared.
    fn interpret<'py>(
        &self,
        py: Python<'py>,
        tensors: &Bound<'py, PyDict>,
        params: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = self.params(params)?;
        let layouts = self.layouts(&p)?;
        for k in tensors.keys() {
            let k: String = k.extract()?;
            if !self.kernel.globals.iter().any(|g| g.name == k) {
                return Err(self.err(format!("no tensor {k:?}")));
            }
        }
        let np = py.import("numpy")?;
        let mut data = Vec::with_capacity(layouts.len());
        for (g, (dims, strides)) in self.kernel.globals.iter().zip(&layouts) {
            match tensors.get_item(&g.name)? {
                Some(a) => {
                    let kw = PyDict::new(py);
                    kw.set_item("dtype", "float32")?;
                    let a = np.getattr("ascontiguousarray")?.call((a,), Some(&kw))?;
                    let b = a.call_method0("tobytes")?;
                    let bytes = b.cast::<PyBytes>()?.as_bytes();
                    data.push(
                        bytes
                            .chunks_exact(4)
                            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                            .collect::<Vec<f32>>(),
                    );
                }
                None if g.access == Access::Write => data.push(vec![f32::NAN; span(dims, strides)]),
                None => return Err(self.err(format!("tensor `{}` not given", g.name))),
            }
        }
        let name = self.kernel.name.clone();
        let kernel = &self.kernel;
        let data = crate::interruptible(py, move || {
            let mut data = data;
            kittens_ir::interp::run(kernel, &p, &mut data)
                .map_err(|e| ApiError::Value(format!("{name}: {e}")))?;
            Ok(data)
        })?;
        let out = PyDict::new(py);
        for ((g, (dims, _)), v) in self.kernel.globals.iter().zip(&layouts).zip(data) {
            if g.access == Access::Read {
                continue;
            }
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
            let kw = PyDict::new(py);
            kw.set_item("dtype", "float32")?;
            let a = np
                .getattr("frombuffer")?
                .call((PyBytes::new(py, &bytes),), Some(&kw))?
                .call_method0("copy")?;
            let dense = dims.iter().product::<u64>() as usize == v.len();
            let a = if dense {
                a.call_method1("reshape", (dims.clone(),))?
            } else {
                a
            };
            out.set_item(&g.name, a)?;
        }
        Ok(out)
    }

    /// The schedule analysis of the launch at `params` (what the interpreter runs before it runs):
    /// one line per hazard, empty when the kernel is race-free.
    fn race_check(&self, params: &Bound<'_, PyDict>) -> PyResult<Vec<String>> {
        let opts = kittens_ir::analysis::Options {
            params: self.params(params)?,
            ..Default::default()
        };
        let l = kittens_ir::analysis::analyze_launch(&self.kernel, &opts)
            .map_err(|e| self.err(format!("race check: {e}")))?;
        Ok(l.hazards().map(|(_, h)| h.to_string()).collect())
    }

    /// Lowers for `target` ("sm_90a", "gfx942", "gfx950"): a dict with the source, the budgets
    /// (checked by every lowering: an overrun is a ValueError naming the budget and the tiles), and
    /// where the target's compiler is installed here, its registers and spills (`compiler` says
    /// which, or why none).
    fn lower<'py>(&self, py: Python<'py>, target: &str) -> PyResult<Bound<'py, PyDict>> {
        let t: Target = target
            .parse()
            .map_err(|e| self.err(format!("target {target:?}: {e}")))?;
        let l = kittens_codegen::lower(&self.kernel, t).map_err(|e| self.err(e))?;
        let b = kittens_codegen::check_budgets(&self.kernel, t).map_err(|e| self.err(e))?;
        let d = PyDict::new(py);
        d.set_item("target", t.name())?;
        d.set_item("entry", &l.entry)?;
        d.set_item("source", &l.source)?;
        d.set_item("threads", l.threads)?;
        d.set_item("regs_estimate", b.regs_per_wave)?;
        d.set_item("reg_budget", b.reg_budget)?;
        d.set_item("shared_bytes", b.shared_bytes)?;
        d.set_item("shared_budget", b.shared_budget)?;
        match t.arch() {
            Some(arch @ (Arch::Cdna3 | Arch::Cdna4)) => {
                let r = py.detach(|| {
                    let clang = kittens_runtime::amd::find_clang(arch)?;
                    let c = clang.compile(&l.source, arch)?;
                    kittens_runtime::amd::analyze(&c.asm, arch, Some(&l.entry))
                });
                match r {
                    Ok(r) => {
                        d.set_item("compiler", "clang")?;
                        d.set_item("vgpr", r.vgpr)?;
                        d.set_item("agpr", r.agpr)?;
                        d.set_item("sgpr", r.sgpr)?;
                        d.set_item("spills", r.vgpr_spill + r.sgpr_spill)?;
                        d.set_item("lds_bytes", r.lds_bytes)?;
                        d.set_item("instructions", r.mix.total)?;
                        d.set_item("hot_loop", r.hot_loop.as_ref().map_or(0, |h| h.mix.total))?;
                    }
                    Err(e) => d.set_item("compiler", format!("none: {e}"))?,
                }
            }
            _ => {
                let r = py.detach(|| {
                    kittens_runtime::cuda::compile_report(
                        &l.source,
                        &l.entry,
                        t.name(),
                        l.dynamic_shared_bytes(),
                    )
                });
                match r {
                    Ok(r) => {
                        d.set_item("compiler", format!("nvrtc {}", r.nvrtc_version))?;
                        d.set_item("registers", r.registers)?;
                        d.set_item("spills", r.spill_stores + r.spill_loads)?;
                    }
                    Err(e) => d.set_item("compiler", format!("none: {e}"))?,
                }
            }
        }
        Ok(d)
    }

    /// Prepares the launch on CUDA device `device` for tensors of these layouts: `tensors` is
    /// `(name, shape, strides, dtype)` of every tensor the kernel declares, in declaration order
    /// (`dtype` as torch names it: "bfloat16", "float32", "float16"); the launch is lowered for
    /// sm_90a, compiled (or read from the disk cache), loaded and the layouts checked against the
    /// declarations. Returns the [`Handle`] whose `launch(ptrs, stream)` enqueues it; `kittens.tile`
    /// keeps one per configuration, so a loop of calls prepares once.
    fn prepare(
        &self,
        py: Python<'_>,
        tensors: Vec<(String, Vec<u64>, Vec<u64>, String)>,
        params: &Bound<'_, PyDict>,
        device: i32,
    ) -> PyResult<Handle> {
        let p = self.params(params)?;
        let declared: Vec<&str> = self
            .kernel
            .globals
            .iter()
            .map(|g| g.name.as_str())
            .collect();
        let given: Vec<&str> = tensors.iter().map(|t| t.0.as_str()).collect();
        if given != declared {
            return Err(self.err(format!(
                "tensors {given:?} given, the kernel takes {declared:?} in this order"
            )));
        }
        let specs = tensors
            .into_iter()
            .map(|(name, shape, strides, dt)| {
                Ok(TensorSpec {
                    dtype: crate::prepared::dtype(&format!("tensor `{name}`"), &dt)?,
                    name,
                    shape,
                    strides,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let stage = StageSpec {
            kernel: self.kernel.clone(),
            params: self.param_names().into_iter().zip(p).collect(),
        };
        let r = py.detach(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Prepared::new(device, &[stage], specs, &[])
            }))
        });
        match r {
            Ok(Ok(p)) => Ok(Handle::new(Arc::new(p))),
            Ok(Err(e)) => Err(crate::prepared::launch_error(&self.kernel.name, e)),
            Err(p) => Err(crate::panic_error(p)),
        }
    }
}
