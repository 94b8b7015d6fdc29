//! `kittens ladder gemm_fp8 [--target gfx950] [--json]`: the FP8-tutorial's optimisation ladder
//! (`kittens_kernels::gemm::ladder`) as configurations of the FP8 GEMM tile program. Per step:
//! the configuration's lowered HIP compiled by the AMDGPU clang (VGPR/AGPR, spills, LDS, the hot
//! loop's instruction mix), the bank model's verdict on its shared accesses, and a run of the lowered
//! source on the host emulation against f64 on the fp8-rounded inputs at a shape that is not a tile
//! multiple, beside the tutorial's reported TFLOP/s. No AMD speed is measured: there is no AMD GPU.

use anyhow::{bail, Context, Result};
use kittens_hw::{Arch, Target};
use kittens_kernels::gemm::ladder::{fp8_ladder, LadderStep};
use kittens_kernels::gemm::{build, GemmConfig, GemmSchedule, Staging};
use kittens_kernels::problem::random;
use kittens_kernels::reference;
use kittens_runtime::amd::emulate::{Emulator, HostTensor};
use kittens_runtime::amd::{analyze, find_clang, CodeObjectReport};
use rand::{rngs::SmallRng, SeedableRng};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The kernel whose ladder to build (only `gemm_fp8` has one).
    pub kernel: String,
    /// AMD target: gfx950 (the tutorial's CDNA4, OCP e4m3) or gfx942 (e4m3fnuz).
    #[arg(long, default_value = "gfx950")]
    pub target: String,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The emulated problem: partial tiles in M, N and K for every block size of the ladder.
const SHAPE: (usize, usize, usize) = (264, 136, 300);

/// The hot loop's mix in the ladder's columns.
#[derive(Serialize)]
struct Mix {
    total: u32,
    mfma: u32,
    ds: u32,
    buffer: u32,
    s_waitcnt: u32,
    s_barrier: u32,
}

/// The worst bank conflict of the hot loop's shared accesses by the bank model (`None` when no
/// access is modelled), and the swizzles chosen.
#[derive(Serialize)]
struct Banks {
    worst_hot_loop: Option<u32>,
    unmodelled_hot_loop: usize,
    swizzles: Vec<String>,
}

#[derive(Serialize)]
struct Built {
    config: String,
    vgpr: u32,
    agpr: u32,
    vgpr_spill: u32,
    sgpr_spill: u32,
    scratch_bytes: u32,
    lds_bytes: u32,
    hot_loop: Option<Mix>,
    banks: Banks,
    /// Relative error against f64 on the emulation (`rel_err` of the runner's report).
    emulated_rel_err: f64,
    emulated_passed: bool,
}

