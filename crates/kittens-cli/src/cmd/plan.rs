//! `kittens plan ...`: grid order and the chiplet cache model, the tail KV split, register budgets.
//! The models live in `kittens_grid`; this module parses, prints and writes the picture.

use anyhow::{bail, Context};
use kittens_draw as draw;
use kittens_grid::{l2, regs, remap::GridOrder, tail};
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum PlanCommand {
    /// Grid order and the chiplet cache model (HipKittens §3.4, Algorithm 1, Table 4).
    Grid(GridArgs),
    /// Tail KV split for attention forward (MI300X-attn §5.2).
    Tail(TailArgs),
    /// Register budget of a block of producer and consumer waves (HipKittens Table 2).
    Regs(RegsArgs),
}

#[derive(clap::Args)]
pub struct GridArgs {
    #[arg(long, default_value = "mi355x", value_parser = kittens_hw::gpu)]
    pub gpu: &'static kittens_hw::Gpu,
    #[arg(long)]
    pub m: u64,
    #[arg(long)]
    pub n: u64,
    #[arg(long)]
    pub k: u64,
    /// Block tile MxNxK.
    #[arg(long, default_value = "192x256x64")]
    pub tile: String,
    /// Launch order without remap.
    #[arg(long, conflicts_with_all = ["window", "chunk"])]
    pub row_major: bool,
    /// Window height W of Algorithm 1 (alone: group-M only).
    #[arg(long)]
    pub window: Option<u32>,
    /// XCD chunk size C of Algorithm 1 (needs --window).
    #[arg(long, requires = "window")]
    pub chunk: Option<u32>,
    /// Write the first dispatch round's XCD assignment as a PNG.
    #[arg(long)]
    pub png: Option<std::path::PathBuf>,
    /// Phase spread of an XCD's CUs as a fraction of one block's duration (0 = lockstep rounds;
    /// docs/grid.md discusses 0.1).
    #[arg(long, default_value_t = 0.0)]
    pub stagger: f64,
    /// Pixels per tile in the PNG (at least 2: one pixel of each tile is its border).
    #[arg(long, default_value_t = 12, requires = "png", value_parser = clap::value_parser!(u32).range(2..))]
    pub cell: u32,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct TailArgs {
    #[arg(long, default_value = "mi300x", value_parser = kittens_hw::gpu)]
    pub gpu: &'static kittens_hw::Gpu,
    #[arg(long)]
    pub batch: u64,
    #[arg(long)]
    pub heads: u64,
    #[arg(long)]
    pub seq: u64,
    #[arg(long)]
    pub dim: u64,
    /// Query rows per workgroup.
    #[arg(long)]
    pub block_rows: u64,
    /// Keys per K/V block iteration.
    #[arg(long, default_value_t = 64)]
    pub kv_block: u64,
    /// Keys each query attends to, when they differ from --seq (decoding against a cache).
    #[arg(long)]
    pub seq_kv: Option<u64>,
    /// Split every workgroup's walk (Flash-Decoding, what the kittens attention launches) instead of
    /// the stranded last round's only (MI300X-attn §5.2).
    #[arg(long)]
    pub every: bool,
    /// The most parts a walk may be cut into (0: as many as it has K/V blocks; the kittens attention
    /// allows 16).
    #[arg(long, default_value_t = 0)]
    pub max_split: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct RegsArgs {
    #[arg(long, default_value = "mi355x", value_parser = kittens_hw::gpu)]
    pub gpu: &'static kittens_hw::Gpu,
    #[arg(long, default_value_t = 0)]
    pub producers: u32,
    #[arg(long, default_value_t = 8)]
    pub consumers: u32,
    /// Output tile per block, MxN.
    #[arg(long, default_value = "256x256")]
    pub tile: String,
    /// Matrix instruction MxNxK.
    #[arg(long, default_value = "16x16x32")]
    pub mma: String,
    /// K columns of A/B per register stage (default: the instruction's K).
    #[arg(long)]
    pub k_step: Option<u32>,
    #[arg(long, default_value_t = 1)]
    pub reg_stages: u32,
    /// Shared-memory pipeline stages.
    #[arg(long, default_value_t = 2)]
    pub depth: u32,
    /// K extent of one shared-memory stage.
    #[arg(long, default_value_t = 64)]
    pub lds_k: u32,
    /// Bytes per input element.
    #[arg(long, default_value_t = 2)]
    pub in_bytes: u32,
    /// Per-lane registers for addresses and loop state.
    #[arg(long, default_value_t = 16)]
    pub overhead: u32,
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: PlanCommand) -> anyhow::Result<()> {
    match cmd {
        PlanCommand::Grid(a) => grid(a),
        PlanCommand::Tail(a) => tail_cmd(a),
        PlanCommand::Regs(a) => regs_cmd(a),
    }
}

/// Parse `AxB` or `AxBxC` into exactly `N` positive integers.
fn dims<const N: usize>(s: &str, what: &str) -> anyhow::Result<[u64; N]> {
    let parts: Vec<u64> = s
        .split(['x', 'X'])
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{what} `{s}`: expected {N} integers separated by `x`"))?;
    let arr: [u64; N] = parts
        .try_into()
        .map_err(|_| anyhow::anyhow!("{what} `{s}`: expected {N} numbers"))?;
    if arr.contains(&0) {
        bail!("{what} `{s}`: sizes must be positive");
    }
    Ok(arr)
}

fn grid(a: GridArgs) -> anyhow::Result<()> {
    let g = a.gpu;
    let [tm, tn, tk] = dims::<3>(&a.tile, "--tile")?;
    let order = match (a.row_major, a.window, a.chunk) {
        (true, _, _) | (false, None, None) => GridOrder::RowMajor,
        (false, Some(window), None) => GridOrder::GroupM { window },
        (false, Some(window), Some(chunk)) => GridOrder::XcdSwizzle {
            xcds: g.xcds,
            window,
            chunk,
        },
        (false, None, Some(_)) => bail!("--chunk needs --window"),
    };
    let shape = l2::GemmShape::bf16(a.m, a.n, a.k, (tm, tn, tk));
    let t0 = std::time::Instant::now();
    let rep = l2::simulate_staggered(g, &shape, order, a.stagger)?;
    let secs = t0.elapsed().as_secs_f64();
    let (rows, cols) = shape.grid();
    let map = draw::first_round(rows, cols, g.xcds as u64, g.compute_units as u64, order)?;
    if let Some(path) = &a.png {
        let (w, h, px) = draw::render_rgb(&map, a.cell)?;
        std::fs::write(path, draw::encode_png(w, h, &px))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        let mut v = serde_json::to_value(&rep)?;
        v["grid"] = json!([rows, cols]);
        v["png"] = json!(a.png.as_ref().map(|p| p.display().to_string()));
        v["model_seconds"] = json!(secs);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} on {} ({} XCDs x {} CUs): {}x{}x{} GEMM, tile {}x{}x{}, grid {rows}x{cols}, {} rounds",
        rep.order, g.name, g.xcds, g.cus_per_xcd, a.m, a.n, a.k, tm, tn, tk, rep.rounds
    );
    println!("  L2 hit   {:6.1}%", rep.l2_hit * 100.0);
    println!("  LLC hit  {:6.1}%", rep.llc_hit * 100.0);
    println!(
        "  HBM      {:.2} GB ({:.2}x compulsory)",
        rep.hbm_bytes as f64 / 1e9,
        rep.hbm_bytes as f64 / rep.compulsory_bytes as f64
    );
    print!(
        "  modeled bandwidth (HipKittens Eq. 1) {:.1} TB/s with the catalog's peaks",
        rep.bandwidth_tbps
    );
    match rep.bandwidth_tbps_table4 {
        Some(t4) => println!(", {t4:.1} TB/s with the constants of Table 4"),
        None => println!(),
    }
    println!("First dispatch round, XCD per tile (. = later rounds):");
    print!("{}", draw::text_map(&map));
    if let Some(p) = &a.png {
        println!("wrote {}", p.display());
    }
    Ok(())
}

fn tail_cmd(a: TailArgs) -> anyhow::Result<()> {
    let g = a.gpu;
    let input = tail::TailInput {
        seq_kv: a.seq_kv,
        max_split: a.max_split,
        scope: if a.every {
            tail::SplitScope::Every
        } else {
            tail::SplitScope::Tail
        },
        ..tail::TailInput::new(a.batch, a.heads, a.seq, a.dim, a.block_rows, a.kv_block)
    };
    let model = tail::TailModel::SEED_001;
    let plan = tail::plan_tail(g, &input, &model)?;
    if a.json {
        let mut v = serde_json::to_value(&plan)?;
        v["gpu"] = json!(g.name);
        v["input"] = serde_json::to_value(input)?;
        v["model"] = serde_json::to_value(model)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} workgroups on {} CUs: {} full rounds + {} in the last; {} K/V blocks each",
        plan.workgroups, g.compute_units, plan.full_rounds, plan.tail, plan.kv_blocks
    );
    println!("split G = {}  ({})", plan.split, plan.reason);
    println!(
        "predicted: {:.0} -> {:.1} K/V-block iterations (merge {:.1}), speedup {:.3}x",
        plan.time_unsplit, plan.time_split, plan.merge_cost, plan.speedup
    );
    Ok(())
}

