//! The GEMM at a problem's sizes, for both of its element types (`gemm_bf16` and `gemm_fp8`, the same
//! tile program with different [`GemmTypes`]): parameters `m, n, k`, inputs A (m×k) and B (n×k) in the
//! operand dtype, then the f32 scales `scale_a`, `scale_b` when the types have them (one element each
//! per tensor, m and n per row/column), output C (m×n); the f64 reference `A·Bᵀ` with the scales
//! applied in f64, and a fixed tolerance.

use super::{
    build, shapes, small_m, split_k, ALayout, BLayout, GemmConfig, GemmTypes, LeadingDims, Scales,
};
use crate::budget;
use crate::problem::{
    draw_operands, elements, param, positive, round_up, KernelProblem, Launch, NamedArgs, Plan,
    Reference, RunSettings, Stage, STORE_BYTES,
};
use crate::reference::{self, Tolerance};
use crate::KernelError;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::Kernel;
use rand::rngs::SmallRng;
use rand::Rng;

/// GEMM's fixed bound on `rel_err`: bf16 output rounding alone is a relative error of up to 2^-9 per
/// element and f32 accumulation adds about √k·2^-24; 1e-2 leaves room for both at any size a run
/// allows and catches any indexing mistake (which gives errors of order 1). The GEMM's error does not
/// depend on the scale of its inputs (the reference multiplies the operands as the kernel read them,
/// already rounded to their dtype), so no baseline is needed.
pub const TOLERANCE: f64 = 1e-2;

/// Scales are drawn uniform in this range: far enough from 1 that a lost, doubled or misplaced scale
/// changes the result by order 0.1 to 1, and never zero.
pub const SCALE_RANGE: std::ops::Range<f32> = 0.5..2.0;

/// The name of the 4-wave interleave variant (HipKittens §3.3.2) of a GPU configuration.
pub const INTERLEAVE4: &str = "interleave4";

/// The GEMM's named variants of a GPU target's configuration (`RunSettings::variant`).
pub const VARIANTS: &[&str] = &[INTERLEAVE4];

/// `base`, a GPU's configuration of the GEMM, turned into its variant `name` ([`VARIANTS`]).
pub fn variant(
    base: GemmConfig,
    gpu: &kittens_hw::Gpu,
    name: &str,
) -> Result<GemmConfig, KernelError> {
    match name {
        INTERLEAVE4 => GemmConfig::interleave4(base, gpu),
        other => Err(KernelError::Config(format!(
            "{}: no variant `{other}`; variants: {}",
            base.types.kernel_name(),
            VARIANTS.join(", ")
        ))),
    }
}

/// Which of the GEMM's registry kernels a problem runs: the same tile program with bf16 or fp8 types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKind {
    /// `gemm_bf16`: bf16 in and out, no scales.
    Bf16,
    /// `gemm_fp8`: OCP e4m3 operands and per-tensor scales on the CPU (gfx950's format), the target's
    /// fp8 format on a GPU (`GemmConfig::fp8_for_gpu`).
    Fp8,
}

impl GemmKind {
    /// The registry name.
    pub fn name(self) -> &'static str {
        match self {
            GemmKind::Bf16 => "gemm_bf16",
            GemmKind::Fp8 => "gemm_fp8",
        }
    }

    /// The types a CPU run builds unless the problem's own `gemm.types` are of this kernel.
    pub fn types(self) -> GemmTypes {
        match self {
            GemmKind::Bf16 => GemmTypes::BF16,
            GemmKind::Fp8 => GemmTypes {
                input: DType::Fp8E4m3,
                output: DType::Bf16,
                scales: Some(Scales::PerTensor),
            },
        }
    }

    /// The configuration for a GPU target.
    pub fn for_gpu(self, gpu: &kittens_hw::Gpu) -> GemmConfig {
        match self {
            GemmKind::Bf16 => GemmConfig::for_gpu(gpu),
            GemmKind::Fp8 => GemmConfig::fp8_for_gpu(gpu),
        }
    }
}

