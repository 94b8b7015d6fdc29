//! `kittens run <kernel> --backend cpu|hip-emu|isa-emu`: runs a registry kernel on random inputs (bf16,
//! uniform in [-S, S) for `--input-scale S`) on the interpreter, on the host emulation of its lowered
//! HIP for `--target`, or as the code object clang builds for `--target` on the ISA emulator, through the one runner (`kittens_runtime::runner`), and prints its report: the error
//! against the f64 reference judged by the kernel's tolerance or `--tolerance`, the same on both
//! backends. Exits non-zero when a check fails. Sizes are checked against the run's budget
//! (`kittens_kernels::budget`) before anything is built or allocated.

use super::flags::{AttnLayoutArg, BackendArg, ScheduleArg};
use anyhow::{bail, Context};
use kittens_hw::Target;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::problem::{ArgValue, KernelProblem, NamedArgs};
use kittens_kernels::registry::KernelEntry;
use kittens_runtime::runner::{
    self, Backend, CudaGpu, HipEmu, HipGpu, Interpreter, IsaEmu, RunReport,
};

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name, from the registry (`kittens list`); none with --kernel-file.
    #[arg(value_parser = super::kernel_file::kernel_arg, default_value = super::kernel_file::NONE_GIVEN, hide_default_value = true)]
    pub kernel: &'static KernelEntry,
    #[command(flatten)]
    pub file: super::kernel_file::RunFile,
    /// Where to run: `cpu` (the interpreter), `hip-emu` (the lowered HIP for --target, compiled for
    /// and run on this CPU through the emulation header) or `isa-emu` (the code object for --target,
    /// run instruction by instruction by the ISA emulator) or `hip` (that code object on an AMD GPU
    /// through ROCm's HIP runtime, loaded at run time) or `cuda` (the kernel lowered for sm_90a on an
    /// NVIDIA Hopper GPU, `--device` picks which).
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// AMD target of `--backend hip-emu` or `isa-emu`: gfx942 or gfx950 (`--backend cuda` is sm_90a).
    #[arg(long)]
    pub target: Option<kittens_hw::Target>,
    /// `--backend cuda`: the GPU's ordinal.
    #[arg(long)]
    pub device: Option<usize>,
    /// `--backend cuda`: after the check, the per-call time a Rust caller sees — this many calls of
    /// the prepared launches (`cuda::dispatch`) with one synchronisation at the end.
    #[arg(long)]
    pub host_loop: Option<usize>,
    /// `--backend cuda`: after the check, time the call (all its launches, as one prepared call) by
    /// CUDA events: the median of this many calls after 10 warm-up calls, interleaved with a
    /// device-to-device copy of as many bytes as the call's tensors hold (what a memory-bound kernel
    /// cannot beat).
    #[arg(long)]
    pub time: Option<usize>,
    /// GEMM rows of A and C.
    #[arg(long, default_value_t = 256)]
    pub m: usize,
    /// GEMM rows of B, columns of C.
    #[arg(long, default_value_t = 256)]
    pub n: usize,
    /// GEMM reduction size.
    #[arg(long, default_value_t = 192)]
    pub k: usize,
    /// GEMM block tile (rows = cols of C per block; HipKittens E.1 uses 256). The tile flags (--block,
    /// --k-step, --schedule, --q-rows, --kv-block) configure the cpu backend; hip-emu builds the kernel
    /// as configured for the target's GPU.
    #[arg(long, default_value_t = 256)]
    pub block: u32,
    /// Schedule: pingpong (8-wave, HipKittens E.1; alias pingpong8), interleave (4-wave, alias
    /// interleave4) or ws (producer/consumer, Hopper). GEMMs: the cpu backend's schedule (default
    /// pingpong), on a GPU target `interleave` builds its `interleave4` variant; attn_bwd: its
    /// `interleave4` or `pingpong8` variant on any backend (default: the plain program).
    #[arg(long, value_enum)]
    pub schedule: Option<ScheduleArg>,
    /// A named variant of the kernel (`kittens list --json` lists them): attn_fwd's `seed001`
    /// (MI300X-attn's kernel, V given transposed) on every backend. Not with `--schedule`.
    #[arg(long)]
    pub variant: Option<String>,
    /// GEMM K step (default 64 as HipKittens E.1 for gemm_bf16, 128 for gemm_fp8).
    #[arg(long)]
    pub k_step: Option<u32>,
    /// Attention batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Attention query heads.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Attention key/value heads (GQA when fewer than --heads; must divide it).
    #[arg(long, default_value_t = 2)]
    pub heads_kv: usize,
    /// Attention sequence length (queries; keys too unless --seq-kv).
    #[arg(long, default_value_t = 256)]
    pub seq: usize,
    /// Attention keys when they differ from the queries (attn_fwd, attn_bwd).
    #[arg(long)]
    pub seq_kv: Option<usize>,
    /// Attention head dimension (a multiple of 32).
    #[arg(long, default_value_t = 64)]
    pub dim: usize,
    /// Causal attention (PyTorch's top-left `is_causal`).
    #[arg(long)]
    pub causal: bool,
    /// With --causal: align the mask bottom-right (key j <= query i + seq_kv - seq), attn_fwd and
    /// attn_bwd.
    #[arg(long, requires = "causal")]
    pub bottom_right: bool,
    /// Attention: the softmax scale (finite, positive; default 1/sqrt(dim)), a constant of the
    /// kernel (attn_fwd, attn_bwd).
    #[arg(long, allow_negative_numbers = true)]
    pub softmax_scale: Option<f32>,
    /// Attention: cap the logits, l -> softcap * tanh(l / softcap) (finite, positive; Gemma 2's
    /// 50), attn_fwd and attn_bwd on every target.
    #[arg(long, allow_negative_numbers = true)]
    pub softcap: Option<f32>,
    /// Attention: a sliding window `LEFT,RIGHT` (FlashAttention's window_size, bottom-right aligned:
    /// query i keeps keys i + seq_kv - seq - LEFT ..= i + seq_kv - seq + RIGHT; -1 = unbounded),
    /// attn_fwd and attn_bwd on every target.
    #[arg(long, allow_hyphen_values = true)]
    pub window: Option<kittens_kernels::attn::score::Window>,
    /// Attention: ALiBi (FlashAttention's alibi_slopes), slopes drawn per batch and head as an f32
    /// input tensor, attn_fwd and attn_bwd on every target.
    #[arg(long)]
    pub alibi: bool,
    /// attn_fwd: also write the log-sum-exp of every query row (a second output, judged on its own).
    #[arg(long)]
    pub lse: bool,
    /// attn_fwd: cut each query block's keys into G parts (1 to 16; one block per part, then a
    /// merge launch) or `auto` (the tail planner's choice for the GPU the run is configured for; on
    /// the CPU the GPU of the schedule it runs). 1 is the plain kernel.
    #[arg(long, default_value = "1")]
    pub kv_splits: kittens_kernels::attn_fwd::split::KvSplits,
    /// attn_paged: keys per page of the paged KV cache (a multiple of 16; default 16).
    #[arg(long)]
    pub page_size: Option<usize>,
    /// attn_paged: block-table entries per sequence (default ceil(seq_kv / page_size), 4 pages
    /// without --seq-kv); the random run's lengths go up to max_blocks * page_size.
    #[arg(long)]
    pub max_blocks: Option<usize>,
    /// attn_paged: pages in the cache (default and least batch * max_blocks).
    #[arg(long)]
    pub num_blocks: Option<usize>,
    /// Attention tensor layout.
    #[arg(long, value_enum, ignore_case = true, default_value_t = AttnLayoutArg::Bshd)]
    pub layout: AttnLayoutArg,
    /// Attention queries per wave (HipKittens E.3: 32).
    #[arg(long, default_value_t = 16)]
    pub q_rows: u32,
    /// Attention keys per pipeline step (HipKittens E.3: 64).
    #[arg(long, default_value_t = 32)]
    pub kv_block: u32,
    /// Layernorm, rmsnorm, swiglu: rows.
    #[arg(long, default_value_t = 37)]
    pub rows: usize,
    /// Layernorm, rmsnorm: row length D (a multiple of 8 from 768 to 8192); swiglu: width F (a
    /// multiple of 8).
    #[arg(long, default_value_t = 1000)]
    pub hidden: usize,
    /// rmsnorm, rmsnorm_bwd: normalise x alone (no residual added, no new residual written).
    #[arg(long)]
    pub no_residual: bool,
    /// layernorm: added to the variance (default 1e-5); rmsnorm, rmsnorm_bwd: added to the mean
    /// square (default 1e-6).
    #[arg(long)]
    pub eps: Option<f32>,
    /// swiglu, swiglu_bwd: gate and up as the two halves of one [rows, 2F] tensor (gate first).
    #[arg(long)]
    pub packed: bool,
    /// cross_entropy: vocabulary size V (columns of the logits; --rows rows): its row length, the
    /// same argument as --hidden (give one).
    #[arg(long, default_value_t = 32000)]
    pub vocab: usize,
    /// cross_entropy: label smoothing in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pub smoothing: f32,
    /// cross_entropy: float32 logits and gradient instead of bf16.
    #[arg(long)]
    pub f32_logits: bool,
    /// Layernorm dropout probability (0 = plain residual + layernorm).
    #[arg(long, default_value_t = 0.1)]
    pub p: f32,
    /// Layernorm dropout seed (the Philox key).
    #[arg(long, default_value_t = 0x5eed_0000_0000_2a2a)]
    pub dropout_seed: u64,
    /// Layernorm dropout offset (Philox counter words 2 and 3).
    #[arg(long, default_value_t = 3)]
    pub offset: u64,
    /// Rotary: the interleaved (GPT-J) form instead of half rotation (GPT-NeoX); the shape is
    /// --batch --heads --seq --dim --layout.
    #[arg(long)]
    pub interleaved: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `--backend isa-emu`: seed of the emulator's wave interleaving and memory latencies (another
    /// seed, another legal landing order of loads and stores).
    #[arg(long)]
    pub isa_seed: Option<u64>,
    /// Multiply the random inputs (uniform in [-1, 1)) by S; `8` at head dimension 64 gives attention
    /// logits of about ±64.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub input_scale: f32,
    /// Fixed bound on rel_err instead of the kernel's own (attention: 2x the bf16 baseline's error
    /// plus a floor; GEMM: 1e-2).
    #[arg(long)]
    pub tolerance: Option<f64>,
    /// Also print the kernel's IR listing (op indices, `*` = implied by the schedule); key `ir` in JSON.
    #[arg(long)]
    pub ir: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// The flags given on the command line (clap ids), filled by `main` from the parsed matches: a
    /// flag that does not apply to the kernel or backend is refused instead of ignored.
    #[arg(skip)]
    pub explicit: Vec<String>,
}

