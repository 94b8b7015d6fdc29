//! `kittens run <kernel> --backend cpu`: runs a kernel of the tile language on the CPU interpreter on
//! random inputs (bf16, uniform in [-1, 1)) and reports its error against the f64 reference.

use anyhow::{bail, Context};
use kittens_kernels::attn_fwd::AttnLayout;
use kittens_kernels::cpu::{self, Problem};
use kittens_kernels::gemm_bf16::GemmSchedule;

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name: gemm_bf16 or attn_fwd.
    pub kernel: String,
    /// Where to run: `cpu` (the interpreter) or `hip-emu` (the lowered HIP for --target, compiled for
    /// and run on this CPU through the emulation header). GPU runs are `kittens bench`'s job.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// AMD target of `--backend hip-emu`: gfx942 or gfx950.
    #[arg(long)]
    pub target: Option<String>,
    /// GEMM rows of A and C.
    #[arg(long, default_value_t = 256)]
    pub m: usize,
    /// GEMM rows of B, columns of C.
    #[arg(long, default_value_t = 256)]
    pub n: usize,
    /// GEMM reduction size.
    #[arg(long, default_value_t = 192)]
    pub k: usize,
    /// GEMM block tile (rows = cols of C per block; seed 000 E.1 uses 256).
    #[arg(long, default_value_t = 256)]
    pub block: u32,
    /// GEMM schedule: pingpong (8-wave, seed 000 E.1), interleave (4-wave) or ws (producer/consumer, Hopper).
    #[arg(long, default_value = "pingpong")]
    pub schedule: String,
    /// GEMM K step (seed 000 E.1 uses 64).
    #[arg(long, default_value_t = 64)]
    pub k_step: u32,
    /// Attention batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Attention query heads.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Attention key/value heads (GQA when fewer than --heads; must divide it).
    #[arg(long, default_value_t = 2)]
    pub heads_kv: usize,
    /// Attention sequence length (queries = keys).
    #[arg(long, default_value_t = 256)]
    pub seq: usize,
    /// Attention head dimension (a multiple of 32).
    #[arg(long, default_value_t = 64)]
    pub dim: usize,
    /// Causal attention (PyTorch's top-left `is_causal`).
    #[arg(long)]
    pub causal: bool,
    /// Attention tensor layout: bshd or bhsd.
    #[arg(long, default_value = "bshd")]
    pub layout: String,
    /// Attention queries per wave (seed 000 E.3: 32).
    #[arg(long, default_value_t = 16)]
    pub q_rows: u32,
    /// Attention keys per pipeline step (seed 000 E.3: 64).
    #[arg(long, default_value_t = 32)]
    pub kv_block: u32,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also print the kernel's IR listing (op indices, `*` = implied by the schedule); key `ir` in JSON.
    #[arg(long)]
    pub ir: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn problem(a: &Args) -> anyhow::Result<Problem> {
    let layout = match a.layout.to_ascii_lowercase().as_str() {
        "bshd" => AttnLayout::Bshd,
        "bhsd" => AttnLayout::Bhsd,
        other => bail!("unknown layout `{other}`; use bshd or bhsd"),
    };
    // An empty problem would "pass" with zero error: refuse it instead.
    let dims = [
        ("--m", a.m),
        ("--n", a.n),
        ("--k", a.k),
        ("--batch", a.batch),
        ("--heads", a.heads),
    ];
    let dims = dims.into_iter().chain([("--seq", a.seq), ("--dim", a.dim)]);
    if let Some((flag, _)) = dims.into_iter().find(|&(_, v)| v == 0) {
        bail!("{flag} must be positive");
    }
    if a.heads_kv == 0 || !a.heads.is_multiple_of(a.heads_kv) {
        bail!("--heads-kv {} must divide --heads {}", a.heads_kv, a.heads);
    }
    let mut p = Problem {
        m: a.m,
        n: a.n,
        k: a.k,
        causal: a.causal,
        seed: a.seed,
        ..Problem::default()
    };
    p.gemm.block = a.block;
    p.gemm.schedule = match a.schedule.as_str() {
        "pingpong" | "ping-pong" => GemmSchedule::PingPong8,
        "interleave" | "i4" => GemmSchedule::Interleave4,
        "ws" | "producer-consumer" => GemmSchedule::ProducerConsumer,
        other => bail!("unknown GEMM schedule `{other}`; use pingpong, interleave or ws"),
    };
    p.gemm.k_step = a.k_step;
    p.attn.batch = a.batch;
    p.attn.heads = a.heads;
    p.attn.heads_kv = a.heads_kv;
    p.attn.seq = a.seq;
    p.attn.dim = a.dim;
    p.attn.layout = layout;
    p.attn_cfg.q_rows = a.q_rows;
    p.attn_cfg.kv_block = a.kv_block;
    Ok(p)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.backend.as_str() {
        "cpu" => {}
        "hip-emu" => return super::run_emu::run(&args),
        "gfx942" | "gfx950" | "sm_90a" | "hip" | "cuda" | "gpu" => bail!(
            "`kittens run` runs the CPU interpreter only; GPU backends are measured by `kittens bench`"
        ),
        other => bail!("unknown backend `{other}`; `kittens run` supports `cpu` and `hip-emu`"),
    }
    if kittens_kernels::by_name(&args.kernel).is_none() {
        bail!(
            "unknown kernel `{}`; known: {}",
            args.kernel,
            kittens_kernels::NAMES.join(", ")
        );
    }
    let p = problem(&args)?;
    let r = cpu::run(&args.kernel, &p)
        .with_context(|| format!("running `{}` on the CPU interpreter", args.kernel))?;
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        v["backend"] = "cpu".into();
        v["rel_err_definition"] = "||out - ref||_F / ||ref||_F against an f64 reference".into();
        if args.ir {
            v["ir"] = cpu::build(&args.kernel, &p)?.to_string().into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if args.ir {
        println!("{}", cpu::build(&args.kernel, &p)?);
    }
    println!(
        "kernel   {} (backend cpu, {} blocks × {} waves)",
        r.kernel, r.blocks, r.waves_per_block
    );
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
    println!(
        "time     interpreter {:.3} s, reference {:.3} s",
        r.interp_seconds, r.reference_seconds
    );
    Ok(())
}
