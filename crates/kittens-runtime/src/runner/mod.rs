//! One runner for every backend: a registry kernel on random inputs at a problem's sizes, executed by a
//! [`Backend`] and judged against its f64 reference — what `kittens run --backend cpu|hip-emu`, the
//! demo suite and the tests run.
//!
//! Why it lives here: the runner serves every backend, and the backends that run lowered code are in
//! this crate (the host emulation of the lowered HIP, [`crate::amd::emulate`], needs the HIP lowering
//! and a host compiler; the GPU runs are in [`crate::cuda`]). This crate depends on kittens-kernels,
//! so the runner sits here, next to `amd/` and `cuda/`, and reaches each kernel only through the
//! registry: what a kernel knows about its problem — parameters, tensors, configuration per target,
//! size budget, reference, tolerance — is its `kittens_kernels::problem::KernelProblem`, beside the
//! kernel. Adding a kernel touches no runner code; adding a backend touches no kernel.
//!
//! Order of a run ([`run`]): the settings and the problem are validated and sized against the budget
//! (`kittens_kernels::budget`: host bytes for every backend, work per backend) before anything is built
//! or allocated; the kernel is built for the backend's target; the inputs are drawn once (seeded, by
//! the kernel's `KernelProblem::draw`: uniform in `[-input_scale, input_scale)` rounded to each
//! tensor's dtype unless the kernel says otherwise) and handed to the backend by shared
//! reference, so the vectors the reference is computed from are a snapshot no backend can change;
//! the backend executes; the f64 reference and the kernel's baseline are computed from that snapshot;
//! the error is judged once (`kittens_kernels::reference::judge`) into one [`RunReport`].
//!
//! A run of several launches (`KernelProblem::stages`: the key-split attention and its merge) runs
//! them in turn on the same backend ([`execute_stages`]): each launch reads its inputs by name from
//! the drawn tensors and the earlier launches' outputs, and the outputs no later launch reads are the
//! run's, judged as one kernel's would be.

pub mod cpu;
pub mod cuda_gpu;
pub mod hip_emu;
pub mod hip_gpu;
mod isa_banks;
pub mod isa_emu;

pub use cpu::Interpreter;
pub use cuda_gpu::{CudaGpu, Timed};
pub use hip_emu::HipEmu;
pub use hip_gpu::HipGpu;
pub use isa_emu::IsaEmu;

use crate::amd::emulate::EmuError;
use kittens_hw::Target;
use kittens_ir::Kernel;
use kittens_kernels::budget::{self, WorkLimit};
use kittens_kernels::problem::{KernelProblem, Launch, Stage};
use kittens_kernels::reference::{compare, judge, Check, ErrorReport};
use kittens_kernels::registry::KernelEntry;
use kittens_kernels::KernelError;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Instant;
use thiserror::Error;

/// What can stop a run before it is judged (a failed judgement is a report with `passed: false`).
#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Emu(#[from] EmuError),
    /// A code-object backend (isa-emu, hip) could not build, load, launch or run the code object.
    #[error("{0}")]
    CodeObject(String),
    #[error("the hip-emu and isa-emu backends run the AMD targets gfx942 or gfx950, not {0}")]
    NotAmd(Target),
    #[error("tolerance {0} must be finite and positive")]
    Tolerance(f64),
    #[error("{backend} returned {got} output elements, the problem has {want}")]
    Output {
        backend: &'static str,
        got: usize,
        want: usize,
    },
    /// A launch of a several-launch run reads a tensor no earlier launch made, or one of the wrong
    /// size (a problem definition's mistake, named here rather than read out of bounds).
    #[error("launch `{kernel}` reads `{tensor}`: {why}")]
    Chain {
        kernel: String,
        tensor: String,
        why: String,
    },
}

/// What a backend returns for one execution.
#[derive(Debug, Clone)]
pub struct Execution {
    /// The output tensors as f32 values (bf16-exact for bf16 outputs), concatenated in declaration
    /// order, [`Launch::output_len`] of them.
    pub output: Vec<f32>,
    pub blocks: u64,
    pub waves_per_block: u32,
    /// Time spent preparing the kernel (the host compile of the emulation; 0 for the interpreter).
    pub compile_seconds: f64,
    pub run_seconds: f64,
    /// What the backend observed while running, if it observes anything (isa-emu: instructions by
    /// class, waits that stalled, LDS bank conflicts per DS instruction).
    pub dynamic: Option<serde_json::Value>,
}

