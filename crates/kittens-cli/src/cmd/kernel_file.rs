//! `--kernel-file k.json`: a kernel written as a file (`kittens_ir::serial`: the IR as JSON, read back
//! through its structure checks and validation) instead of a registry name, for `kittens check`,
//! `compile` and `run`. The file becomes a registry entry of its own ([`KernelEntry`]'s fields are
//! public), so every report a registry kernel gets follows: the schedule analysis and bank listing
//! (`check`), the budgets, the compiler's registers, spills and hot-loop mix (`compile`), and runs on
//! every backend (`run`: the interpreter, the HIP emulation, the ISA emulator).
//!
//! `run` judges the output against the f64 reference of a registry kernel the user names
//! (`--reference gemm_bf16`: that kernel's problem gives the sizes, inputs and tolerance; the file's
//! kernel must take the same parameters and tensors), or, with `--reference none` (the default), runs
//! it on random inputs at the parameters given with `-p name=value` and reports what it wrote: per
//! output the count of elements, of non-finite ones (outputs start as NaN, so an element the kernel
//! never wrote shows) and their range, beside the schedule analysis's verdict.

use anyhow::{bail, Context, Result};
use kittens_hw::Target;
use kittens_ir::analysis::{analyze_launch, Options};
use kittens_ir::{Access, Kernel};
use kittens_kernels::problem::{
    KernelProblem, Launch, NamedArgs, Plan, Reference, RunSettings, Stage,
};
use kittens_kernels::reference::Tolerance;
use kittens_kernels::registry::{KernelEntry, Status, TargetPlan, DEFAULT_SIZES};
use kittens_kernels::KernelError;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The positional kernel name when none is given (`--kernel-file` names the kernel instead).
pub const NONE_GIVEN: &str = "-";

/// Most elements of all tensors of an unreferenced run together (4 GiB of f32 on the host).
const MAX_RUN_ELEMENTS: u64 = 1 << 30;

/// The one kernel file of this process.
static LOADED: OnceLock<Kernel> = OnceLock::new();

fn loaded() -> Result<Kernel, KernelError> {
    LOADED
        .get()
        .cloned()
        .ok_or_else(|| KernelError::Config("no kernel file loaded".into()))
}

/// Stands for "no registry name given" until [`KernelFile::resolve`] replaces it.
static PLACEHOLDER: KernelEntry = KernelEntry {
    name: NONE_GIVEN,
    about: "no kernel named",
    targets: &[],
    variants: &[],
    sizes: DEFAULT_SIZES,
    parse: |_| Err(KernelError::Config("no kernel named".into())),
};

/// Every target a kernel file is offered for: whether it fits is what lowering checks.
const FILE_TARGETS: &[TargetPlan] = &[
    TargetPlan {
        target: Target::Gfx942,
        schedule: "the kernel file's",
        status: Status::Interpreted,
    },
    TargetPlan {
        target: Target::Gfx950,
        schedule: "the kernel file's",
        status: Status::Interpreted,
    },
    TargetPlan {
        target: Target::Sm90a,
        schedule: "the kernel file's",
        status: Status::Interpreted,
    },
    TargetPlan {
        target: Target::Cpu,
        schedule: "the kernel file's",
        status: Status::Interpreted,
    },
];

/// The positional kernel argument: a registry name, or [`NONE_GIVEN`] (its default) when
/// `--kernel-file` names the kernel.
pub fn kernel_arg(name: &str) -> Result<&'static KernelEntry, KernelError> {
    if name == NONE_GIVEN {
        Ok(&PLACEHOLDER)
    } else {
        kittens_kernels::by_name(name)
    }
}

/// `--kernel-file`, shared by `check`, `compile` and `run`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KernelFile {
    /// A kernel file (JSON: `kittens_ir::serial::to_json`, docs/writing-kernels.md) instead of a
    /// registry name. Read through the IR's structure checks and validation before anything runs.
    #[arg(long, value_name = "PATH")]
    pub kernel_file: Option<PathBuf>,
}

/// Reads and checks a kernel file.
pub fn load(path: &Path) -> Result<Kernel> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading kernel file {}", path.display()))?;
    kittens_ir::serial::from_json(&text).with_context(|| format!("{}", path.display()))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The registry entry of a kernel file: every target, no variants, `problem` how it is judged.