/// The ids of the `run` flags given on the command line (not defaults).
pub fn explicit_flags(matches: &clap::ArgMatches) -> Vec<String> {
    let Some(m) = matches.subcommand_matches("run") else {
        return Vec::new();
    };
    // Argument ids only (the matches also hold the group the derive names after the struct).
    let cmd = <Args as clap::Args>::augment_args(clap::Command::new("run"));
    let args: Vec<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
    m.ids()
        .filter(|id| args.contains(&id.as_str()))
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.as_str().to_string())
        .collect()
}

/// The named argument (`kittens_kernels::problem::NamedArgs`) a kernel flag sets: its clap id,
/// except where the CLI's word differs from the problems'.
fn named_arg(flag: &str) -> &str {
    match flag {
        "softmax_scale" => "scale",
        // Two words for one row length: cross_entropy's rows are its vocabulary.
        "hidden" | "vocab" => "norm_dim",
        "no_residual" => "residual",
        other => other,
    }
}

/// Flags every kernel takes.
const COMMON_FLAGS: &[&str] = &[
    "kernel",
    "backend",
    "target",
    "seed",
    "isa_seed",
    "input_scale",
    "tolerance",
    "ir",
    "json",
    "device",
    "host_loop",
    "time",
    // The kernel file's own flags (`super::kernel_file::RunFile`): they apply to any kernel.
    "kernel_file",
    "reference",
    "params",
];