/// What a backend is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    /// The name in reports and on the command line (`cpu`, `hip-emu`).
    pub name: &'static str,
    /// The target kernels are built for (`Target::Cpu` for the interpreter).
    pub target: Target,
    /// How much one run may execute on this backend.
    pub work: WorkLimit,
}

/// One execution a backend is given: the kernel built for its target, the launch, and the inputs in
/// declaration order.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub kernel: &'a Kernel,
    pub launch: &'a Launch,
    pub inputs: &'a [Vec<f32>],
}

/// Where a kernel executes: given a [`Job`], return the output. A backend never sees the reference or
/// the verdict.
pub trait Backend {
    fn about(&self) -> About;
    fn execute(&self, job: &Job) -> Result<Execution, RunError>;

    /// Runs all of a run's launches at once, the tensors between them staying where the backend
    /// keeps them (the CUDA backend: one prepared call, as the Python package runs it), returning
    /// the outputs no later launch reads and their names. `None` (the default): the runner runs the
    /// launches one by one through [`Backend::execute`], passing tensors by name through the host.
    /// `names` name the `inputs` (the first launch's first tensors unless the problem says otherwise,
    /// `KernelProblem::input_names`).
    fn execute_call(
        &self,
        _stages: &[Stage],
        _names: &[String],
        _inputs: &[Vec<f32>],
    ) -> Option<Result<(Execution, Vec<String>), RunError>> {
        None
    }
}

/// The report of one run, the same on every backend (`kittens run --json` prints it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    pub kernel: String,
    /// [`About::name`].
    pub backend: &'static str,
    pub target: Target,
    /// The GPU model the kernel was configured for (its tiles and budgets); `None` on the CPU.
    pub configured_for: Option<&'static str>,
    /// The problem's sizes and tiles, and the schedule the kernel was built with.
    pub shape: serde_json::Value,
    /// The error of the output; with several outputs, each measure's largest over them (`outputs`
    /// has each one's).
    #[serde(flatten)]
    pub error: ErrorReport,
    /// Error of the kernel's low-precision baseline against the same f64 reference (attention:
    /// PyTorch-style bf16); the test rule's yardstick. Several outputs: as for `error`.
    pub baseline: Option<ErrorReport>,
    /// Per output, for a kernel with several (the attention backward's dQ, dK, dV); empty for one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputReport>,
    /// The kernels launched after `kernel`, in order, for a run of several launches (the key-split
    /// attention's merge); empty for one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<String>,
    /// Every check passed.
    pub passed: bool,
    /// The largest `rel_err` that passes (the bound of the first `rel_err` check: with several
    /// outputs, the first output's; `outputs` and `checks` have each one's).
    pub tolerance: f64,
    pub checks: Vec<Check>,
    pub input_scale: f32,
    /// Attention: the largest `|q·k|/√d` the inputs produced.
    pub max_abs_logit: Option<f64>,
    pub blocks: u64,
    pub waves_per_block: u32,
    pub compile_seconds: f64,
    pub run_seconds: f64,
    pub reference_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<serde_json::Value>,
}

/// The judgement of one output of a kernel with several.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutputReport {
    /// The tensor's name in the kernel.
    pub name: String,
    #[serde(flatten)]
    pub error: ErrorReport,
    pub baseline: Option<ErrorReport>,
    /// Every check of this output passed.
    pub passed: bool,
}

/// Each measure's largest over `errs`.
fn worst(errs: impl Iterator<Item = ErrorReport>) -> Option<ErrorReport> {
    errs.reduce(|a, b| ErrorReport {
        rel_err: a.rel_err.max(b.rel_err),
        max_rel: a.max_rel.max(b.max_rel),
        mean_rel: a.mean_rel.max(b.mean_rel),
    })
}