fn entry(
    path: &Path,
    name: Option<&'static str>,
    parse: fn(&NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError>,
) -> Result<&'static KernelEntry> {
    let kernel = load(path)?;
    let name = name.unwrap_or_else(|| leak(kernel.name.clone()));
    if LOADED.set(kernel).is_err() {
        bail!("one kernel file per command");
    }
    Ok(Box::leak(Box::new(KernelEntry {
        name,
        about: leak(format!("kernel file {}", path.display())),
        targets: FILE_TARGETS,
        variants: &[],
        sizes: DEFAULT_SIZES,
        parse,
    })))
}

impl KernelFile {
    /// The entry `check` and `compile` work on: the registry's `named`, or the kernel file.
    pub fn resolve(&self, named: &'static KernelEntry) -> Result<&'static KernelEntry> {
        let given = named.name != NONE_GIVEN;
        match (&self.kernel_file, given) {
            (None, true) => Ok(named),
            (None, false) => bail!("name a kernel (`kittens list`) or give --kernel-file PATH"),
            (Some(_), true) => bail!(
                "give a registry name ({}) or --kernel-file, not both",
                named.name
            ),
            (Some(p), false) => entry(p, None, no_reference),
        }
    }
}

/// `kittens run`'s share: `--kernel-file`, what judges it, and its parameters.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunFile {
    #[command(flatten)]
    pub file: KernelFile,
    /// With --kernel-file: a registry kernel whose problem (sizes from the usual flags, inputs,
    /// f64 reference, tolerance) judges the file's kernel, which must take the same parameters and
    /// tensors; `none` (the default) runs it on random inputs at the -p parameters and reports its
    /// outputs' statistics and the schedule analysis's verdict, without a reference.
    #[arg(long, requires = "kernel_file", value_name = "NAME|none")]
    pub reference: Option<String>,
    /// With --kernel-file --reference none: a kernel parameter, `name=value` (repeatable or
    /// comma-separated); unset ones take the defaults of `kittens check`.
    #[arg(
        long = "param",
        short = 'p',
        value_delimiter = ',',
        requires = "kernel_file"
    )]
    pub params: Vec<String>,
}

/// What `run` does with its kernel argument.
pub enum ForRun {
    /// Run this entry through the runner (a registry kernel, or a kernel file judged by one).
    Entry(&'static KernelEntry),
    /// A kernel file with no reference: run it with [`run_unreferenced`].
    Unreferenced(Box<Kernel>),
}

impl RunFile {
    pub fn resolve(&self, named: &'static KernelEntry) -> Result<ForRun> {
        let Some(path) = &self.file.kernel_file else {
            return self.file.resolve(named).map(ForRun::Entry);
        };
        if named.name != NONE_GIVEN {
            bail!(
                "give a registry name or --kernel-file, not both (to judge the file against `{}`'s \
                 reference: --reference {})",
                named.name,
                named.name
            );
        }
        match self.reference.as_deref() {
            None | Some("none") => Ok(ForRun::Unreferenced(Box::new(load(path)?))),
            Some(name) => {
                let judge = kittens_kernels::by_name(name)
                    .with_context(|| format!("--reference {name}"))?;
                if JUDGE.set(judge).is_err() {
                    bail!("one --reference per command");
                }
                entry(path, Some(judge.name), judged).map(ForRun::Entry)
            }
        }
    }
}

/// The registry kernel judging this process's kernel file (`--reference NAME`).
static JUDGE: OnceLock<&'static KernelEntry> = OnceLock::new();

/// The problem of a kernel file judged by [`JUDGE`]: the judge's problem at `a`, running the file's
/// kernel.
fn judged(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    let judge = JUDGE
        .get()
        .ok_or_else(|| KernelError::Problem("no --reference kernel".into()))?;
    Ok(Box::new(FileProblem {
        inner: judge.problem(a)?,
        judge: judge.name,
    }))
}

/// A kernel file judged by a registry kernel's problem: the sizes, inputs, reference and tolerance
/// are the registry kernel's, the kernel run is the file's.
#[derive(Debug)]
struct FileProblem {
    inner: Box<dyn KernelProblem>,
    judge: &'static str,
}

impl FileProblem {
    /// The file's kernel, if its parameters and tensors match `launch`.
    fn fits(&self, launch: &Launch) -> Result<Kernel, KernelError> {
        let k = loaded()?;
        let tensors = launch.inputs.len() + launch.outputs.len();
        if k.params.len() != launch.params.len() || k.globals.len() != tensors {
            return Err(KernelError::Problem(format!(
                "the kernel file's `{}` takes {} parameters and {} tensors; `{}`'s problem launches \
                 {} parameters, {} inputs and {} outputs",
                k.name,
                k.params.len(),
                k.globals.len(),
                self.judge,
                launch.params.len(),
                launch.inputs.len(),
                launch.outputs.len()
            )));
        }
        Ok(k)
    }
}

impl KernelProblem for FileProblem {
    fn kernel(&self) -> &'static str {
        self.inner.kernel()
    }
    fn settings(&self) -> &RunSettings {
        self.inner.settings()
    }
    fn launch(&self) -> Result<Launch, KernelError> {
        self.inner.launch()
    }
    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let plan = self.inner.plan(target)?;
        self.fits(&plan.launch)?;
        Ok(plan)
    }
    fn build(&self, _: Target) -> Result<Kernel, KernelError> {
        loaded()
    }
    fn stages(&self, _: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        Ok(vec![Stage {
            kernel: self.fits(&plan.launch)?,
            launch: plan.launch.clone(),
        }])
    }
    fn draw(&self, kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        self.inner.draw(kernel, launch, rng)
    }
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        self.inner.reference(inputs)
    }
    fn tolerance(&self) -> Tolerance {
        self.inner.tolerance()
    }
}

