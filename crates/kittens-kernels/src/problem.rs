//! A kernel's problem: the sizes and settings of one run on random inputs, each kernel's own type
//! (`gemm::problem::GemmProblem`, `attn_fwd::problem::AttnProblem`, ...), and what it knows about
//! running at them ([`KernelProblem`]: its launch parameters and tensors, its configuration per target,
//! its size budget, its f64 reference and how its error is judged).
//!
//! Shared code never names a kernel's problem type: the CLI's flags and the Python package's dict are
//! a [`NamedArgs`] (name → value), and the registry entry parses its kernel's problem from it
//! (`KernelEntry::problem`). Adding a kernel adds its own problem type and edits no shared struct. The
//! settings every run has (seed, input scale, tolerance, variant, the device's SM count) are
//! [`RunSettings`]. The runner that draws the inputs, executes them on a backend and judges the output
//! is `kittens_runtime::runner`; the Python package's path on the caller's own inputs is
//! [`crate::exec`].

use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::Kernel;
use rand::rngs::SmallRng;
use rand::Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// One value of a [`NamedArgs`]: what a command-line flag or a Python value is.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    Bool(bool),
    Int(i128),
    Float(f64),
    Text(String),
    /// A tuple of integers (a sliding window's `(left, right)`, the GEMM's leading dimensions).
    Ints(Vec<i64>),
    /// Explicitly unset (Python's `None`): an optional setting's default.
    None,
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl From<$t> for ArgValue {
            fn from(v: $t) -> ArgValue {
                ArgValue::Int(i128::from(v))
            }
        }
    )*};
}
int_value!(u8, u16, u32, u64, i8, i16, i32, i64);

impl From<usize> for ArgValue {
    fn from(v: usize) -> ArgValue {
        ArgValue::Int(v as i128)
    }
}
impl From<bool> for ArgValue {
    fn from(v: bool) -> ArgValue {
        ArgValue::Bool(v)
    }
}
impl From<f32> for ArgValue {
    fn from(v: f32) -> ArgValue {
        ArgValue::Float(f64::from(v))
    }
}
impl From<f64> for ArgValue {
    fn from(v: f64) -> ArgValue {
        ArgValue::Float(v)
    }
}
impl From<&str> for ArgValue {
    fn from(v: &str) -> ArgValue {
        ArgValue::Text(v.to_string())
    }
}
impl From<String> for ArgValue {
    fn from(v: String) -> ArgValue {
        ArgValue::Text(v)
    }
}
impl<T: Into<ArgValue>> From<Option<T>> for ArgValue {
    fn from(v: Option<T>) -> ArgValue {
        v.map_or(ArgValue::None, Into::into)
    }
}

/// A problem's settings by name, as a caller gives them: `kittens run`'s flags, the Python package's
/// problem dict. A kernel's problem type reads the names it knows ([`KernelProblem`]'s parsers, e.g.
/// `LayerNormProblem::from_args`); each read is recorded, so that a caller can refuse the names no
/// kernel read ([`NamedArgs::unread`]) instead of ignoring them.
#[derive(Debug, Clone, Default)]
pub struct NamedArgs {
    values: BTreeMap<String, ArgValue>,
    read: RefCell<BTreeSet<String>>,
}

impl NamedArgs {
    pub fn new() -> NamedArgs {
        NamedArgs::default()
    }

    /// Sets `name` to `v` (replacing an earlier value).
    pub fn set(&mut self, name: &str, v: impl Into<ArgValue>) -> &mut NamedArgs {
        self.values.insert(name.to_string(), v.into());
        self
    }

    /// `self` with `name` set to `v`.
    pub fn with(mut self, name: &str, v: impl Into<ArgValue>) -> NamedArgs {
        self.set(name, v);
        self
    }

    /// The value of `name`, if given (and records the read).
    pub fn get(&self, name: &str) -> Option<&ArgValue> {
        let v = self.values.get(name)?;
        self.read.borrow_mut().insert(name.to_string());
        Some(v)
    }

