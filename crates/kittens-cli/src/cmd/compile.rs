//! `kittens compile <kernel> --target gfx942|gfx950|sm_90a [--emit hip|cuda|asm] [--json]`: lower a
//! kernel for a target, compile it with a real compiler and print what the compiler produced
//! (issue 5, item 4). AMD figures come from the code object only: no AMD GPU exists here, so no speed.

use anyhow::{bail, Context, Result};
use kittens_hw::{Arch, Backend, Target};
use kittens_runtime::amd::{self, CodeObjectReport};

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name (e.g. gemm_bf16; `prelude_smoke` exercises every HIP prelude wrapper).
    pub kernel: String,
    /// Compiler target: gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X) or sm_90a (H100/H200).
    #[arg(long)]
    pub target: Target,
    /// Print the generated source (hip, cuda) or the compiler's assembly (asm) instead of the report.
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    Hip,
    Cuda,
    Asm,
}

pub fn run(args: Args) -> Result<()> {
    match (args.target.backend(), args.target.arch()) {
        (Backend::Cuda, _) => run_cuda(&args),
        (Backend::Hip, Some(arch)) => run_amd(&args, arch),
        _ => bail!(
            "`kittens compile` needs a GPU target; {} runs kernels with `kittens run`",
            args.target
        ),
    }
}

fn run_amd(args: &Args, arch: Arch) -> Result<()> {
    let target = arch.target();
    match args.emit {
        Some(Emit::Hip) => return emit(&amd_source(&args.kernel, arch)?.0),
        Some(Emit::Cuda) => {
            bail!("--emit cuda is for --target sm_90a; {target} lowers to HIP (--emit hip)")
        }
        Some(Emit::Asm) => return emit(&amd_compile(&args.kernel, arch)?.asm),
        None => {}
    }
    let out = amd_compile(&args.kernel, arch)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out.json()?)?);
    } else {
        if let Some(g) = out.configured_for {
            println!(
                "configured for {} ({} B shared memory per block)",
                g.name, g.shared_bytes_per_block
            );
        }
        print_amd(&out.report, &out.version, out.code_object_bytes);
    }
    Ok(())
}

/// What compiling one kernel for one AMD target produced.
pub struct AmdCompiled {
    pub report: CodeObjectReport,
    pub asm: String,
    pub version: String,
    pub compiler_source: serde_json::Value,
    pub code_object_bytes: usize,
    pub arch: Arch,
    pub configured_for: Option<&'static kittens_hw::Gpu>,
}

impl AmdCompiled {
    /// The `--json` document: the code-object report plus compiler, size and configuration.
    pub fn json(&self) -> Result<serde_json::Value> {
        let mut doc = serde_json::to_value(&self.report)?;
        doc["compiler"] =
            serde_json::json!({ "source": self.compiler_source, "version": self.version });
        doc["code_object_bytes"] = self.code_object_bytes.into();
        doc["bf16_mfma"] = kittens_codegen::hip::bf16_mfma_opcode(self.arch).into();
        doc["configured_for"] = self.configured_for.map(|g| g.name).into();
        Ok(doc)
    }
}

/// Lower `kernel` for `arch`, compile it with the AMDGPU clang and analyse the code object.
pub fn amd_compile(kernel: &str, arch: Arch) -> Result<AmdCompiled> {
    let target = arch.target();
    let (source, configured_for) = amd_source(kernel, arch)?;
    let clang = amd::find_clang(arch)?;
    let version = clang.version().unwrap_or_else(|e| format!("unknown ({e})"));
    let compiled = clang
        .compile(&source, arch)
        .with_context(|| format!("compiling `{kernel}` for {target}"))?;
    let report = amd::analyze(&compiled.asm, arch, Some(kernel))?;
    Ok(AmdCompiled {
        report,
        code_object_bytes: compiled.code_object.len(),
        asm: compiled.asm,
        version,
        compiler_source: serde_json::to_value(clang.source)?,
        arch,
        configured_for,
    })
}

/// Print emitted text; a closed pipe (`| head`) ends quietly instead of panicking.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// HIP for a kernel: the built-in `prelude_smoke`, or a registry kernel (`kittens_kernels::by_name`)
/// built for the target's GPU (`KernelInfo::build_for`: on gfx942 gemm_bf16 stages the next K step in
/// registers, on gfx950 in LDS) and lowered from the tile IR; with the GPU it was configured for.
fn amd_source(name: &str, arch: Arch) -> Result<(String, Option<&'static kittens_hw::Gpu>)> {
    if let Some(src) = kittens_codegen::hip::builtin_kernel_source(name, arch) {
        return Ok((src, None));
    }
    let target = arch.target();
    let Some(info) = kittens_kernels::by_name(name) else {
        bail!(
            "kernel `{name}` is not available for {target} (known: prelude_smoke, {})",
            kittens_kernels::NAMES.join(", ")
        );
    };
    let gpu = gpu_for(arch)?;
    let kernel = (info.build_for)(gpu)
        .with_context(|| format!("building `{name}` for {} ({target})", gpu.name))?;
    let src = kittens_codegen::hip::lower(&kernel, arch)
        .with_context(|| format!("`{name}` is not available for {target} yet"))?;
    Ok((src, Some(gpu)))
}

