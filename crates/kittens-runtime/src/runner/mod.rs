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

pub mod cpu;
pub mod hip_emu;
pub mod hip_gpu;
mod isa_banks;
pub mod isa_emu;

pub use cpu::Interpreter;
pub use hip_emu::HipEmu;
pub use hip_gpu::HipGpu;
pub use isa_emu::IsaEmu;

use crate::amd::emulate::EmuError;
use kittens_hw::Target;
use kittens_ir::Kernel;
use kittens_kernels::budget::{self, WorkLimit};
use kittens_kernels::problem::{Launch, Problem};
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

/// Judges each output of `kernel` (the globals after its inputs) on its slice of the concatenated
/// `out`, reference and baseline: the per-output reports (empty for one output), the overall error and
/// baseline error, and every check (tagged with its output's name when there are several).
fn judge_outputs(
    kernel: &Kernel,
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
        let name = kernel
            .globals
            .get(launch.inputs.len() + i)
            .map_or_else(|| format!("output {i}"), |g| g.name.clone());
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
    p: &Problem,
    backend: &dyn Backend,
) -> Result<kittens_kernels::problem::Plan, RunError> {
    budget::check_input_scale(p.input_scale)?;
    if let Some(t) = p.tolerance.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(RunError::Tolerance(t));
    }
    let about = backend.about();
    let plan = entry.problem().plan(p, about.target)?;
    budget::check_work(&plan.what, plan.work, about.work)?;
    Ok(plan)
}

/// Runs `entry` at `p` on `backend` and judges it (see the module documentation for the order).
pub fn run(entry: &KernelEntry, p: &Problem, backend: &dyn Backend) -> Result<RunReport, RunError> {
    let plan = validate(entry, p, backend)?;
    let (def, about) = (entry.problem(), backend.about());
    let kernel = def.build(p, about.target)?;
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let inputs = def.draw(p, &kernel, &plan.launch, &mut rng);
    let run = backend.execute(&Job {
        kernel: &kernel,
        launch: &plan.launch,
        inputs: &inputs,
    })?;
    if run.output.len() != plan.launch.output_len() {
        return Err(RunError::Output {
            backend: about.name,
            got: run.output.len(),
            want: plan.launch.output_len(),
        });
    }
    let r0 = Instant::now();
    let reference = def.reference(p, &inputs);
    let (outputs, error, baseline, checks) = judge_outputs(
        &kernel,
        &plan.launch,
        &run.output,
        &reference,
        def.tolerance(),
        p.tolerance,
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
        passed: checks.iter().all(|c| c.verdict.passed),
        tolerance: checks[0].verdict.bound,
        checks,
        input_scale: p.input_scale,
        max_abs_logit: reference.max_abs_logit,
        blocks: run.blocks,
        waves_per_block: run.waves_per_block,
        compile_seconds: run.compile_seconds,
        run_seconds: run.run_seconds,
        reference_seconds: r0.elapsed().as_secs_f64(),
        dynamic: run.dynamic,
    })
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

    fn small_gemm() -> Problem {
        Problem {
            m: 40,
            n: 24,
            k: 36,
            gemm: kittens_kernels::gemm_bf16::GemmConfig::small(),
            ..Problem::default()
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
            let p = Problem {
                tolerance: Some(t),
                ..small_gemm()
            };
            assert!(matches!(
                validate(gemm(), &p, &Interpreter),
                Err(RunError::Tolerance(_))
            ));
        }
        let p = Problem {
            input_scale: f32::NAN,
            ..small_gemm()
        };
        assert!(validate(gemm(), &p, &Interpreter).is_err());
        let p = Problem {
            m: 0,
            ..small_gemm()
        };
        let e = validate(gemm(), &p, &Interpreter).unwrap_err().to_string();
        assert!(e.contains("m must be positive"), "{e}");
    }

    /// Each backend's work limit applies: a problem the interpreter may run is over the emulation's.
    #[test]
    fn work_is_checked_against_the_backends_limit() {
        let p = Problem {
            m: 2048,
            n: 2048,
            k: 1024,
            ..Problem::default()
        };
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