/// The problem of a kernel file with no reference: it builds the file's kernel (what `check` and
/// `compile` take, [`KernelEntry::build_for`]) and has no sizes, so a run through the runner is
/// refused at its plan (`run` takes the unreferenced path, [`run_unreferenced`]).
fn no_reference(_: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(Unjudged(RunSettings::default())))
}

/// [`no_reference`]'s problem: the kernel file's kernel, no sizes.
#[derive(Debug)]
struct Unjudged(RunSettings);

impl Unjudged {
    fn no_sizes() -> KernelError {
        KernelError::Problem(
            "a kernel file without --reference has no problem sizes; `kittens run --kernel-file` \
             runs it at its -p parameters"
                .into(),
        )
    }
}

impl KernelProblem for Unjudged {
    fn kernel(&self) -> &'static str {
        NONE_GIVEN
    }
    fn settings(&self) -> &RunSettings {
        &self.0
    }
    fn launch(&self) -> Result<Launch, KernelError> {
        Err(Self::no_sizes())
    }
    fn plan(&self, _: Target) -> Result<Plan, KernelError> {
        Err(Self::no_sizes())
    }
    fn build(&self, _: Target) -> Result<Kernel, KernelError> {
        loaded()
    }
    /// Never reached: [`Self::plan`] refuses every run first.
    fn reference(&self, _: &[Vec<f32>]) -> Reference {
        Reference {
            values: Vec::new(),
            baseline: None,
            max_abs_logit: None,
        }
    }
    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(0.0)
    }
}

/// One output of an unreferenced run.
#[derive(Debug, serde::Serialize)]
pub struct OutputStats {
    pub name: String,
    pub elements: usize,
    /// NaN or infinite elements (outputs start as NaN: an element the kernel never wrote counts).
    pub non_finite: usize,
    pub min: f32,
    pub max: f32,
    pub mean: f64,
    pub rms: f64,
}

fn stats(name: &str, v: &[f32]) -> OutputStats {
    let fin: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = fin.len().max(1) as f64;
    OutputStats {
        name: name.to_string(),
        elements: v.len(),
        non_finite: v.len() - fin.len(),
        min: fin.iter().copied().fold(f32::INFINITY, f32::min),
        max: fin.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        mean: fin.iter().map(|&x| f64::from(x)).sum::<f64>() / n,
        rms: (fin.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / n).sqrt(),
    }
}

/// The launch of a kernel file at `params`: read-only tensors are the inputs, declared first; the
/// others are the outputs. Sizes from the tensors' shapes and strides, within [`MAX_RUN_ELEMENTS`].
pub fn launch_of(k: &Kernel, params: &[i64]) -> Result<Launch> {
    let n_in = k
        .globals
        .iter()
        .take_while(|g| g.access == Access::Read)
        .count();
    if let Some(g) = k.globals[n_in..].iter().find(|g| g.access == Access::Read) {
        bail!(
            "`{}`: the read-only tensor `{}` is declared after an output; `kittens run --kernel-file` \
             takes the inputs (read-only tensors) first",
            k.name,
            g.name
        );
    }
    if n_in == k.globals.len() {
        bail!(
            "`{}` declares no output (a tensor that is not read-only)",
            k.name
        );
    }
    let mut lens = Vec::new();
    let mut total = 0u64;
    for g in 0..k.globals.len() {
        let n = kittens_ir::interp::required_len(k, params, g)?;
        total = total.saturating_add(n as u64);
        if total > MAX_RUN_ELEMENTS {
            bail!(
                "tensor `{}` brings the run to more than {MAX_RUN_ELEMENTS} elements; give smaller -p \
                 parameters",
                k.globals[g].name
            );
        }
        lens.push(n);
    }
    let outputs = lens.split_off(n_in);
    Ok(Launch {
        params: params.to_vec(),
        inputs: lens,
        outputs,
    })
}