/// Judges each output (named by `names`) on its slice of the concatenated `out`, reference and
/// baseline: the per-output reports (empty for one output), the overall error and baseline error,
/// and every check (tagged with its output's name when there are several).
fn judge_outputs(
    names: &[String],
    launch: &Launch,
    out: &[f32],
    reference: &kittens_kernels::problem::Reference,
    tolerance: kittens_kernels::reference::Tolerance,
    tolerance_override: Option<f64>,
) -> (
    Vec<OutputReport>,
    ErrorReport,
    Option<ErrorReport>,
    Vec<Check>,
) {
    let several = launch.outputs.len() > 1;
    let (mut reports, mut checks, mut at) = (Vec::new(), Vec::new(), 0usize);
    for (i, &n) in launch.outputs.iter().enumerate() {
        let r = at..at + n;
        at += n;
        let error = compare(&out[r.clone()], &reference.values[r.clone()]);
        let baseline = reference
            .baseline
            .as_ref()
            .map(|b| compare(&b[r.clone()], &reference.values[r.clone()]));
        let name = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("output {i}"));
        let mine = judge(tolerance, &error, baseline.as_ref(), tolerance_override);
        let passed = mine.iter().all(|c| c.verdict.passed);
        checks.extend(mine.into_iter().map(|c| Check {
            output: several.then(|| name.clone()),
            ..c
        }));
        reports.push(OutputReport {
            name,
            error,
            baseline,
            passed,
        });
    }
    let error = worst(reports.iter().map(|r| r.error)).unwrap_or(ErrorReport {
        rel_err: 0.0,
        max_rel: 0.0,
        mean_rel: 0.0,
    });
    let baseline = if reports.iter().all(|r| r.baseline.is_some()) {
        worst(reports.iter().filter_map(|r| r.baseline))
    } else {
        None
    };
    if !several {
        reports.clear();
    }
    (reports, error, baseline, checks)
}

impl RunReport {
    /// One line per failed check (`metric error over its bound bound`); empty when the run passed.
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| !c.verdict.passed)
            .map(|c| {
                let of = c.output.as_ref().map_or(String::new(), |o| format!("{o} "));
                format!(
                    "{of}{} {:.3e} over its bound {:.3e}",
                    c.metric, c.verdict.error, c.verdict.bound
                )
            })
            .collect()
    }
}

/// Checks `p`'s run settings and sizes for `entry` on `backend` without building or allocating.
pub fn validate(
    entry: &KernelEntry,
    p: &dyn KernelProblem,
    backend: &dyn Backend,
) -> Result<kittens_kernels::problem::Plan, RunError> {
    if p.kernel() != entry.name {
        return Err(RunError::Kernel(kittens_kernels::KernelError::Problem(
            format!("a `{}` problem given to run `{}`", p.kernel(), entry.name),
        )));
    }
    let s = p.settings();
    budget::check_input_scale(s.input_scale)?;
    if let Some(t) = s.tolerance.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(RunError::Tolerance(t));
    }
    let about = backend.about();
    let plan = p.plan(about.target)?;
    budget::check_work(&plan.what, plan.work, about.work)?;
    Ok(plan)
}

/// Runs `entry` at `p` on `backend` and judges it (see the module documentation for the order).
pub fn run(
    entry: &KernelEntry,
    p: &dyn KernelProblem,
    backend: &dyn Backend,
) -> Result<RunReport, RunError> {
    let plan = validate(entry, p, backend)?;
    let (about, settings) = (backend.about(), p.settings());
    let stages = p.stages(about.target, &plan)?;
    let kernel = &stages[0].kernel;
    let mut rng = SmallRng::seed_from_u64(settings.seed);
    let inputs = p.draw(kernel, &plan.launch, &mut rng);
    let given = p.input_names(about.target);
    let (mut run, mut names) = execute_named(backend, &stages, given.as_deref(), &inputs)?;
    if let Some(want) = p.output_names(about.target) {
        (run.output, names) = by_name(&run.output, &names, &want, &plan.launch.outputs)?;
    }
    if run.output.len() != plan.launch.output_len() {
        return Err(RunError::Output {
            backend: about.name,
            got: run.output.len(),
            want: plan.launch.output_len(),
        });
    }
    let r0 = Instant::now();
    let reference = p.reference(&inputs);
    let (outputs, error, baseline, checks) = judge_outputs(
        &names,
        &plan.launch,
        &run.output,
        &reference,
        p.tolerance(),
        settings.tolerance,
    );
    let mut shape = plan.shape;
    shape["schedule"] = kernel.schedule.name().into();
    Ok(RunReport {
        kernel: kernel.name.clone(),
        backend: about.name,
        target: about.target,
        configured_for: about.target.gpu().map(|g| g.name),
        shape,
        error,
        baseline,
        outputs,
        then: stages[1..].iter().map(|s| s.kernel.name.clone()).collect(),
        passed: checks.iter().all(|c| c.verdict.passed),
        tolerance: checks[0].verdict.bound,
        checks,
        input_scale: settings.input_scale,
        max_abs_logit: reference.max_abs_logit,
        blocks: run.blocks,
        waves_per_block: run.waves_per_block,
        compile_seconds: run.compile_seconds,
        run_seconds: run.run_seconds,
        reference_seconds: r0.elapsed().as_secs_f64(),
        dynamic: run.dynamic,
    })
}