    /// The names given that no parser has read, in order.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.values
            .keys()
            .filter(|k| !read.contains(*k))
            .cloned()
            .collect()
    }

    fn wrong(name: &str, want: &str, got: &ArgValue) -> KernelError {
        KernelError::Problem(format!("`{name}`: expected {want}, got {got:?}"))
    }

    /// An integer in `T`'s range (a text is parsed), `default` when not given.
    fn int<T: TryFrom<i128> + std::str::FromStr>(
        &self,
        name: &str,
        want: &str,
        default: T,
    ) -> Result<T, KernelError> {
        match self.get(name) {
            None => Ok(default),
            Some(ArgValue::Int(i)) => {
                T::try_from(*i).map_err(|_| Self::wrong(name, want, &ArgValue::Int(*i)))
            }
            Some(v @ ArgValue::Text(t)) => t.trim().parse().map_err(|_| Self::wrong(name, want, v)),
            Some(v) => Err(Self::wrong(name, want, v)),
        }
    }

    /// A size (non-negative integer), `default` when not given.
    pub fn size_or(&self, name: &str, default: usize) -> Result<usize, KernelError> {
        self.int(name, "a size (an integer from 0)", default)
    }

    /// A 32-bit unsigned integer, `default` when not given.
    pub fn u32_or(&self, name: &str, default: u32) -> Result<u32, KernelError> {
        self.int(name, "an integer from 0 to 2^32 - 1", default)
    }

    /// A 64-bit unsigned integer, `default` when not given.
    pub fn u64_or(&self, name: &str, default: u64) -> Result<u64, KernelError> {
        self.int(name, "an integer from 0 to 2^64 - 1", default)
    }

    /// An optional size: `default` when not given, `None` for an explicit `None`.
    pub fn opt_size_or(
        &self,
        name: &str,
        default: Option<usize>,
    ) -> Result<Option<usize>, KernelError> {
        match self.get(name) {
            Some(ArgValue::None) => Ok(None),
            Some(_) => self.size_or(name, 0).map(Some),
            None => Ok(default),
        }
    }

    /// A flag, `default` when not given.
    pub fn flag_or(&self, name: &str, default: bool) -> Result<bool, KernelError> {
        match self.get(name) {
            None => Ok(default),
            Some(ArgValue::Bool(b)) => Ok(*b),
            Some(v) => Err(Self::wrong(name, "true or false", v)),
        }
    }

    /// A number (an integer is taken as one), `default` when not given.
    pub fn f64_or(&self, name: &str, default: f64) -> Result<f64, KernelError> {
        match self.get(name) {
            None => Ok(default),
            Some(ArgValue::Float(x)) => Ok(*x),
            Some(ArgValue::Int(i)) => Ok(*i as f64),
            Some(v @ ArgValue::Text(t)) => t
                .trim()
                .parse()
                .map_err(|_| Self::wrong(name, "a number", v)),
            Some(v) => Err(Self::wrong(name, "a number", v)),
        }
    }

    /// A number as f32, `default` when not given.
    pub fn f32_or(&self, name: &str, default: f32) -> Result<f32, KernelError> {
        self.f64_or(name, f64::from(default)).map(|x| x as f32)
    }

    /// An optional number: `default` when not given, `None` for an explicit `None`.
    pub fn opt_f32_or(&self, name: &str, default: Option<f32>) -> Result<Option<f32>, KernelError> {
        match self.get(name) {
            Some(ArgValue::None) => Ok(None),
            Some(_) => self.f32_or(name, 0.0).map(Some),
            None => Ok(default),
        }
    }

    /// An optional f64: `default` when not given, `None` for an explicit `None`.
    pub fn opt_f64_or(&self, name: &str, default: Option<f64>) -> Result<Option<f64>, KernelError> {
        match self.get(name) {
            Some(ArgValue::None) => Ok(None),
            Some(_) => self.f64_or(name, 0.0).map(Some),
            None => Ok(default),
        }
    }

    /// A value of a type with a text form (`FromStr`: a layout, a key split, a window): a text or an
    /// integer parsed by it, `default` when not given.
    pub fn parse_or<T>(&self, name: &str, default: T) -> Result<T, KernelError>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        Ok(self.opt_parse(name)?.unwrap_or(default))
    }

    /// An optional value of a type with a text form (a window): `None` when not given or `None`,
    /// else as [`Self::parse_or`] (a pair `(a, b)` is read as the text `a,b`).
    pub fn opt_parse<T>(&self, name: &str) -> Result<Option<T>, KernelError>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        let text = match self.get(name) {
            None | Some(ArgValue::None) => return Ok(None),
            Some(ArgValue::Text(t)) => t.clone(),
            Some(ArgValue::Int(i)) => i.to_string(),
            Some(ArgValue::Ints(v)) => v
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(","),
            Some(v) => return Err(Self::wrong(name, "a name or a number", v)),
        };
        text.parse()
            .map(Some)
            .map_err(|e| KernelError::Problem(format!("`{name}` {text:?}: {e}")))
    }

    /// `N` sizes given as a tuple (`None` when not given or `None`).
    pub fn sizes<const N: usize>(&self, name: &str) -> Result<Option<[usize; N]>, KernelError> {
        let want = || format!("{N} sizes (integers from 0)");
        match self.get(name) {
            None | Some(ArgValue::None) => Ok(None),
            Some(v @ ArgValue::Ints(xs)) => {
                let sizes: Option<Vec<usize>> =
                    xs.iter().map(|&x| usize::try_from(x).ok()).collect();
                sizes
                    .and_then(|s| <[usize; N]>::try_from(s).ok())
                    .map(Some)
                    .ok_or_else(|| Self::wrong(name, &want(), v))
            }
            Some(v) => Err(Self::wrong(name, &want(), v)),
        }
    }

    /// A text, `default` when not given.
    pub fn text_or(
        &self,
        name: &str,
        default: Option<&str>,
    ) -> Result<Option<String>, KernelError> {
        match self.get(name) {
            None => Ok(default.map(str::to_string)),
            Some(ArgValue::None) => Ok(None),
            Some(ArgValue::Text(t)) => Ok(Some(t.clone())),
            Some(v) => Err(Self::wrong(name, "a name", v)),
        }
    }
}