#[derive(Serialize)]
struct Row {
    step: u32,
    name: &'static str,
    tutorial_tflops: f64,
    note: &'static str,
    /// The step this one shares its configuration with, if an earlier one.
    same_as: Option<u32>,
    built: Option<Built>,
    error: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    if a.kernel != "gemm_fp8" {
        bail!(
            "`{}` has no ladder (the FP8-tutorial's steps are gemm_fp8's)",
            a.kernel
        );
    }
    let target: Target = a
        .target
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--target {}", a.target))?;
    let gpu = target
        .gpu()
        .filter(|g| g.arch.is_amd())
        .with_context(|| format!("--target {target}: the ladder is for gfx950 or gfx942"))?;
    let steps = fp8_ladder(gpu);
    let mut rows: Vec<Row> = Vec::new();
    for s in &steps {
        let same_as = s.config.and_then(|c| {
            steps
                .iter()
                .take_while(|o| o.step != s.step)
                .find(|o| o.config == Some(c))
                .map(|o| o.step)
        });
        let (built, error) = match (s.config, same_as) {
            (Some(_), Some(_)) | (None, _) => (None, None),
            (Some(cfg), None) => {
                eprintln!("  step {}: {}", s.step, describe(&cfg));
                match build_one(&cfg, gpu.arch, (s.step as usize) << 8) {
                    Ok(b) => (Some(b), None),
                    Err(e) => (None, Some(format!("{e:#}"))),
                }
            }
        };
        rows.push(row(s, same_as, built, error));
    }
    if a.json {
        let doc = serde_json::json!({
            "ladder": "FP8-tutorial steps as configurations of the gemm_fp8 tile program",
            "target": target.name(),
            "configured_for": gpu.name,
            "emulated_shape": [SHAPE.0, SHAPE.1, SHAPE.2],
            "measured_speed": "none: no AMD GPU; tutorial_tflops are the tutorial's MI355X figures at 4096^3",
            "steps": rows,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print(&rows, target, gpu.name);
    }
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| r.error.is_some() || r.built.as_ref().is_some_and(|b| !b.emulated_passed))
        .map(|r| format!("step {}", r.step))
        .collect();
    if !bad.is_empty() {
        bail!("ladder configurations failed: {}", bad.join(", "));
    }
    Ok(())
}

fn row(s: &LadderStep, same_as: Option<u32>, built: Option<Built>, error: Option<String>) -> Row {
    Row {
        step: s.step,
        name: s.name,
        tutorial_tflops: s.tutorial_tflops,
        note: s.note,
        same_as,
        built,
        error,
    }
}

fn describe(c: &GemmConfig) -> String {
    let sched = match c.schedule {
        GemmSchedule::PingPong8 => "8-wave ping-pong",
        GemmSchedule::Interleave4 => "4-wave interleave",
        GemmSchedule::ProducerConsumer => "producer/consumer",
    };
    let staging = match c.staging {
        Staging::Lds => "LDS double buffer",
        Staging::Registers => "next K step in registers",
    };
    format!(
        "{sched}, {b}x{b} block, K step {}, {staging}, {}",
        c.k_step,
        c.types.input,
        b = c.block
    )
}

/// Lower, compile and analyse one configuration, plan its banks, and run it on the emulation.
fn build_one(cfg: &GemmConfig, arch: Arch, seed: usize) -> Result<Built> {
    let k = build(cfg).context("building the configuration")?;
    let src = kittens_codegen::hip::lower(&k, arch)
        .context("lowering to HIP")?
        .source;
    let clang = find_clang(arch).context("AMDGPU clang")?;
    let asm = clang.compile_to_asm(&src, arch).context("compiling")?;
    let r: CodeObjectReport = analyze(&asm, arch, Some(&k.name)).context("analysing")?;
    let plan = kittens_ir::banks::plan(&k, arch).context("bank plan")?;
    let hot: Vec<_> = plan
        .tiles
        .iter()
        .flat_map(|t| t.accesses.iter())
        .filter(|a| a.hot_loop)
        .collect();
    let banks = Banks {
        worst_hot_loop: hot.iter().filter_map(|a| a.max_conflict).max(),
        unmodelled_hot_loop: hot.iter().filter(|a| a.max_conflict.is_none()).count(),
        swizzles: plan
            .tiles
            .iter()
            .map(|t| format!("{}: {}", t.buffer, t.chosen))
            .collect(),
    };
    let (rel, passed) = emulate(&k, cfg, arch, seed as u64)?;
    Ok(Built {
        config: describe(cfg),
        vgpr: r.vgpr,
        agpr: r.agpr,
        vgpr_spill: r.vgpr_spill,
        sgpr_spill: r.sgpr_spill,
        scratch_bytes: r.scratch_bytes,
        lds_bytes: r.lds_bytes,
        hot_loop: r.hot_loop.map(|h| Mix {
            total: h.mix.total,
            mfma: h.mix.mfma,
            ds: h.mix.ds,
            buffer: h.mix.buffer,
            s_waitcnt: h.mix.s_waitcnt,
            s_barrier: h.mix.s_barrier,
        }),
        banks,
        emulated_rel_err: rel,
        emulated_passed: passed,
    })
}

/// The lowered kernel on the host emulation at [`SHAPE`]: random fp8 inputs in the configuration's
/// format, per-tensor scales, against the f64 product of the fp8-rounded inputs; passes within 1e-2
/// (the bf16 output's rounding is about 2e-3).
fn emulate(k: &kittens_ir::Kernel, cfg: &GemmConfig, arch: Arch, seed: u64) -> Result<(f64, bool)> {
    use kittens_ir::numerics::{from_bytes, to_bytes, Rounding};
    let emu = Emulator::build(k, arch).context("building the emulation")?;
    let (m, n, k_) = SHAPE;
    let mut rng = SmallRng::seed_from_u64(seed);
    let dt = cfg.types.input;
    let a = random(&mut rng, m * k_, dt);
    let b = random(&mut rng, n * k_, dt);
    let (sa, sb) = (0.75f32, 1.5f32);
    let mut t = vec![
        HostTensor::Data(to_bytes(&a, dt, Rounding::Rtne)),
        HostTensor::Data(to_bytes(&b, dt, Rounding::Rtne)),
        HostTensor::Data(sa.to_le_bytes().to_vec()),
        HostTensor::Data(sb.to_le_bytes().to_vec()),
        HostTensor::Data(to_bytes(
            &vec![f32::NAN; m * n],
            cfg.types.output,
            Rounding::Rtne,
        )),
    ];
    emu.run(&[m as i64, n as i64, k_ as i64], &mut t, None)
        .context("running on the emulation")?;
    let HostTensor::Data(c) = &t[4] else {
        bail!("the output tensor came back without data");
    };
    let out = from_bytes(c, cfg.types.output).context("decoding the output")?;
    let mut r = reference::gemm_abt(&a, &b, m, n, k_);
    let s = sa as f64 * sb as f64;
    r.iter_mut().for_each(|x| *x *= s);
    let e = reference::compare(&out, &r);
    Ok((e.rel_err, e.rel_err.is_finite() && e.rel_err < 1e-2))
}

fn print(rows: &[Row], target: Target, gpu: &str) {
    println!(
        "FP8-tutorial ladder as gemm_fp8 configurations on {target} ({gpu}); emulated at {}x{}x{}.",
        SHAPE.0, SHAPE.1, SHAPE.2
    );
    println!(
        "No AMD speed is measured here (no AMD GPU): the TFLOP/s column is the tutorial's own, MI355X at 4096^3."
    );
    println!(
        "{:>4} {:<34} {:>8}  {:>5} {:>4} {:>6} {:>7}  {:>4} {:>4} {:>4} {:>4} {:>5}  {:>6}  {:>9}",
        "step",
        "tutorial kernel",
        "TFLOP/s",
        "VGPR",
        "AGPR",
        "spills",
        "LDS KiB",
        "mfma",
        "ds",
        "buf",
        "wait",
        "total",
        "banks",
        "emu err"
    );
    for r in rows {
        let head = format!("{:>4} {:<34} {:>8.1}", r.step, r.name, r.tutorial_tflops);
        match (&r.built, &r.error, r.same_as) {
            (Some(b), _, _) => {
                let h = b.hot_loop.as_ref();
                let col = |f: fn(&Mix) -> u32| h.map_or("-".to_string(), |m| f(m).to_string());
                println!(
                    "{head}  {:>5} {:>4} {:>6} {:>7}  {:>4} {:>4} {:>4} {:>4} {:>5}  {:>6}  {:>9}",
                    b.vgpr,
                    b.agpr,
                    b.vgpr_spill + b.sgpr_spill,
                    b.lds_bytes / 1024,
                    col(|m| m.mfma),
                    col(|m| m.ds),
                    col(|m| m.buffer),
                    col(|m| m.s_waitcnt),
                    col(|m| m.total),
                    b.banks
                        .worst_hot_loop
                        .map_or("-".to_string(), |w| format!("{w}-way")),
                    format!(
                        "{:.2e}{}",
                        b.emulated_rel_err,
                        if b.emulated_passed { "" } else { " FAIL" }
                    ),
                );
                println!("       {}", b.config);
                if b.banks.unmodelled_hot_loop > 0 {
                    println!(
                        "       {} hot-loop shared accesses have no instruction in the bank model",
                        b.banks.unmodelled_hot_loop
                    );
                }
            }
            (None, Some(e), _) => println!("{head}  error: {e}"),
            (None, None, Some(s)) => println!("{head}  = step {s}"),
            (None, None, None) => println!("{head}  -"),
        }
        println!("       {}", r.note);
    }
}