/// The outputs `out` (the tensors `names`, concatenated) in the order `want` names them, of the
/// sizes `sizes` (the run's [`Launch::outputs`]); a name missing or a size that does not add up is
/// an error naming it.
fn by_name(
    out: &[f32],
    names: &[String],
    want: &[String],
    sizes: &[usize],
) -> Result<(Vec<f32>, Vec<String>), RunError> {
    let missing = |what: String| {
        RunError::Kernel(kittens_kernels::KernelError::Problem(format!(
            "the run's outputs {names:?} do not hold {what}"
        )))
    };
    let size_of = |n: &String| want.iter().position(|w| w == n).map(|i| sizes[i]);
    let (mut at, mut chunks) = (0usize, Vec::new());
    for n in names {
        let len = size_of(n).ok_or_else(|| missing(format!("only {want:?}: `{n}` is none")))?;
        let chunk = out
            .get(at..at + len)
            .ok_or_else(|| missing(format!("`{n}` whole")))?;
        chunks.push((n, chunk));
        at += len;
    }
    let mut ordered = Vec::with_capacity(out.len());
    for w in want {
        let (_, c) = chunks
            .iter()
            .find(|(n, _)| *n == w)
            .ok_or_else(|| missing(format!("`{w}`")))?;
        ordered.extend_from_slice(c);
    }
    Ok((ordered, want.to_vec()))
}

/// Runs `entry` at `p` on `backend` for timing: the same plan and launches as [`run`], on plain
/// random inputs (uniform in `[-input_scale, input_scale)`, [`kittens_kernels::problem::draw_operands`]:
/// no f64 forward for the backward's O; by name, each in its declared dtype, where the problem names
/// its inputs, `KernelProblem::input_names`) and with no reference, which at timing sizes would take the
/// host longer than the GPU by orders of magnitude. What the backend measured is in its `dynamic`.
pub fn time(
    entry: &KernelEntry,
    p: &dyn KernelProblem,
    backend: &dyn Backend,
) -> Result<(Execution, Vec<String>), RunError> {
    let plan = validate(entry, p, backend)?;
    let target = backend.about().target;
    let stages = p.stages(target, &plan)?;
    let mut rng = SmallRng::seed_from_u64(p.settings().seed);
    let Some(given) = p.input_names(target) else {
        let inputs = kittens_kernels::problem::draw_operands(
            p.settings().input_scale,
            &stages[0].kernel,
            &plan.launch.inputs,
            &mut rng,
        );
        return execute_stages(backend, &stages, &inputs);
    };
    // Inputs by name: each drawn in the dtype of the first launch that declares it.
    let dtype = |name: &String| {
        let mut globals = stages.iter().flat_map(|s| s.kernel.globals.iter());
        globals
            .find(|g| &g.name == name)
            .map_or(kittens_hw::dtype::DType::F32, |g| g.dtype)
    };
    let scale = p.settings().input_scale;
    let inputs: Vec<Vec<f32>> = given
        .iter()
        .zip(&plan.launch.inputs)
        .map(|(n, &len)| kittens_kernels::problem::random_scaled(&mut rng, len, dtype(n), scale))
        .collect();
    execute_named(backend, &stages, Some(&given), &inputs)
}

/// The names of `kernel`'s outputs at `launch` (the globals after its inputs).
fn output_names(kernel: &Kernel, launch: &Launch) -> Vec<String> {
    let n_in = launch.inputs.len();
    (0..launch.outputs.len())
        .map(|i| {
            kernel
                .globals
                .get(n_in + i)
                .map_or_else(|| format!("output {i}"), |g| g.name.clone())
        })
        .collect()
}