/// The GPU a target's kernels are configured for (`Target::gpu`).
pub fn gpu_for(arch: Arch) -> Result<&'static kittens_hw::Gpu> {
    Target::from(arch)
        .gpu()
        .with_context(|| format!("no GPU of the catalog has architecture {}", arch.target()))
}

fn print_amd(r: &CodeObjectReport, compiler: &str, code_object_bytes: usize) {
    println!(
        "{} for {} — {compiler}, code object {code_object_bytes} bytes",
        r.kernel, r.target
    );
    println!(
        "  registers  vgpr {}  agpr {}  (unified {})  sgpr {}",
        r.vgpr, r.agpr, r.unified_vgpr, r.sgpr
    );
    println!(
        "  spills     vgpr {}  sgpr {}  scratch {} B",
        r.vgpr_spill, r.sgpr_spill, r.scratch_bytes
    );
    println!("  LDS        {} of {} B", r.lds_bytes, r.lds_budget_bytes);
    println!(
        "  waves/SIMD {} by registers, {} with LDS",
        r.waves_per_simd, r.occupancy
    );
    let m = &r.mix;
    println!(
        "  kernel     {} instructions: mfma {}  ds {}  buffer {}  s_waitcnt {}  s_barrier {}",
        m.total, m.mfma, m.ds, m.buffer, m.s_waitcnt, m.s_barrier
    );
    match &r.hot_loop {
        Some(l) => {
            let m = &l.mix;
            println!(
                "  hot loop   {} ({} instructions): mfma {}  ds {}  buffer {}  s_waitcnt {}  s_barrier {}",
                l.label, m.total, m.mfma, m.ds, m.buffer, m.s_waitcnt, m.s_barrier
            );
        }
        None => println!("  hot loop   none (no backward branch)"),
    }
    println!(
        "  verdict    {}",
        if r.within_budget() {
            "no spills, LDS within budget"
        } else {
            "OVER BUDGET"
        }
    );
}

/// sm_90a goes through NVRTC in `kittens_runtime::cuda`; the kernel is the producer/consumer tile
/// program lowered by `kittens_codegen::cuda`.
fn run_cuda(args: &Args) -> Result<()> {
    match args.emit {
        Some(Emit::Cuda) => return emit(&cuda_lowered(&args.kernel)?.source),
        Some(Emit::Hip) => {
            bail!("--emit hip is for gfx942/gfx950; sm_90a lowers to CUDA (--emit cuda)")
        }
        Some(Emit::Asm) => {
            bail!("--emit asm is not supported for sm_90a (NVRTC gives a cubin, no listing)")
        }
        None => {}
    }
    let report = cuda_compile(&args.kernel)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&kittens_runtime::cuda::compile_report_json(&report))?
        );
    } else {
        println!(
            "{} for sm_90a — NVRTC {}",
            report.kernel, report.nvrtc_version
        );
        println!(
            "  registers {}  spill stores {}  spill loads {}  stack {} B",
            report.registers, report.spill_stores, report.spill_loads, report.stack_frame
        );
        println!(
            "  shared    {} B static + {} B dynamic",
            report.shared_bytes, report.dynamic_shared_bytes
        );
    }
    Ok(())
}

fn cuda_lowered(kernel: &str) -> Result<kittens_codegen::cuda::LoweredCuda> {
    if kernel != "gemm_bf16" {
        bail!("kernel `{kernel}` is not available for sm_90a yet (available: gemm_bf16)");
    }
    Ok(kittens_codegen::cuda::gemm_bf16_sm90()?)
}

/// Lower `kernel` for sm_90a and compile it with NVRTC; the report carries registers, spills and
/// shared memory as ptxas states them.
pub fn cuda_compile(kernel: &str) -> Result<kittens_runtime::cuda::CudaCompileReport> {
    let l = cuda_lowered(kernel)?;
    Ok(kittens_runtime::cuda::compile_report(
        &l.source,
        &l.name,
        "sm_90a",
        l.dynamic_shared_bytes,
    )?)
}