/// A GEMM problem: `C[m, n] = A[m, k]·B[n, k]ᵀ` for one of the element types, with the CPU
/// interpreter's tiles (`gemm`: block, K step, schedule, and B's layout on every target).
#[derive(Debug, Clone, Copy)]
pub struct GemmProblem {
    pub kind: GemmKind,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub gemm: GemmConfig,
    /// Leading dimensions (operands that are slices of bigger matrices); `None`: dense rows.
    pub ld: Option<LeadingDims>,
    pub run: RunSettings,
}

impl Default for GemmProblem {
    /// `gemm_bf16` at 256 × 256 × 192.
    fn default() -> Self {
        GemmProblem::new(GemmKind::Bf16, 256, 256, 192)
    }
}

/// The registry's parser of `gemm_bf16`'s problem.
pub fn parse_bf16(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(GemmProblem::from_args(GemmKind::Bf16, a)?))
}

/// The registry's parser of `gemm_fp8`'s problem.
pub fn parse_fp8(a: &NamedArgs) -> Result<Box<dyn KernelProblem>, KernelError> {
    Ok(Box::new(GemmProblem::from_args(GemmKind::Fp8, a)?))
}

impl GemmProblem {
    /// `kind` at the default sizes (256 × 256 × 192).
    pub fn of(kind: GemmKind) -> GemmProblem {
        GemmProblem::new(kind, 256, 256, 192)
    }

    /// `kind` at `m × n × k` with its default CPU configuration.
    pub fn new(kind: GemmKind, m: usize, n: usize, k: usize) -> GemmProblem {
        let gemm = match kind {
            GemmKind::Bf16 => GemmConfig::default(),
            GemmKind::Fp8 => GemmConfig::fp8_default(),
        };
        GemmProblem {
            kind,
            m,
            n,
            k,
            gemm,
            ld: None,
            run: RunSettings::default(),
        }
    }

    /// The problem `a` names: `m`, `n`, `k`, `b_kn` (B stored `K × N`), `a_km` (A stored `K × M`),
    /// `ld` (the leading dimensions `(lda, ldb, ldc)`), the CPU tiles `block`,
    /// `k_step`, `schedule` (`pingpong`, `interleave`, `ws`), and the run settings.
    pub fn from_args(kind: GemmKind, a: &NamedArgs) -> Result<GemmProblem, KernelError> {
        let mut p = GemmProblem::new(kind, 256, 256, 192);
        p.m = a.size_or("m", p.m)?;
        p.n = a.size_or("n", p.n)?;
        p.k = a.size_or("k", p.k)?;
        if a.flag_or("b_kn", false)? {
            p.gemm.b_layout = BLayout::Kn;
        }
        if a.flag_or("a_km", false)? {
            p.gemm.a_layout = ALayout::Km;
        }
        p.ld = a.sizes("ld")?.map(|[a, b, c]| LeadingDims { a, b, c });
        p.gemm.block = a.u32_or("block", p.gemm.block)?;
        p.gemm.k_step = a.u32_or("k_step", p.gemm.k_step)?;
        p.gemm.schedule = match a.text_or("schedule", None)?.as_deref() {
            None => p.gemm.schedule,
            Some("pingpong" | "pingpong8") => super::GemmSchedule::PingPong8,
            Some("interleave" | "interleave4") => super::GemmSchedule::Interleave4,
            Some("ws") => super::GemmSchedule::ProducerConsumer,
            Some(other) => {
                return Err(KernelError::Config(format!(
                    "`schedule` {other:?}: pingpong, interleave or ws"
                )))
            }
        };
        p.run = RunSettings::from_args(a, VARIANTS)?;
        Ok(p)
    }

    /// The configuration a run on `target` builds: `p.gemm` on the CPU when its types name this kernel
    /// (e.g. fp8 with per-row scales); otherwise (`p.gemm` is another kernel's, as `Problem::default`
    /// is gemm_bf16's) its tiles with this kernel's types, the K step rounded up to whole operand base
    /// tiles (gemm_bf16's 64 becomes 128 for OCP fp8); the GPU's own configuration elsewhere, or
    /// the GPU's configuration of the variant `p.variant` names ([`VARIANTS`]).
    ///
    /// Every target's configuration takes the problem's operand layouts (`p.gemm.a_layout`,
    /// `p.gemm.b_layout`; a schedule that cannot read one refuses it by name) and is strided exactly
    /// when the problem has leading dimensions (`p.ld`).
    pub fn config(&self, target: Target) -> Result<GemmConfig, KernelError> {
        let p = self;
        Ok(GemmConfig {
            a_layout: p.gemm.a_layout,
            b_layout: p.gemm.b_layout,
            strided: p.ld.is_some(),
            ..self.config_for(target)?
        })
    }