fn regs_cmd(a: RegsArgs) -> anyhow::Result<()> {
    let g = a.gpu;
    let [tm, tn] = dims::<2>(&a.tile, "--tile")?;
    let [mm, mn, mk] = dims::<3>(&a.mma, "--mma")?;
    let small = |v: u64, what: &str| u32::try_from(v).with_context(|| format!("{what} too large"));
    let input = regs::RegsInput {
        producers: a.producers,
        consumers: a.consumers,
        tile_m: small(tm, "--tile")?,
        tile_n: small(tn, "--tile")?,
        mma: (
            small(mm, "--mma")?,
            small(mn, "--mma")?,
            small(mk, "--mma")?,
        ),
        k_step: a.k_step.unwrap_or(small(mk, "--mma")?),
        reg_stages: a.reg_stages,
        depth: a.depth,
        lds_k: a.lds_k,
        in_bytes: a.in_bytes,
        overhead: a.overhead,
    };
    let rep = regs::plan_regs(g, &input)?;
    if a.json {
        let mut v = serde_json::to_value(&rep)?;
        v["input"] = serde_json::to_value(input)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} ({:?}): {} producers + {} consumers, output {}x{}, {}x{}x{} instruction",
        g.name, rep.model, a.producers, a.consumers, tm, tn, mm, mn, mk
    );
    let c = &rep.consumer;
    println!(
        "  consumer layout {}x{}, sub-tile {}x{}: {} acc + {} operands + {} overhead = {} of {} registers",
        c.layout.0,
        c.layout.1,
        c.sub_tile.0,
        c.sub_tile.1,
        c.accumulators,
        c.operands,
        c.overhead,
        c.total,
        rep.consumer_budget
    );
    if a.producers > 0 {
        println!(
            "  producer needs {} of {}",
            rep.producer_need, rep.producer_budget
        );
    }
    println!("  LDS {} of {} bytes", rep.lds_bytes, rep.lds_limit);
    println!("  {}", rep.reason);
    Ok(())
}