/// `kittens run --kernel-file k.json [--reference none]`: random inputs (uniform in ±`scale`, rounded
/// to each tensor's dtype) at the -p parameters, the kernel run on `backend`, its outputs' statistics
/// and the schedule analysis's verdict. Returns the JSON document it printed (or would print).
pub fn run_unreferenced(
    k: &Kernel,
    given: &[String],
    backend: &dyn kittens_runtime::runner::Backend,
    seed: u64,
    scale: f32,
    json: bool,
) -> Result<serde_json::Value> {
    kittens_kernels::budget::check_input_scale(scale)?;
    let names: Vec<String> = k.params.iter().map(|p| p.name.clone()).collect();
    let words: Vec<bool> = k.params.iter().map(|p| p.word).collect();
    let params = super::flags::param_values(&names, &words, given)?;
    let launch = launch_of(k, &params)?;
    // The verdict first: a racy kernel is refused by the interpreter, and the other backends
    // deserve the same warning.
    let verdict = match analyze_launch(
        k,
        &Options {
            params: params.clone(),
            ..Options::default()
        },
    ) {
        Ok(l) => {
            let hazards: Vec<String> = l.hazards().map(|(_, h)| h.to_string()).collect();
            serde_json::json!({"hazards": hazards, "classes": l.classes.len(),
                "traced_blocks": l.traced_blocks, "exhaustive": l.exhaustive})
        }
        Err(e) => serde_json::json!({"error": e.to_string()}),
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let inputs: Vec<Vec<f32>> = launch
        .inputs
        .iter()
        .zip(&k.globals)
        .map(|(&n, g)| kittens_kernels::problem::random_scaled(&mut rng, n, g.dtype, scale))
        .collect();
    let stage = Stage {
        kernel: k.clone(),
        launch: launch.clone(),
    };
    let about = backend.about();
    let (exec, names) = kittens_runtime::runner::execute_stages(backend, &[stage], &inputs)
        .with_context(|| format!("running `{}` on {}", k.name, about.name))?;
    let mut at = 0;
    let outputs: Vec<OutputStats> = launch
        .outputs
        .iter()
        .zip(&names)
        .map(|(&n, name)| {
            at += n;
            stats(name, &exec.output[at - n..at])
        })
        .collect();
    let doc = serde_json::json!({
        "kernel": k.name,
        "backend": about.name,
        "target": about.target,
        "params": names_values(&k.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>(), &params),
        "reference": "none",
        "outputs": outputs,
        "analysis": verdict,
        "blocks": exec.blocks,
        "waves_per_block": exec.waves_per_block,
        "run_seconds": exec.run_seconds,
        "dynamic": exec.dynamic,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "kernel   {} (kernel file, backend {}, {} blocks × {} waves)",
            k.name, about.name, exec.blocks, exec.waves_per_block
        );
        println!("params   {}", doc["params"]);
        for o in &outputs {
            println!(
                "output   {:<8} {} elements, {} non-finite, min {:.4e} max {:.4e} mean {:.4e} rms {:.4e}",
                o.name, o.elements, o.non_finite, o.min, o.max, o.mean, o.rms
            );
        }
        match verdict.get("hazards").and_then(|h| h.as_array()) {
            Some(h) if h.is_empty() => println!(
                "analysis no hazard ({} block class(es), {} blocks traced{})",
                verdict["classes"],
                verdict["traced_blocks"],
                if verdict["exhaustive"] == true {
                    ""
                } else {
                    ", sampled"
                }
            ),
            Some(h) => {
                println!("analysis {} hazard(s):", h.len());
                for x in h {
                    println!("         {}", x.as_str().unwrap_or(""));
                }
            }
            None => println!("analysis not run: {}", verdict["error"]),
        }
        println!("reference none (`--reference NAME` judges the output against a registry kernel's f64 reference)");
        println!("time     run {:.3} s", exec.run_seconds);
    }
    if let Some(o) = outputs.iter().find(|o| o.non_finite > 0) {
        eprintln!(
            "note: output `{}` has {} non-finite elements (outputs start as NaN: elements the kernel \
             did not write, or an overflow)",
            o.name, o.non_finite
        );
    }
    Ok(doc)
}

fn names_values(names: &[String], values: &[i64]) -> serde_json::Value {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| (n.clone(), serde_json::Value::from(*v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}