/// Runs `stages` in turn on `backend` from the drawn `inputs` (the first launch's, in order): each
/// later launch's inputs by name from the tensors before it; returns the outputs no later launch
/// reads, concatenated in launch order with their names, and the executions summed (blocks, times;
/// `dynamic` per launch when there are several).
pub fn execute_stages(
    backend: &dyn Backend,
    stages: &[Stage],
    inputs: &[Vec<f32>],
) -> Result<(Execution, Vec<String>), RunError> {
    execute_named(backend, stages, None, inputs)
}

/// [`execute_stages`] with the inputs named by `given` (`None`: the first launch's first tensors,
/// as there); every launch, the first included, then takes its inputs by name.
pub fn execute_named(
    backend: &dyn Backend,
    stages: &[Stage],
    given: Option<&[String]>,
    inputs: &[Vec<f32>],
) -> Result<(Execution, Vec<String>), RunError> {
    let first_names = || -> Vec<String> {
        let globals = stages.first().map_or(&[][..], |s| &s.kernel.globals[..]);
        globals
            .iter()
            .take(inputs.len())
            .map(|g| g.name.clone())
            .collect()
    };
    let names = given.map_or_else(first_names, <[String]>::to_vec);
    // By name from the first launch on only when the names are not the first launch's own.
    let by_name = names != first_names();
    if let Some(done) = backend.execute_call(stages, &names, inputs) {
        return done;
    }
    let name = backend.about().name;
    // A launch that reads and writes one tensor (the atomic backward's f32 accumulator) has no place
    // in inputs-then-outputs; refused by name rather than run on a copy that drops its writes.
    for st in stages {
        if let Some(g) = st
            .kernel
            .globals
            .iter()
            .find(|g| g.access == kittens_ir::Access::ReadWrite)
        {
            return Err(RunError::Kernel(kittens_kernels::KernelError::Config(format!(
                "`{}` reads and writes tensor `{}` in one launch, which the runner's tensors (inputs, \
                 then outputs) cannot express; prepared calls (kittens_runtime::cuda::dispatch) run it",
                st.kernel.name, g.name
            ))));
        }
    }
    let Some((first, rest)) = stages.split_first() else {
        return Err(RunError::Kernel(kittens_kernels::KernelError::Problem(
            "a run with no launch".into(),
        )));
    };
    let run = |st: &Stage, inputs: &[Vec<f32>]| -> Result<(Execution, Vec<Vec<f32>>), RunError> {
        let e = backend.execute(&Job {
            kernel: &st.kernel,
            launch: &st.launch,
            inputs,
        })?;
        if e.output.len() != st.launch.output_len() {
            return Err(RunError::Output {
                backend: name,
                got: e.output.len(),
                want: st.launch.output_len(),
            });
        }
        let mut at = 0;
        let outs = st
            .launch
            .outputs
            .iter()
            .map(|&n| {
                at += n;
                e.output[at - n..at].to_vec()
            })
            .collect();
        Ok((e, outs))
    };
    if rest.is_empty() && !by_name {
        let e = backend.execute(&Job {
            kernel: &first.kernel,
            launch: &first.launch,
            inputs,
        })?;
        return Ok((e, output_names(&first.kernel, &first.launch)));
    }
    // Every tensor so far by name (later writes of a name replace earlier ones), and whether a
    // later launch read it.
    let mut pool: Vec<(String, Vec<f32>, bool)> = names
        .iter()
        .zip(inputs)
        .map(|(n, t)| (n.clone(), t.clone(), true))
        .collect();
    let mut total: Option<Execution> = None;
    let mut dynamic = Vec::new();
    for (i, st) in stages.iter().enumerate() {
        let ins: Vec<Vec<f32>> = if i == 0 && !by_name {
            Vec::new()
        } else {
            let mut ins = Vec::new();
            for (g, &len) in st.kernel.globals.iter().zip(&st.launch.inputs) {
                let chain = |why: String| RunError::Chain {
                    kernel: st.kernel.name.clone(),
                    tensor: g.name.clone(),
                    why,
                };
                let t = pool
                    .iter_mut()
                    .rev()
                    .find(|t| t.0 == g.name)
                    .ok_or_else(|| chain("no earlier launch wrote it".into()))?;
                if t.1.len() != len {
                    return Err(chain(format!("it has {} elements, not {len}", t.1.len())));
                }
                t.2 = true;
                ins.push(t.1.clone());
            }
            ins
        };
        let (e, outs) = run(st, if i == 0 && !by_name { inputs } else { &ins })?;
        for (n, o) in output_names(&st.kernel, &st.launch).into_iter().zip(outs) {
            pool.push((n, o, false));
        }
        dynamic.push(serde_json::json!({ "kernel": st.kernel.name, "dynamic": e.dynamic }));
        total = Some(match total {
            None => e,
            Some(t) => Execution {
                output: Vec::new(),
                blocks: t.blocks + e.blocks,
                waves_per_block: t.waves_per_block,
                compile_seconds: t.compile_seconds + e.compile_seconds,
                run_seconds: t.run_seconds + e.run_seconds,
                dynamic: None,
            },
        });
    }
    let mut total = total.expect("at least one launch ran");
    let (mut output, mut names) = (Vec::new(), Vec::new());
    for (n, t, read) in pool {
        if !read {
            output.extend(t);
            names.push(n);
        }
    }
    total.output = output;
    let observed = dynamic.iter().any(|d| !d["dynamic"].is_null());
    total.dynamic = observed.then_some(serde_json::Value::Array(dynamic));
    Ok((total, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interpreter with its output changed afterwards: what a wrong kernel on any backend looks
    /// like to the runner.
    struct Tampered(fn(&mut Vec<f32>));

    impl Backend for Tampered {
        fn about(&self) -> About {
            About {
                name: "tampered",
                ..Interpreter.about()
            }
        }
        fn execute(&self, job: &Job) -> Result<Execution, RunError> {
            let mut e = Interpreter.execute(job)?;
            (self.0)(&mut e.output);
            Ok(e)
        }
    }

    use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};

    fn small_gemm() -> GemmProblem {
        GemmProblem {
            gemm: kittens_kernels::gemm::GemmConfig::small(),
            ..GemmProblem::new(GemmKind::Bf16, 40, 24, 36)
        }
    }

    fn gemm() -> &'static KernelEntry {
        kittens_kernels::by_name("gemm_bf16").unwrap()
    }

    #[test]
    fn the_verdict_sees_a_wrong_output() {
        let p = small_gemm();
        let good = run(gemm(), &p, &Interpreter).unwrap();
        assert!(good.passed && good.error.rel_err > 0.0, "{good:?}");
        // One unwritten element (the output starts as NaN) fails the run.
        let r = run(gemm(), &p, &Tampered(|o| o[7] = f32::NAN)).unwrap();
        assert!(!r.passed && r.failures().len() == 1, "{r:?}");
        // A whole row of zeros fails the fixed tolerance.
        let r = run(gemm(), &p, &Tampered(|o| o[..24].fill(0.0))).unwrap();
        assert!(!r.passed && r.error.rel_err > 1e-2, "{r:?}");
        // An output of the wrong length is an error, not a comparison of the overlap.
        let e = run(gemm(), &p, &Tampered(|o| o.truncate(5))).unwrap_err();
        assert!(e.to_string().contains("returned 5 output elements"), "{e}");
    }

    #[test]
    fn settings_are_checked_before_anything_runs() {
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut p = small_gemm();
            p.run.tolerance = Some(t);
            assert!(matches!(
                validate(gemm(), &p, &Interpreter),
                Err(RunError::Tolerance(_))
            ));
        }
        let mut p = small_gemm();
        p.run.input_scale = f32::NAN;
        assert!(validate(gemm(), &p, &Interpreter).is_err());
        let p = GemmProblem {
            m: 0,
            ..small_gemm()
        };
        let e = validate(gemm(), &p, &Interpreter).unwrap_err().to_string();
        assert!(e.contains("m must be positive"), "{e}");
    }

    /// Each backend's work limit applies: a problem the interpreter may run is over the emulation's.
    #[test]
    fn work_is_checked_against_the_backends_limit() {
        let p = GemmProblem::new(GemmKind::Bf16, 2048, 2048, 1024);
        assert!(validate(gemm(), &p, &Interpreter).is_ok());
        let emu = HipEmu::new(Target::Gfx950).unwrap();
        let e = validate(gemm(), &p, &emu).unwrap_err().to_string();
        assert!(
            e.contains("HIP emulation work") && e.contains("2147483648 multiply-adds"),
            "{e}"
        );
        assert!(matches!(
            HipEmu::new(Target::Sm90a),
            Err(RunError::NotAmd(Target::Sm90a))
        ));
    }
}
