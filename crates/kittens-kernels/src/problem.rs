//! A kernel's problem: the sizes and settings of one run on random inputs ([`Problem`]), and what each
//! kernel knows about running at them ([`KernelProblem`]: its launch parameters and tensors, its
//! configuration per target, its size budget, its f64 reference and how its error is judged).
//!
//! Each kernel implements [`KernelProblem`] beside its own code (`gemm::problem`,
//! `attn_fwd::problem`) and the registry hands it out (`KernelEntry::problem`). The runner that draws
//! the inputs, executes them on a backend and judges the output is `kittens_runtime::runner`; the
//! Python package's path on the caller's own inputs is [`crate::exec`]. Neither names a kernel.

use crate::attn_fwd::split::KvSplits;
use crate::attn_fwd::{AttnConfig, AttnLayout};
use crate::attn_score::{AttnOptions, Logits, Window};
use crate::gemm::GemmConfig;
use crate::reference::{AttnShape, Tolerance};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::numerics::{round, Rounding};
use kittens_ir::Kernel;
use rand::rngs::SmallRng;
use rand::Rng;

impl Problem {
    /// The model of `gpu` a configuration is chosen for: the catalog's, with the device's
    /// multiprocessor count where the problem names one ([`Problem::sms`]; an H200 is not an H100).
    pub fn device_model(&self, gpu: &kittens_hw::Gpu) -> kittens_hw::Gpu {
        let mut g = gpu.clone();
        if let Some(n) = self.sms.filter(|&n| n > 0) {
            g.compute_units = n;
        }
        g
    }
}

/// Problem sizes and tile choices for one run. A kernel reads the fields it needs; on a GPU target the
/// tiles are the target's (`GemmConfig::for_gpu`), not `gemm` / `attn_cfg`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub attn: AttnShape,
    /// Keys of the attention when they differ from the queries (`attn.seq`).
    pub seq_kv: Option<usize>,
    pub causal: bool,
    /// Causal mask aligned bottom-right (key `j ≤ i + seq_kv − seq_q`) instead of top-left.
    pub bottom_right: bool,
    /// The attention forward also writes the log-sum-exp of every query row (a second output).
    pub lse: bool,
    /// Attention: the softmax scale and soft cap (`None`s: `1/√d`, no cap).
    pub logits: Logits,
    /// Attention: a sliding window (bottom-right aligned, `crate::attn_score::Window`).
    pub window: Option<Window>,
    /// The attention forward's key split (`attn_fwd::split`): 1 part (the default, the plain
    /// kernel), a fixed count, or the planner's choice for the GPU the run is configured for.
    pub kv_splits: KvSplits,
    pub gemm: GemmConfig,
    /// Tile sizes of the attention kernel on the CPU; `dim` is taken from `attn.dim`.
    pub attn_cfg: AttnConfig,
    /// Layernorm: rows, row length, dropout.
    pub norm: NormShape,
    /// Rotary: the interleaved (GPT-J) pairing instead of half rotation (GPT-NeoX); the shape is
    /// `attn`'s (`heads` heads of `dim`, `seq` positions, `layout`).
    pub interleaved: bool,
    /// RMSNorm (`rmsnorm`, `rmsnorm_bwd`; rows and row length are `norm.rows`, `norm.dim`): add a
    /// residual first and write the sum out as the new residual (the default); `false`: normalise
    /// `x` alone.
    pub residual: bool,
    /// SwiGLU (`swiglu`, `swiglu_bwd`; `norm.rows` rows of `F = norm.dim`): gate and up are the two
    /// halves of one `[rows, 2F]` tensor (gate first) instead of two `[rows, F]` tensors.
    pub packed: bool,
    /// Layernorm, RMSNorm: the epsilon added to the variance or mean square (`None`: the kernel's
    /// default, 1e-5 for the layernorm, 1e-6 for the RMSNorm).
    pub eps: Option<f32>,
    /// On a GPU target, the multiprocessor count of the device the run is for (what the runtime read
    /// from the device it opened), where the configuration depends on it (the GEMM's block per shape,
    /// the attention's key split); `None`: the catalog GPU's.
    pub sms: Option<u32>,
    /// Cross-entropy (`cross_entropy`; `norm.rows` rows of `V = norm.dim` logits): label smoothing
    /// and the logits' dtype.
    pub cross_entropy: crate::cross_entropy::problem::CrossEntropyOptions,
    pub seed: u64,
    /// The random inputs (uniform in [-1, 1)) are multiplied by this before rounding to bf16; large
    /// scales give attention large logits (`8` at head dimension 64 gives logits of about ±64).
    pub input_scale: f32,
    /// A fixed bound on `rel_err` replacing the kernel's own ([`KernelProblem::tolerance`]).
    pub tolerance: Option<f64>,
    /// On a GPU target, one of the kernel's named variants (`registry::KernelEntry::variants`, e.g. the
    /// GEMM's `interleave4`) instead of the target's default configuration; `None`: the default.
    pub variant: Option<&'static str>,
    /// Varlen attention (`attn_varlen`): the packed tensors' rows `(total_q, total_k)` when a caller
    /// gives its own (Python); `None`: the sum of the lengths a random-input run draws.
    pub varlen_total: Option<(usize, usize)>,
}