/// The settings of a run that every kernel has: not sizes, but how its inputs are drawn and its error
/// judged, which configuration it runs and for which device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSettings {
    pub seed: u64,
    /// The random inputs (uniform in [-1, 1)) are multiplied by this before rounding to bf16; large
    /// scales give attention large logits (`8` at head dimension 64 gives logits of about ±64).
    pub input_scale: f32,
    /// A fixed bound on `rel_err` replacing the kernel's own ([`KernelProblem::tolerance`]).
    pub tolerance: Option<f64>,
    /// On a GPU target, one of the kernel's named variants (`registry::KernelEntry::variants`, e.g. the
    /// GEMM's `interleave4`) instead of the target's default configuration; `None`: the default.
    pub variant: Option<&'static str>,
    /// On a GPU target, the multiprocessor count of the device the run is for (what the runtime read
    /// from the device it opened), where the configuration depends on it (the GEMM's block per shape,
    /// the attention's key split); `None`: the catalog GPU's.
    pub sms: Option<u32>,
    /// On a GPU target, the catalog model of the device the run is for (`kittens_hw::gpu::for_device`
    /// of its product name: an H200 streams at 4.8 TB/s where an H100 streams at 3.35), where the
    /// configuration depends on it (the GEMM's block and split at a small M); `None`: the target's.
    pub gpu: Option<&'static kittens_hw::Gpu>,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            seed: 0,
            input_scale: 1.0,
            tolerance: None,
            variant: None,
            sms: None,
            gpu: None,
        }
    }
}