    fn config_for(&self, target: Target) -> Result<GemmConfig, KernelError> {
        let p = self;
        match target.gpu() {
            Some(gpu) => {
                let base = self.kind.for_gpu(gpu);
                match p.run.variant {
                    None if target == Target::Sm90a => Ok(self.hopper(gpu, base)),
                    None => Ok(base),
                    Some(v) => variant(base, gpu, v),
                }
            }
            None if p.gemm.types.kernel_name() == self.kind.name() => Ok(p.gemm),
            None => {
                let kb = self.kind.types().operand_base().cols;
                Ok(GemmConfig {
                    types: self.kind.types(),
                    k_step: p.gemm.k_step.checked_next_multiple_of(kb).unwrap_or(kb),
                    ..p.gemm
                })
            }
        }
    }

    /// The Hopper configuration for `p`'s shape on the device `p` names (its SM count), what every
    /// caller runs (the package, `kittens run --backend cuda`, `kittens bench`):
    ///
    /// - the block: bf16 the one the shape-aware model picks (`shapes::choose`); fp8 at most
    ///   `small_m::MAX_ROWS` rows the block and split the small-M model picks together
    ///   (`small_m::choose`), else 128×192;
    /// - split-K where C has too few blocks to fill the SMs (`split_k::choose`, with the streaming
    ///   figures of the device's model; the reduction is [`KernelProblem::stages`]' second launch);
    /// - bf16 with B's rows off 128-byte lines (K, or N for B stored `K × N`, no multiple of 64) at
    ///   shapes whose operand rows serve enough outputs (`shapes::copies_misaligned`): row tiles in
    ///   clusters of two that multicast each B box, half the L2 requests for the rows that straddle
    ///   two lines (not for 64-row blocks, nor with split-K; docs/performance.md, "gemm_bf16").
    ///
    /// B is read as the problem stores it (a linear layer's `w` or a row-major `b`, both in place).
    fn hopper(&self, gpu: &kittens_hw::Gpu, base: GemmConfig) -> GemmConfig {
        let p = self;
        let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
        let model = p.run.device_model(gpu);
        let sms = model.compute_units;
        let bf16 = self.kind.types() == GemmTypes::BF16;
        let elem = u64::from(base.types.input.bytes());
        let (cfg, split) = if bf16 {
            let cfg = GemmConfig {
                b_layout: p.gemm.b_layout,
                ..shapes::config_for(gpu, sms, m, n, k)
            };
            let block = (cfg.block_rows, cfg.block);
            (
                cfg,
                split_k::choose(&model, sms, (m, n, k), block, cfg.k_step, elem),
            )
        } else if m <= small_m::MAX_ROWS {
            // Block and split together, by the small-M model (docs/performance.md, "gemm_fp8").
            let ((rows, cols), split) = small_m::choose(&model, sms, (m, n, k), base.k_step, elem);
            let tile = shapes::HopperTile { rows, cols };
            let cfg = GemmConfig {
                block_rows: rows,
                block: cols,
                stages: tile.stages(gpu),
                a_rows: GemmConfig::a_rows_for(rows, m),
                ..base
            };
            (cfg, split)
        } else {
            let cfg = GemmConfig::fp8_for_shape(base, gpu, m);
            let block = (cfg.block_rows, cfg.block);
            (
                cfg,
                split_k::choose(&model, sms, (m, n, k), block, cfg.k_step, elem),
            )
        };
        let b_row_bytes = elem * Self::lds(p)[1] as u64;
        let cluster = if bf16
            && split == 1
            && cfg.block_rows >= 128
            && b_row_bytes.is_multiple_of(16)
            && !b_row_bytes.is_multiple_of(128)
            && shapes::copies_misaligned(m, n)
        {
            2
        } else {
            1
        };
        GemmConfig {
            split_k: split,
            cluster,
            ..cfg
        }
    }