/// Tile flags that configure the interpreter's program only (a GPU target builds its GPU's tiles).
const CPU_TILE_FLAGS: &[&str] = &["block", "k_step", "q_rows", "kv_block"];

/// Whether the kernel has variants that `--schedule` names (`interleave4`, `pingpong8`).
fn has_schedule_variants(a: &Args) -> bool {
    a.kernel
        .variants
        .iter()
        .any(|v| matches!(v.name, "interleave4" | "pingpong8"))
}

/// Refuses a flag given on the command line that the kernel (or the backend) would ignore: a kernel
/// takes the flags whose named argument its problem reads (`unread`: the names its parser left
/// unread, `NamedArgs::unread`), and `--schedule` where it names one of the kernel's variants
/// ([`variant`]); every kernel takes [`COMMON_FLAGS`].
fn check_flags(a: &Args, unread: &[String]) -> anyhow::Result<()> {
    let schedules = has_schedule_variants(a);
    let takes = |f: &str| {
        COMMON_FLAGS.contains(&f)
            || !unread.iter().any(|u| u == named_arg(f))
            || f == "schedule" && schedules
    };
    let cmd = <Args as clap::Args>::augment_args(clap::Command::new("run"));
    let own: Vec<&str> = cmd
        .get_arguments()
        .map(|x| x.get_id().as_str())
        .filter(|f| !COMMON_FLAGS.contains(f) && takes(f))
        .collect();
    let foreign: Vec<String> = a
        .explicit
        .iter()
        .filter(|f| !takes(f))
        .map(|f| format!("--{}", f.replace('_', "-")))
        .collect();
    if !foreign.is_empty() {
        bail!(
            "{} {} not apply to {}; its flags: {}",
            foreign.join(", "),
            if foreign.len() == 1 { "does" } else { "do" },
            a.kernel.name,
            own.iter()
                .map(|f| format!("--{}", f.replace('_', "-")))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if a.backend != BackendArg::Cpu {
        if let Some(f) = a
            .explicit
            .iter()
            .find(|f| CPU_TILE_FLAGS.contains(&f.as_str()))
        {
            bail!(
                "--{} configures the interpreter's tiles (--backend cpu); a GPU target builds its GPU's \
                 configuration (pick another with --schedule or --variant)",
                f.replace('_', "-")
            );
        }
    }
    Ok(())
}

pub(crate) fn problem(a: &Args) -> anyhow::Result<NamedArgs> {
    // An empty problem would "pass" with zero error: refuse it instead.
    let dims = [
        ("--m", a.m),
        ("--n", a.n),
        ("--k", a.k),
        ("--batch", a.batch),
        ("--heads", a.heads),
    ];
    let seq_kv = ("--seq-kv", a.seq_kv.unwrap_or(a.seq));
    let dims = dims
        .into_iter()
        .chain([("--seq", a.seq), seq_kv, ("--dim", a.dim)]);
    if let Some((flag, _)) = dims.into_iter().find(|&(_, v)| v == 0) {
        bail!("{flag} must be positive");
    }
    // Which flags apply is the kernel's problem's business (`check_flags`); these two say the flags'
    // names where the problem would name its arguments.
    if a.kernel.reads("heads_kv", 1) && (a.heads_kv == 0 || !a.heads.is_multiple_of(a.heads_kv)) {
        bail!("--heads-kv {} must divide --heads {}", a.heads_kv, a.heads);
    }
    let given = |f: &str| a.explicit.iter().any(|e| e == f);
    if given("hidden") && given("vocab") {
        bail!("--hidden and --vocab both set the row length; give one");
    }
    // The problem by name; the kernel's own problem type reads the names it knows
    // (`KernelEntry::problem`), and `check_flags` refused the flags it does not.
    let layout = match a.layout {
        AttnLayoutArg::Bshd => "bshd",
        AttnLayoutArg::Bhsd => "bhsd",
    };
    let schedule = match a.schedule.unwrap_or(ScheduleArg::Pingpong) {
        ScheduleArg::Pingpong => "pingpong",
        ScheduleArg::Interleave => "interleave",
        ScheduleArg::Ws => "ws",
    };
    let kv_splits: ArgValue = match a.kv_splits {
        KvSplits::Auto => "auto".into(),
        KvSplits::Fixed(g) => g.into(),
    };
    // The row length: the flag given, else cross_entropy's vocabulary or the norms' default.
    let norm_dim = if given("vocab") || !given("hidden") && a.kernel.name == "cross_entropy" {
        a.vocab
    } else {
        a.hidden
    };
    let mut p = NamedArgs::new()
        .with("m", a.m)
        .with("n", a.n)
        .with("k", a.k)
        .with("block", a.block)
        .with("schedule", schedule)
        .with("batch", a.batch)
        .with("heads", a.heads)
        .with("heads_kv", a.heads_kv)
        .with("seq", a.seq)
        .with("seq_kv", a.seq_kv)
        .with("dim", a.dim)
        .with("layout", layout)
        .with("causal", a.causal)
        .with("bottom_right", a.bottom_right)
        .with("lse", a.lse)
        .with("scale", a.softmax_scale)
        .with("softcap", a.softcap)
        .with("alibi", a.alibi)
        .with("kv_splits", kv_splits)
        .with("page_size", a.page_size)
        .with("max_blocks", a.max_blocks)
        .with("num_blocks", a.num_blocks)
        .with("q_rows", a.q_rows)
        .with("kv_block", a.kv_block)
        .with("rows", a.rows)
        .with("norm_dim", norm_dim)
        .with("p", a.p)
        .with("dropout_seed", a.dropout_seed)
        .with("offset", a.offset)
        .with("interleaved", a.interleaved)
        .with("residual", !a.no_residual)
        .with("eps", a.eps)
        .with("packed", a.packed)
        .with("smoothing", a.smoothing)
        .with("f32_logits", a.f32_logits)
        .with("seed", a.seed)
        .with("input_scale", a.input_scale)
        .with("tolerance", a.tolerance);
    if let Some(w) = a.window {
        p.set("window", ArgValue::Ints(vec![w.left, w.right]));
    }
    if let Some(k) = a.k_step {
        p.set("k_step", k);
    }
    Ok(p)
}

/// The registry variant the schedule flag names: the kernel's variant of that name (`interleave4`,
/// `pingpong8`) where it has one — on a GPU target, and for attn_bwd, whose variants the interpreter
/// runs too, on the cpu backend; the GEMMs' ping-pong is their targets' own configuration.
fn variant(a: &Args) -> anyhow::Result<Option<&'static str>> {
    if let Some(name) = &a.variant {
        if a.schedule.is_some() {
            bail!("--variant and --schedule both pick a configuration; give one");
        }
        return named_variant(a, name).map(Some);
    }
    let Some(schedule) = a.schedule else {
        return Ok(None);
    };
    // The GEMMs' problem takes the schedule by name (the interpreter runs either); a kernel with
    // schedule variants (attn_bwd) runs them as variants, on the interpreter too.
    let gemm = a.kernel.reads("schedule", "pingpong");
    if !gemm && !has_schedule_variants(a) {
        bail!(
            "--schedule applies to the GEMMs and attn_bwd, not {} (its variants: --variant)",
            a.kernel.name
        );
    }
    let name = match schedule {
        ScheduleArg::Pingpong => "pingpong8",
        ScheduleArg::Interleave => "interleave4",
        ScheduleArg::Ws if !gemm => {
            bail!("--schedule ws is the GEMMs' Hopper schedule; attn_bwd runs interleave4 or pingpong8")
        }
        ScheduleArg::Ws => {
            if a.backend == BackendArg::Cpu {
                return Ok(None);
            }
            bail!("--schedule ws is the Hopper schedule; the AMD backends run pingpong or interleave4")
        }
    };
    let found = a.kernel.variants.iter().any(|v| v.name == name);
    match found {
        true if a.backend != BackendArg::Cpu || !gemm => named_variant(a, name).map(Some),
        true => Ok(None),
        false if schedule == ScheduleArg::Pingpong || a.backend == BackendArg::Cpu => Ok(None),
        false => named_variant(a, name).map(Some),
    }
}

/// The kernel's registry variant `name`, or an error that lists its variants.
fn named_variant(a: &Args, name: &str) -> anyhow::Result<&'static str> {
    match a.kernel.variants.iter().find(|v| v.name == name) {
        Some(v) => Ok(v.name),
        None => bail!(
            "`{}` has no variant `{name}`; its variants: {}",
            a.kernel.name,
            a.kernel
                .variants
                .iter()
                .map(|v| v.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The backend `--backend` and `--target` name.
fn backend(args: &Args) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match (args.backend, args.target) {
        (BackendArg::Cpu, None | Some(Target::Cpu)) => Box::new(Interpreter),
        (BackendArg::Cpu, Some(t)) => {
            bail!("--backend cpu runs the interpreter; --target {t} needs --backend hip-emu")
        }
        (BackendArg::HipEmu, None) => {
            bail!("--backend hip-emu needs --target gfx942 or --target gfx950")
        }
        (BackendArg::HipEmu, Some(t)) => Box::new(HipEmu::new(t)?),
        (BackendArg::IsaEmu, None) => {
            bail!("--backend isa-emu needs --target gfx942 or --target gfx950")
        }
        (BackendArg::IsaEmu, Some(t)) => {
            let mut emu = IsaEmu::new(t)?;
            emu.seed = args.isa_seed.unwrap_or(emu.seed);
            Box::new(emu)
        }
        (BackendArg::Hip, None) => bail!("--backend hip needs --target gfx942 or --target gfx950"),
        (BackendArg::Hip, Some(t)) => Box::new(HipGpu::new(t)?),
        (BackendArg::Cuda, None | Some(Target::Sm90a)) => match args.time {
            Some(iters) => Box::new(CudaGpu::timed(
                args.device.unwrap_or(0),
                runner::Timed { warmup: 10, iters },
            )),
            None => Box::new(CudaGpu::new(args.device.unwrap_or(0))),
        },
        (BackendArg::Cuda, Some(t)) => bail!("--backend cuda runs sm_90a, not --target {t}"),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let args = match args.file.resolve(args.kernel)? {
        super::kernel_file::ForRun::Entry(kernel) => Args { kernel, ..args },
        super::kernel_file::ForRun::Unreferenced(k) => {
            let b = backend(&args)?;
            let (seed, scale) = (args.seed, args.input_scale);
            return super::kernel_file::run_unreferenced(
                &k,
                &args.file.params,
                b.as_ref(),
                seed,
                scale,
                args.json,
            )
            .map(|_| ());
        }
    };
    let entry = args.kernel;
    if args.isa_seed.is_some() && args.backend != BackendArg::IsaEmu {
        bail!("--isa-seed seeds the ISA emulator; it needs --backend isa-emu");
    }
    if args.device.is_some() && args.backend != BackendArg::Cuda {
        bail!("--device picks the GPU of --backend cuda");
    }
    if args.time.is_some() && args.backend != BackendArg::Cuda {
        bail!("--time times the call on the GPU; it needs --backend cuda");
    }
    if args.time.is_some_and(|n| !(1..=100_000).contains(&n)) {
        bail!("--time takes 1 to 100000 timed calls");
    }
    if args.host_loop.is_some() && args.backend != BackendArg::Cuda {
        bail!("--host-loop times prepared CUDA launches; it needs --backend cuda");
    }
    if args
        .host_loop
        .is_some_and(|n| !(1..=1_000_000).contains(&n))
    {
        bail!("--host-loop takes 1 to 1000000 calls");
    }
    let mut named = problem(&args)?;
    // The names the kernel's problem reads, asked of its parser; a problem it refuses says why below.
    if entry.problem(&named).is_ok() {
        check_flags(&args, &named.unread())?;
    }
    let variant = variant(&args)?;
    // On the interpreter the GEMMs' `interleave4` variant is their 4-wave schedule (what `--schedule
    // interleave` runs there); the registry variant itself configures a GPU target.
    if args.backend == BackendArg::Cpu
        && entry.reads("schedule", "pingpong")
        && variant == Some(kittens_kernels::gemm::problem::INTERLEAVE4)
    {
        named.set("schedule", "interleave");
    } else if let Some(v) = variant {
        named.set("variant", v);
    }
    let backend = backend(&args)?;
    if args.backend == BackendArg::Cuda {
        // The configuration is chosen for the GPU that runs it (its SM count), not the catalog's;
        // without a usable device the run itself says why, naming the backend.
        let ordinal = i32::try_from(args.device.unwrap_or(0)).context("--device")?;
        named.set(
            "sms",
            kittens_runtime::cuda::dispatch::device_sms(ordinal).ok(),
        );
        if let Ok(Some(g)) = kittens_runtime::cuda::dispatch::device_gpu(ordinal) {
            named.set("gpu", g);
        }
    }
    let p = entry.problem(&named)?;
    let p = p.as_ref();
    let target = backend.about().target;
    if args.ir && target != Target::Cpu {
        bail!("--ir prints the interpreter's kernel; use `kittens compile --emit hip` for the HIP");
    }
    let on = match (target, args.backend) {
        (Target::Cpu, _) => "on the CPU interpreter".to_string(),
        (t, BackendArg::IsaEmu) => format!("for {t} on the ISA emulator"),
        (t, BackendArg::Hip) => format!("for {t} on an AMD GPU through HIP"),
        (t, BackendArg::Cuda) => format!("for {t} on an NVIDIA GPU"),
        (t, _) => format!("for {t} on the HIP emulation"),
    };
    let r = runner::run(entry, p, backend.as_ref())
        .with_context(|| format!("running `{}` {on}", entry.name))?;
    let ir = if args.ir {
        Some(p.build(target)?.to_string())
    } else {
        None
    };
    let host = match args.host_loop {
        Some(calls) if r.passed => Some(host_loop(entry, p, args.device.unwrap_or(0), calls)?),
        _ => None,
    };
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        v["rel_err_definition"] = "||out - ref||_F / ||ref||_F against an f64 reference".into();
        if let Some(h) = &host {
            v["host_loop"] = serde_json::to_value(h)?;
        }
        if let Some(ir) = ir {
            v["ir"] = ir.into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(ir) = ir {
            println!("{ir}");
        }
        print_text(&r);
        if let Some(h) = &host {
            println!(
                "host     {:.1} us per call ({} launch(es)), a loop of {} prepared calls with one \
                 synchronisation at the end",
                h.us_per_call, h.launches, h.calls
            );
        }
    }
    if !r.passed {
        bail!(
            "`{}` failed its error check on {}: {}",
            entry.name,
            r.backend,
            r.failures().join("; ")
        );
    }
    Ok(())
}

fn print_text(r: &RunReport) {
    let on = match r.configured_for {
        Some(gpu) => format!("{}, {} as configured for {gpu}", r.backend, r.target),
        None => r.backend.to_string(),
    };
    let then: String = r.then.iter().map(|k| format!(" then {k}")).collect();
    println!(
        "kernel   {}{then} (backend {on}, {} blocks × {} waves)",
        r.kernel, r.blocks, r.waves_per_block
    );
    if let Some(g) = r.shape.get("kv_splits") {
        let why = r.shape["kv_split_reason"]
            .as_str()
            .map_or(String::new(), |w| format!(" ({w})"));
        println!("split    {g} key part(s){why}");
    }
    println!("shape    {}", r.shape);
    println!(
        "rel_err  {:.3e}   (‖out − ref‖_F / ‖ref‖_F, f64 reference)",
        r.error.rel_err
    );
    println!(
        "max_rel  {:.3e}   (max |out − ref| / max |ref|)",
        r.error.max_rel
    );
    println!(
        "mean_rel {:.3e}   (mean |out − ref| / mean |ref|)",
        r.error.mean_rel
    );
    if let Some(b) = &r.baseline {
        println!(
            "baseline rel_err {:.3e}, max_rel {:.3e}   (the same computation done the plain low-precision way, as PyTorch does it; same reference)",
            b.rel_err, b.max_rel
        );
    }
    for o in &r.outputs {
        let base = o.baseline.map_or(String::new(), |b| {
            format!(
                ", baseline rel_err {:.3e} max_rel {:.3e}",
                b.rel_err, b.max_rel
            )
        });
        println!(
            "output   {:<4} rel_err {:.3e} max_rel {:.3e}{base}: {}",
            o.name,
            o.error.rel_err,
            o.error.max_rel,
            if o.passed { "ok" } else { "FAILED" }
        );
    }
    if let Some(l) = r.max_abs_logit {
        println!(
            "logits   max |q·k|/√d = {l:.1} (input scale {})",
            r.input_scale
        );
    }
    for c in &r.checks {
        let how = match c.verdict.baseline {
            Some(b) => format!("2 × baseline {b:.3e} + floor"),
            None => "fixed tolerance".into(),
        };
        let metric = match &c.output {
            Some(o) => format!("{o} {}", c.metric),
            None => c.metric.to_string(),
        };
        println!(
            "check    {:<11} {:.3e} ≤ {:.3e} ({how}): {}",
            metric,
            c.verdict.error,
            c.verdict.bound,
            if c.verdict.passed { "ok" } else { "FAILED" }
        );
    }
    if let Some(d) = r.dynamic.as_ref().filter(|d| d.get("launches").is_some()) {
        // The CUDA backend: each launch of the prepared call, and the timing if asked.
        for l in d["launches"].as_array().into_iter().flatten() {
            println!(
                "launch   {} on {}: {} blocks of {} threads, {} registers, {} spill stores, {} B dynamic shared",
                l["kernel"].as_str().unwrap_or("?"),
                d["device"].as_str().unwrap_or("?"),
                l["blocks"],
                l["threads"],
                l["registers"],
                l["spill_stores"],
                l["dynamic_shared_bytes"]
            );
        }
        let t = &d["timed"];
        if let (Some(ms), Some(copy)) = (t["median_ms"].as_f64(), t["copy_ms"].as_f64()) {
            println!(
                "timed    {:.4} ms per call (median of {}), a copy of its {} tensor bytes {:.4} ms: {:.2}x the copy's time",
                ms,
                t["iters"],
                t["tensor_bytes"],
                copy,
                ms / copy
            );
        }
    }
    if let Some(d) = r.dynamic.as_ref().filter(|d| d.get("stats").is_some()) {
        let s = &d["stats"];
        println!("issued   {}", s["instructions"]);
        println!(
            "waits    {} executed, {} stalled (landed a memory operation early)",
            s["waits"], s["stalled_waits"]
        );
        if let Some(ds) = s["ds"].as_object() {
            let worst = ds.values().filter_map(|v| v["worst_degree"].as_u64()).max();
            let unmodelled = ds.values().filter(|v| v["worst_degree"].is_null()).count();
            println!(
                "lds      {} DS instructions executed; worst bank conflict {} (kittens-hw bank model, actual addresses); {unmodelled} not in the model",
                ds.len(),
                worst.map_or("-".to_string(), |w| format!("{w}-way"))
            );
        }
        if let Some(differ) = d["banks"]["differ"].as_array() {
            println!(
                "banks    measured vs the static model of `check --banks`: {} difference(s)",
                differ.len()
            );
            for x in differ {
                let at = x["offset"].as_u64().map_or(String::new(), |o| {
                    format!("{o:#x} {}: ", x["text"].as_str().unwrap_or(""))
                });
                println!("         {at}{}", x["why"].as_str().unwrap_or(""));
            }
        }
    }
    println!("passed   {}", r.passed);
    println!(
        "time     compile {:.3} s, run {:.3} s, reference {:.3} s",
        r.compile_seconds, r.run_seconds, r.reference_seconds
    );
}

/// [`kittens_runtime::cuda::dispatch::host_loop`] over `entry`'s launches at `p` on the device.
fn host_loop(
    entry: &KernelEntry,
    p: &dyn KernelProblem,
    device: usize,
    calls: usize,
) -> anyhow::Result<kittens_runtime::cuda::dispatch::HostLoop> {
    use kittens_runtime::cuda::dispatch;
    let stages = dispatch::registry_stages(entry, p)?;
    let ordinal = i32::try_from(device).context("--device")?;
    dispatch::host_loop(ordinal, &stages, calls).context("timing the prepared launches")
}