impl RunSettings {
    /// The settings named in `a` (`seed`, `input_scale`, `tolerance`, `variant`, `sms`, `gpu`: a
    /// catalog name or a device's product name); `variant` must be one of `variants` (the kernel's
    /// own).
    pub fn from_args(a: &NamedArgs, variants: &[&'static str]) -> Result<RunSettings, KernelError> {
        let d = RunSettings::default();
        let variant = match a.text_or("variant", None)? {
            None => None,
            Some(v) => Some(*variants.iter().find(|x| **x == v).ok_or_else(|| {
                KernelError::Config(format!(
                    "no variant `{v}`; variants: {}",
                    if variants.is_empty() {
                        "none".to_string()
                    } else {
                        variants.join(", ")
                    }
                ))
            })?),
        };
        let sms = match a.get("sms") {
            None | Some(ArgValue::None) => None,
            Some(_) => Some(a.u32_or("sms", 0)?),
        };
        let gpu = match a.text_or("gpu", None)? {
            None => None,
            Some(g) => Some(
                kittens_hw::gpu(&g)
                    .ok()
                    .or_else(|| kittens_hw::gpu::for_device(&g))
                    .ok_or_else(|| {
                        KernelError::Config(format!(
                            "`gpu` {g:?}: no catalog GPU of that name; known: {}",
                            kittens_hw::gpu::ALL.map(|g| g.name).join(", ")
                        ))
                    })?,
            ),
        };
        Ok(RunSettings {
            seed: a.u64_or("seed", d.seed)?,
            input_scale: a.f32_or("input_scale", d.input_scale)?,
            tolerance: a.opt_f64_or("tolerance", d.tolerance)?,
            variant,
            sms,
            gpu,
        })
    }

    /// The model of `gpu` a configuration is chosen for: the catalog's (the device's own where the
    /// settings name one of the same architecture, [`RunSettings::gpu`]), with the device's
    /// multiprocessor count where the settings name one ([`RunSettings::sms`]).
    pub fn device_model(&self, gpu: &kittens_hw::Gpu) -> kittens_hw::Gpu {
        let mut g = match self.gpu {
            Some(d) if d.arch == gpu.arch => d.clone(),
            _ => gpu.clone(),
        };
        if let Some(n) = self.sms.filter(|&n| n > 0) {
            g.compute_units = n;
        }
        g
    }
}

/// How a kernel is launched at a problem's sizes: its parameters, the element count of each input
/// tensor (in declaration order) and of each output tensor; the outputs are declared after the
/// inputs (most kernels have one; the attention backward has dQ, dK, dV).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub params: Vec<i64>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

impl Launch {
    /// Elements of all outputs together (a backend returns them concatenated in declaration order).
    pub fn output_len(&self) -> usize {
        self.outputs.iter().sum()
    }
}

/// One launch of a run that takes several (a key-split attention and its merge): the kernel and its
/// launch. Tensors pass from one launch to the next by name: a launch's inputs are the tensors of
/// those names drawn for the run or written by an earlier launch, and the run's outputs are the
/// outputs no later launch reads, in launch order (`kittens_runtime::runner` runs them so).
#[derive(Debug, Clone)]
pub struct Stage {
    pub kernel: Kernel,
    pub launch: Launch,
}

/// A validated run: its launch, what it is called in messages, the multiply-adds it executes on the
/// problem padded to whole tiles (`None`: over 2^64; each backend has its own limit) and the shape
/// the report prints.
#[derive(Debug, Clone)]
pub struct Plan {
    pub launch: Launch,
    pub what: String,
    pub work: Option<u64>,
    pub shape: serde_json::Value,
}

/// What a kernel's output is judged against, computed from the inputs it ran on.
#[derive(Debug, Clone)]
pub struct Reference {
    /// The exact result in f64 (several outputs: concatenated in declaration order).
    pub values: Vec<f64>,
    /// The same computation done the plain low-precision way (attention: PyTorch-style bf16), the
    /// yardstick of the test rule; `None` for kernels judged by a fixed tolerance.
    pub baseline: Option<Vec<f32>>,
    /// Attention: the largest `|q·k|/√d` of the inputs (`reference::attention_with_logits`).
    pub max_abs_logit: Option<f64>,
}

/// How a kernel's error is judged when the run gives no tolerance of its own (the reference module's
/// `judge` applies it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// `rel_err` at most this.
    Fixed(f64),
    /// The reference module's `check_rule` (with its `RULE_FLOOR`) on `rel_err` and on `max_rel`,
    /// against the baseline.
    Rule,
}

/// A kernel's problem: its sizes and settings, and everything the kernel knows about running at them.
/// Each kernel implements it on its own type, beside its code; the registry parses it from named
/// arguments (`KernelEntry::problem`). Implementations must check every size with checked arithmetic
/// before anything is built or allocated.
pub trait KernelProblem: Send + Sync + std::fmt::Debug {
    /// The registry name of the kernel this problem runs.
    fn kernel(&self) -> &'static str;

    /// The run's settings (seed, input scale, tolerance, variant, device).
    fn settings(&self) -> &RunSettings;

    /// Parameters and tensor sizes (zero sizes allowed; overflow and inconsistent shapes are
    /// errors). No budget: the caller-input path ([`crate::exec`]) uses it too.
    fn launch(&self) -> Result<Launch, KernelError>;

    /// Validates the problem for a random-input run on `target`: sizes positive (an empty problem
    /// would pass with zero error), tile sides and host bytes within [`crate::budget`]; then the launch.
    fn plan(&self, target: Target) -> Result<Plan, KernelError>;