    /// Element counts of `scale_a` and `scale_b`, if the types have scales.
    fn scale_lens(p: &GemmProblem, types: &GemmTypes) -> Option<[usize; 2]> {
        types.scales.map(|s| match s {
            Scales::PerTensor => [1, 1],
            Scales::PerRowCol => [p.m, p.n],
        })
    }

    /// Rows and columns of A, B and C as stored ([`ALayout`], [`BLayout`]).
    pub fn stored(p: &GemmProblem) -> [(usize, usize); 3] {
        let a = match p.gemm.a_layout {
            ALayout::Mk => (p.m, p.k),
            ALayout::Km => (p.k, p.m),
        };
        let b = match p.gemm.b_layout {
            BLayout::Nk => (p.n, p.k),
            BLayout::Kn => (p.k, p.n),
        };
        [a, b, (p.m, p.n)]
    }

    /// Elements between stored rows of A, B and C: `p.ld`, or each stored row's length.
    pub fn lds(p: &GemmProblem) -> [usize; 3] {
        match p.ld {
            Some(l) => [l.a, l.b, l.c],
            None => Self::stored(p).map(|(_, cols)| cols),
        }
    }

    /// Elements each of A, B and C spans (`(rows - 1) · ld + cols`), after checking that every
    /// leading dimension is at least its stored row.
    fn spans(&self) -> Result<[usize; 3], KernelError> {
        let spans = self.spans_or_overflow()?;
        let mut out = [0; 3];
        for (i, ((t, (rows, _)), ld)) in ["A", "B", "C"]
            .iter()
            .zip(Self::stored(self))
            .zip(Self::lds(self))
            .enumerate()
        {
            out[i] = spans[i].map_or_else(|| elements(t, &[rows, ld]), Ok)?;
        }
        Ok(out)
    }

    /// [`Self::spans`] with a span past the address space `None` (the budget names it as more than
    /// 2^64 bytes); a leading dimension shorter than its row is still an error.
    fn spans_or_overflow(&self) -> Result<[Option<usize>; 3], KernelError> {
        let p = self;
        let name = self.kind.name();
        let lds = Self::lds(p);
        let mut out = [Some(0); 3];
        for (i, ((t, (rows, cols)), ld)) in ["A", "B", "C"]
            .iter()
            .zip(Self::stored(p))
            .zip(lds)
            .enumerate()
        {
            let lead = ["lda", "ldb", "ldc"][i];
            if ld < cols {
                return Err(KernelError::Problem(format!(
                    "{name}: {lead} {ld} is less than the {cols} elements of a stored row of {t} \
                     ({rows} x {cols} as stored)"
                )));
            }
            // An empty operand spans nothing; else its last row ends `(rows - 1) · ld + cols` in.
            out[i] = match rows {
                0 => Some(0),
                r => (r - 1).checked_mul(ld).and_then(|x| x.checked_add(cols)),
            };
        }
        Ok(out)
    }

    fn launch_for(&self, types: &GemmTypes) -> Result<Launch, KernelError> {
        let p = self;
        let [a, b, c] = self.spans()?;
        let mut inputs = vec![a, b];
        inputs.extend(Self::scale_lens(p, types).into_iter().flatten());
        let mut params = vec![param("m", p.m)?, param("n", p.n)?, param("k", p.k)?];
        if p.ld.is_some() {
            for (name, ld) in ["lda", "ldb", "ldc"].into_iter().zip(Self::lds(p)) {
                params.push(param(name, ld)?);
            }
        }
        Ok(Launch {
            params,
            inputs,
            outputs: vec![c],
        })
    }

    /// On sm_90a every operand row must start 16 bytes after the previous one (TMA's global strides,
    /// CUDA driver API `cuTensorMapEncodeTiled`).
    fn check_tma_strides(&self, types: &GemmTypes) -> Result<(), KernelError> {
        let elems = [
            types.input.bytes(),
            types.input.bytes(),
            types.output.bytes(),
        ];
        for ((lead, ld), elem) in ["lda", "ldb", "ldc"].iter().zip(Self::lds(self)).zip(elems) {
            let bytes = ld as u64 * u64::from(elem);
            if ld > 1 && !bytes.is_multiple_of(16) {
                return Err(KernelError::Problem(format!(
                    "{}: {lead} {ld} ({bytes} bytes): the Hopper kernel's TMA copies need rows a \
                     multiple of 16 bytes apart ({} elements of {elem} bytes)",
                    self.kind.name(),
                    16 / elem
                )));
            }
        }
        Ok(())
    }
}