impl Problem {
    /// The attention's logits and window, as the references take them.
    pub fn attn_options(&self) -> AttnOptions {
        AttnOptions {
            logits: self.logits,
            window: self.window,
        }
    }

    /// Refuses a softmax scale, soft cap or window out of range, naming it.
    pub fn check_attn_options(&self) -> Result<(), KernelError> {
        self.logits.check()?;
        self.window.map_or(Ok(()), |w| w.check())
    }
}

impl Default for Problem {
    fn default() -> Self {
        Problem {
            m: 256,
            n: 256,
            k: 192,
            attn: AttnShape {
                batch: 1,
                heads: 4,
                heads_kv: 2,
                seq: 256,
                dim: 64,
                layout: AttnLayout::Bshd,
            },
            seq_kv: None,
            causal: false,
            bottom_right: false,
            lse: false,
            logits: Logits::default(),
            window: None,
            kv_splits: KvSplits::Fixed(1),
            gemm: GemmConfig::default(),
            attn_cfg: AttnConfig {
                q_rows: 16,
                kv_block: 32,
                ..AttnConfig::default()
            },
            norm: NormShape::default(),
            interleaved: false,
            residual: true,
            packed: false,
            eps: None,
            sms: None,
            cross_entropy: Default::default(),
            seed: 0,
            input_scale: 1.0,
            tolerance: None,
            variant: None,
            varlen_total: None,
        }
    }
}

/// A layernorm problem: `rows` rows of `dim` values, dropout with probability `p` keyed by
/// `dropout_seed` and `offset` (the Philox key and counter words, `kittens_ir::philox`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct NormShape {
    pub rows: usize,
    pub dim: usize,
    pub p: f32,
    pub dropout_seed: u64,
    pub offset: u64,
}

impl Default for NormShape {
    /// Odd sizes: 37 rows of 1000 (not a multiple of a wave's 256-column strip), 10% dropout.
    fn default() -> Self {
        NormShape {
            rows: 37,
            dim: 1000,
            p: 0.1,
            dropout_seed: 0x5eed_0000_0000_2a2a,
            offset: 3,
        }
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

/// Everything a kernel knows about running at a problem's sizes. Implementations must check every
/// size with checked arithmetic before anything is built or allocated.
pub trait KernelProblem: Sync + std::fmt::Debug {
    /// Parameters and tensor sizes at `p` (zero sizes allowed; overflow and inconsistent shapes are
    /// errors). No budget: the caller-input path ([`crate::exec`]) uses it too.
    fn launch(&self, p: &Problem) -> Result<Launch, KernelError>;

    /// Validates `p` for a random-input run on `target`: sizes positive (an empty problem would pass
    /// with zero error), tile sides and host bytes within [`crate::budget`]; then the launch.
    fn plan(&self, p: &Problem, target: Target) -> Result<Plan, KernelError>;

    /// The kernel a run of `p` on `target` executes: `p`'s tiles on the CPU, the target GPU's
    /// configuration elsewhere (with `p`'s shape-bound settings, e.g. attention's head dimension).
    fn build(&self, p: &Problem, target: Target) -> Result<Kernel, KernelError>;

    /// The launches of a run of `p` on `target` at `plan`, in order ([`Stage`]). Default: the one
    /// kernel of [`Self::build`] at the plan's launch.
    fn stages(&self, p: &Problem, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        Ok(vec![Stage {
            kernel: self.build(p, target)?,
            launch: plan.launch.clone(),
        }])
    }

    /// The random inputs of a run of `kernel` (as [`Self::build`] made it) at `launch`, in
    /// [`Launch::inputs`] order. By default each is uniform in `[-input_scale, input_scale)` rounded to
    /// its tensor's dtype ([`draw_operands`]); a kernel with other inputs (the GEMM's scales) says so.
    fn draw(
        &self,
        p: &Problem,
        kernel: &Kernel,
        launch: &Launch,
        rng: &mut SmallRng,
    ) -> Vec<Vec<f32>> {
        draw_operands(p, kernel, &launch.inputs, rng)
    }

    /// The f64 reference (and baseline) of `p` on `inputs`, in [`Launch::inputs`] order.
    fn reference(&self, p: &Problem, inputs: &[Vec<f32>]) -> Reference;

    /// How the error is judged when the run gives no `--tolerance`.
    fn tolerance(&self) -> Tolerance;
}

/// One input per length in `lens`, the i-th uniform in `[-input_scale, input_scale)` and rounded to the
/// dtype of `kernel`'s i-th tensor (inputs are declared first, in launch order), so the reference
/// sees exactly what the kernel stores.
pub fn draw_operands(
    p: &Problem,
    kernel: &Kernel,
    lens: &[usize],
    rng: &mut SmallRng,
) -> Vec<Vec<f32>> {
    lens.iter()
        .zip(&kernel.globals)
        .map(|(&len, g)| random_scaled(rng, len, g.dtype, p.input_scale))
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