    /// The kernel a run on `target` executes: the problem's tiles on the CPU, the target GPU's
    /// configuration elsewhere (with the problem's shape-bound settings, e.g. attention's head
    /// dimension).
    fn build(&self, target: Target) -> Result<Kernel, KernelError>;

    /// The launches of a run on `target` at `plan`, in order ([`Stage`]). Default: the one kernel of
    /// [`Self::build`] at the plan's launch.
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        Ok(vec![Stage {
            kernel: self.build(target)?,
            launch: plan.launch.clone(),
        }])
    }

    /// The names of the run's inputs ([`Launch::inputs`] order) when the first of [`Self::stages`]
    /// on `target` does not take them all as its first tensors (the varlen backward's sm_90a
    /// launches open with a pass over O and dO only): the runner then hands each launch its inputs
    /// by name. `None` (the default): the first launch's first tensors are the run's inputs.
    fn input_names(&self, _target: Target) -> Option<Vec<String>> {
        None
    }

    /// The names of the run's outputs ([`Launch::outputs`] order) when the launches of
    /// [`Self::stages`] on `target` return them in another order (the atomic Hopper backward's last
    /// launch writes dQ, after dK and dV): the runner then orders them by name. `None` (the
    /// default): launch order is the run's.
    fn output_names(&self, _target: Target) -> Option<Vec<String>> {
        None
    }

    /// The random inputs of a run of `kernel` (as [`Self::build`] made it) at `launch`, in
    /// [`Launch::inputs`] order. By default each is uniform in `[-input_scale, input_scale)` rounded to
    /// its tensor's dtype ([`draw_operands`]); a kernel with other inputs (the GEMM's scales) says so.
    fn draw(&self, kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        draw_operands(self.settings().input_scale, kernel, &launch.inputs, rng)
    }

    /// The f64 reference (and baseline) on `inputs`, in [`Launch::inputs`] order.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference;

    /// How the error is judged when the run gives no `--tolerance`.
    fn tolerance(&self) -> Tolerance;
}

/// One input per length in `lens`, the i-th uniform in `[-input_scale, input_scale)` and rounded to the
/// dtype of `kernel`'s i-th tensor (inputs are declared first, in launch order), so the reference
/// sees exactly what the kernel stores.
pub fn draw_operands(
    input_scale: f32,
    kernel: &Kernel,
    lens: &[usize],
    rng: &mut SmallRng,
) -> Vec<Vec<f32>> {
    lens.iter()
        .zip(&kernel.globals)
        .map(|(&len, g)| random_scaled(rng, len, g.dtype, input_scale))
        .collect()
}

/// Uniform values in [-1, 1) rounded to `dtype` (so the reference sees exactly what the kernel stores).
pub fn random(rng: &mut SmallRng, len: usize, dtype: DType) -> Vec<f32> {
    random_scaled(rng, len, dtype, 1.0)
}

/// Uniform values in [-scale, scale) rounded to `dtype`.
pub fn random_scaled(rng: &mut SmallRng, len: usize, dtype: DType, scale: f32) -> Vec<f32> {
    (0..len)
        .map(|_| round(rng.gen_range(-1.0f32..1.0) * scale, dtype, Rounding::Rtne))
        .collect()
}

/// Bytes the interpreter holds per output element until the blocks' stores are applied.
pub(crate) const STORE_BYTES: u64 = std::mem::size_of::<(usize, usize, f32)>() as u64;

/// Refuses a zero size: an empty problem would "pass" with zero error.
pub(crate) fn positive(what: &str, dims: &[(&str, usize)]) -> Result<(), KernelError> {
    match dims.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(KernelError::Problem(format!(
            "{what}: {name} must be positive"
        ))),
        None => Ok(()),
    }
}

/// Kernel parameters are `i64`; a size that does not fit is refused.
pub(crate) fn param(name: &str, v: usize) -> Result<i64, KernelError> {
    i64::try_from(v).map_err(|_| KernelError::Problem(format!("{name} {v} exceeds 2^63 - 1")))
}

/// `∏ dims` in elements, or an error naming the tensor.
pub(crate) fn elements(tensor: &str, dims: &[usize]) -> Result<usize, KernelError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            KernelError::Problem(format!("{tensor}: {dims:?} overflows the address space"))
        })
}

/// `x` rounded up to a multiple of `to`, `None` on overflow.
pub(crate) fn round_up(x: u64, to: u64) -> Option<u64> {
    x.div_ceil(to).checked_mul(to)
}