impl GemmProblem {
    /// The f64 product `A·Bᵀ` (M × N, dense) of operands stored as `p` says (layouts, leading
    /// dimensions): each is gathered into a dense `M × K` / `N × K` copy first.
    fn product(p: &GemmProblem, a: &[f32], b: &[f32]) -> Vec<f64> {
        let [lda, ldb, _] = Self::lds(p);
        let gather = |x: &[f32], rows: usize, ld: usize, transposed: bool| -> Vec<f32> {
            let mut out = Vec::with_capacity(rows * p.k);
            for r in 0..rows {
                for c in 0..p.k {
                    out.push(if transposed {
                        x[c * ld + r]
                    } else {
                        x[r * ld + c]
                    });
                }
            }
            out
        };
        let a = gather(a, p.m, lda, p.gemm.a_layout == ALayout::Km);
        let b = gather(b, p.n, ldb, p.gemm.b_layout == BLayout::Kn);
        reference::gemm_abt(&a, &b, p.m, p.n, p.k)
    }

    /// The dense `M × N` result placed in C's span: row `i` at `i · ldc`; the gaps between rows NaN,
    /// which only an output the kernel left unwritten (the runs' NaN poison) matches
    /// ([`reference::compare`]).
    fn place_c(p: &GemmProblem, dense: Vec<f64>) -> Vec<f64> {
        let ldc = Self::lds(p)[2];
        if ldc == p.n || p.m == 0 {
            return dense;
        }
        let mut out = vec![f64::NAN; (p.m - 1) * ldc + p.n];
        for (i, row) in dense.chunks(p.n).enumerate() {
            out[i * ldc..i * ldc + p.n].copy_from_slice(row);
        }
        out
    }
}

impl KernelProblem for GemmProblem {
    fn kernel(&self) -> &'static str {
        self.kind.name()
    }

    fn settings(&self) -> &RunSettings {
        &self.run
    }

    /// The launch of the CPU configuration; on a GPU target the scale layout may differ, so the runner
    /// uses [`KernelProblem::plan`]'s.
    fn launch(&self) -> Result<Launch, KernelError> {
        self.launch_for(&self.config(Target::Cpu)?.types)
    }

    fn plan(&self, target: Target) -> Result<Plan, KernelError> {
        let p = self;
        let name = self.kind.name();
        positive(name, &[("m", p.m), ("n", p.n), ("k", p.k)])?;
        let cfg = self.config(target)?;
        let types = cfg.types;
        if cfg.a_rows != 0 && cfg.a_rows < cfg.block_rows && p.m > cfg.a_rows as usize {
            return Err(KernelError::Problem(format!(
                "{name}: m {} is more than the {} rows of A the configuration loads per block (a_rows)",
                p.m, cfg.a_rows
            )));
        }
        if target == Target::Sm90a {
            self.check_tma_strides(&types)?;
        }
        // Random operands in [-s, s) must stay finite and not all flush to zero in the operand format.
        let max = types.input.max_finite();
        if f64::from(p.run.input_scale.abs()) > max {
            return Err(KernelError::Problem(format!(
                "{name}: input scale {} exceeds {max}, the largest finite {}",
                p.run.input_scale, types.input
            )));
        }
        let (block, k_step) = (u64::from(cfg.block), u64::from(cfg.k_step));
        budget::check_tile_side(name, "block", block)?;
        budget::check_tile_side(name, "k_step", k_step)?;
        let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
        let scales = if types.scales.is_some() {
            budget::sum(&[Some(m), Some(n)])
        } else {
            Some(0)
        };
        let [sa, sb, sc] = self.spans_or_overflow()?.map(|x| x.map(|x| x as u64));
        let inputs = budget::sum(&[sa, sb, scales]);
        let output = sc;
        let bytes = budget::sum(&[
            // the inputs and their snapshot
            inputs.and_then(|x| x.checked_mul(2 * 4)),
            // output, pending stores, f64 reference
            output.and_then(|x| x.checked_mul(4 + STORE_BYTES + 8)),
        ]);
        let what = format!("{name} at m={m} n={n} k={k}");
        budget::check_host_bytes(&what, bytes)?;
        let padded = [round_up(m, block), round_up(n, block), round_up(k, k_step)];
        let work = padded
            .iter()
            .try_fold(1u64, |acc, x| x.and_then(|x| acc.checked_mul(x)));
        let mut shape = serde_json::json!({
            "m": p.m, "n": p.n, "k": p.k, "block": cfg.block, "k_step": cfg.k_step,
        });
        if cfg.a_layout != ALayout::Mk || cfg.b_layout != BLayout::Nk {
            shape["a_layout"] = serde_json::json!(cfg.a_layout);
            shape["b_layout"] = serde_json::json!(cfg.b_layout);
        }
        if let Some(ld) = p.ld {
            shape["ld"] = serde_json::json!(ld);
        }
        if types != GemmTypes::BF16 {
            shape["input"] = types.input.name().into();
            shape["output"] = types.output.name().into();
            shape["scales"] = types.scales.map(|s| format!("{s:?}")).into();
        }
        Ok(Plan {
            launch: self.launch_for(&types)?,
            what,
            work,
            shape,
        })
    }

    fn build(&self, target: Target) -> Result<Kernel, KernelError> {
        build(&self.config(target)?)
    }

    /// With split-K (`GemmConfig::split_k` > 1): the GEMM writing its slices' f32 partial sums
    /// (`split_k::PARTIAL`, `[split_k, m, n]`), then the reduction adding them into C.
    fn stages(&self, target: Target, plan: &Plan) -> Result<Vec<Stage>, KernelError> {
        let p = self;
        let cfg = self.config(target)?;
        let gemm = build(&cfg)?;
        if cfg.split_k <= 1 {
            return Ok(vec![Stage {
                kernel: gemm,
                launch: plan.launch.clone(),
            }]);
        }
        let lanes = target.gpu().map_or(32, |g| g.wave_width);
        let reduce = split_k::build_reduce_into(cfg.split_k, cfg.types.output, lanes, cfg.strided)?;
        let partial = elements(split_k::PARTIAL, &[cfg.split_k as usize, p.m, p.n])?;
        let mut reduce_params = vec![param("m", p.m)?, param("n", p.n)?];
        if cfg.strided {
            reduce_params.push(param("ldc", Self::lds(p)[2])?);
        }
        Ok(vec![
            Stage {
                kernel: gemm,
                launch: Launch {
                    outputs: vec![partial],
                    ..plan.launch.clone()
                },
            },
            Stage {
                kernel: reduce,
                launch: Launch {
                    params: reduce_params,
                    inputs: vec![partial],
                    outputs: plan.launch.outputs.clone(),
                },
            },
        ])
    }

    /// A and B in their dtype ([`draw_operands`]); the scales uniform in [`SCALE_RANGE`].
    fn draw(&self, kernel: &Kernel, launch: &Launch, rng: &mut SmallRng) -> Vec<Vec<f32>> {
        let p = self;
        let mut inputs = draw_operands(p.run.input_scale, kernel, &launch.inputs[..2], rng);
        for &len in &launch.inputs[2..] {
            inputs.push((0..len).map(|_| rng.gen_range(SCALE_RANGE)).collect());
        }
        inputs
    }

    /// The scale layout is read from the scale tensors' lengths (the plan sized them): one element
    /// each is per-tensor, which at m = n = 1 is also what per-row/column means.
    fn reference(&self, inputs: &[Vec<f32>]) -> Reference {
        let p = self;
        let mut values = Self::product(p, &inputs[0], &inputs[1]);
        if let [_, _, sa, sb] = inputs {
            let mode = if sa.len() == 1 && sb.len() == 1 {
                Scales::PerTensor
            } else {
                Scales::PerRowCol
            };
            scale_rows_cols(&mut values, p.n, mode, sa, sb);
        }
        let values = Self::place_c(p, values);
        Reference {
            values,
            baseline: None,
            max_abs_logit: None,
        }
    }

    fn tolerance(&self) -> Tolerance {
        Tolerance::Fixed(TOLERANCE)
    }
}

/// Applies an FP8 GEMM's scales to its f64 product `c` (M×N row-major, `n` columns) in f64:
/// `c[i][j] *= sa·sb` per tensor, `sa[i]·sb[j]` per row of A and row of B.
pub fn scale_rows_cols(c: &mut [f64], n: usize, mode: Scales, sa: &[f32], sb: &[f32]) {
    for (x, v) in c.iter_mut().enumerate() {
        let (i, j) = match mode {
            Scales::PerTensor => (0, 0),
            Scales::PerRowCol => (x / n, x % n),
        };
        *v *= sa[i] as f64 * sb[j] as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kind` at `m × n × k` on a 132-SM device.
    fn at(kind: GemmKind, m: usize, n: usize, k: usize) -> GemmProblem {
        let mut p = GemmProblem::new(kind, m, n, k);
        p.run.sms = Some(132);
        p
    }

    fn hopper(m: usize, n: usize, k: usize) -> (GemmConfig, usize) {
        let p = at(GemmKind::Bf16, m, n, k);
        let cfg = p.config(Target::Sm90a).unwrap();
        let plan = p.plan(Target::Sm90a).unwrap();
        let stages = p.stages(Target::Sm90a, &plan).unwrap();
        (cfg, stages.len())
    }

    /// What every caller runs on Hopper follows the shape: split-K (and its reduction launch) where C
    /// has too few blocks for the SMs, clusters of two where B's rows start off 128-byte lines, the
    /// plain kernel elsewhere.
    #[test]
    fn hopper_configuration_follows_the_shape() {
        let (decode, launches) = hopper(16, 4096, 14336);
        assert!(decode.split_k > 1 && launches == 2, "{decode:?}");
        let (square, launches) = hopper(4096, 4096, 4096);
        assert_eq!((square.split_k, square.cluster, launches), (1, 1, 1));
        let (off_lines, launches) = hopper(3000, 3000, 3000);
        assert_eq!((off_lines.split_k, off_lines.cluster, launches), (1, 2, 1));
        // B stored K × N: N decides B's rows.
        let mut p = at(GemmKind::Bf16, 3000, 3000, 3072);
        p.gemm.b_layout = BLayout::Kn;
        let kn = p.config(Target::Sm90a).unwrap();
        assert_eq!((kn.b_layout, kn.cluster), (BLayout::Kn, 2));
        // fp8 at a decode step's 16 rows: 64-row blocks with A in a 16-row box, and every SM
        // streaming B (a split, or 128 blocks of 32 columns).
        let fp8 = at(GemmKind::Fp8, 16, 4096, 14336)
            .config(Target::Sm90a)
            .unwrap();
        let blocks = 4096 / fp8.block * fp8.split_k;
        assert!(
            fp8.block_rows == 64 && fp8.a_rows == 16 && blocks >= 128,
            "{fp8:?}"
        );
        // fp8 up to 256 rows: the small-M model's block and split on the device's model (the H200:
        // its fit run's best settings), 128×192 above.
        let fp8_at = |m, n, k| {
            let mut p = at(GemmKind::Fp8, m, n, k);
            p.run.gpu = kittens_hw::gpu("h200").ok();
            let c = p.config(Target::Sm90a).unwrap();
            ((c.block_rows, c.block), c.split_k)
        };
        assert_eq!(fp8_at(16, 4096, 4096), ((64, 32), 1));
        assert_eq!(fp8_at(64, 4096, 14336), ((64, 64), 2));
        assert_eq!(fp8_at(256, 8192, 8192), ((128, 128), 1));
        assert_eq!(fp8_at(512, 4096, 4096), ((128, 192), 1));
        // The device's model reaches the split rule: an H200 does not split 64 blocks of 64×128 at
        // 128 rows (its kernel streams at about the H100's rate, and splits cost it more).
        let bf16_split = |gpu: &str| {
            let mut p = at(GemmKind::Bf16, 128, 4096, 14336);
            p.run.gpu = kittens_hw::gpu(gpu).ok();
            p.config(Target::Sm90a).unwrap().split_k
        };
        assert_eq!((bf16_split("h100"), bf16_split("h200")), (2, 1));
    }
}
