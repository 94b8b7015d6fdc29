//! `kittens compile <kernel> --target gfx942|gfx950|sm_90a [--emit hip|cuda|asm] [--json]`: build a
//! registry kernel for a target, lower it, compile it with a real compiler and print what the compiler
//! produced. AMD figures come from the code object only: no AMD GPU exists here, so no speed.

use anyhow::{bail, Context, Result};
use kittens_codegen::Lowered;
use kittens_hw::{Arch, Language, Target};
use kittens_kernels::registry::KernelEntry;
use kittens_runtime::amd::{self, CodeObjectReport};

#[derive(clap::Args)]
pub struct Args {
    /// Kernel name, from the registry (`kittens list`); none with --kernel-file.
    #[arg(value_parser = super::kernel_file::kernel_arg, default_value = super::kernel_file::NONE_GIVEN, hide_default_value = true)]
    pub kernel: &'static KernelEntry,
    #[command(flatten)]
    pub file: super::kernel_file::KernelFile,
    /// Compiler target: gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X) or sm_90a (H100/H200).
    #[arg(long)]
    pub target: Target,
    /// A named variant of the kernel's configuration for the target instead of its default (the GEMMs'
    /// `interleave4`: the 4-wave interleave, HipKittens §3.3.2); `kittens list --json` lists them.
    #[arg(long, alias = "variant")]
    pub schedule: Option<String>,
    /// Print the generated source (hip, cuda) or the compiler's assembly (asm) instead of the report.
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,
    /// Print one JSON document on stdout (the report; not with --emit, whose text is no JSON).
    #[arg(long, conflicts_with = "emit")]
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    Hip,
    Cuda,
    Asm,
}

pub fn run(args: Args) -> Result<()> {
    let args = Args {
        kernel: args.file.resolve(args.kernel)?,
        ..args
    };
    match (args.target.language(), args.target.arch()) {
        (Language::Cuda, _) => run_cuda(&args),
        (Language::Hip, Some(arch)) => run_amd(&args, arch),
        _ => bail!(
            "`kittens compile` needs a GPU target; {} runs kernels with `kittens run`",
            args.target
        ),
    }
}

/// The registry kernel built for `target` (`KernelEntry::build_for`: on gfx942 gemm_bf16 stages the
/// next K step in registers, on gfx950 in LDS, on sm_90a it is the producer/consumer program) and
/// lowered (`kittens_codegen::lower`). A target the registry marks as not yet says so and why.
pub fn lowered(kernel: &KernelEntry, target: Target) -> Result<Lowered> {
    lowered_variant(kernel, target, None)
}

/// [`lowered`] of the kernel's variant `variant` (`KernelEntry::build_variant`; `None`: the default).
pub fn lowered_variant(
    kernel: &KernelEntry,
    target: Target,
    variant: Option<&str>,
) -> Result<Lowered> {
    Ok(kittens_runtime::kernel::lower_entry(
        kernel, target, variant,
    )?)
}

fn run_amd(args: &Args, arch: Arch) -> Result<()> {
    match args.emit {
        Some(Emit::Hip) => {
            return emit(
                &lowered_variant(args.kernel, args.target, args.schedule.as_deref())?.source,
            )
        }
        Some(Emit::Cuda) => {
            bail!(
                "--emit cuda is for --target sm_90a; {} lowers to HIP (--emit hip)",
                args.target
            )
        }
        Some(Emit::Asm) => {
            return emit(&amd_compile_variant(args.kernel, arch, args.schedule.as_deref())?.asm)
        }
        None => {}
    }
    let out = amd_compile_variant(args.kernel, arch, args.schedule.as_deref())?;
    // A variant is reported beside the target's default configuration (attn_fwd's `seed001` beside
    // the HipKittens-style ping-pong): both code objects from the same compiler.
    let default = match args.schedule {
        Some(_) => Some(amd_compile_variant(args.kernel, arch, None)?),
        None => None,
    };
    if args.json {
        let mut doc = out.json()?;
        if let Some(d) = &default {
            doc["default"] = d.json()?;
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        if let Some(g) = out.configured_for {
            println!(
                "configured for {} ({} B shared memory per block)",
                g.name, g.shared_bytes_per_block
            );
        }
        print_amd(&out.report, &out.version, out.code_object_bytes);
        if let (Some(d), Some(v)) = (&default, &args.schedule) {
            print_beside(v, &out.report, &d.report);
        }
    }
    Ok(())
}

/// One row of [`print_beside`]: a figure of a report as text.
type Figure<'a> = &'a dyn Fn(&CodeObjectReport) -> String;

/// The variant's figures beside the default configuration's.
fn print_beside(variant: &str, v: &CodeObjectReport, d: &CodeObjectReport) {
    let hot = |r: &CodeObjectReport, f: &dyn Fn(&kittens_runtime::amd::LoopReport) -> String| {
        r.hot_loop.as_ref().map_or("-".to_string(), f)
    };
    let rows: [(&str, Figure); 7] = [
        ("VGPR / AGPR", &|r| format!("{} / {}", r.vgpr, r.agpr)),
        ("spills VGPR / SGPR", &|r| {
            format!("{} / {}", r.vgpr_spill, r.sgpr_spill)
        }),
        ("LDS bytes", &|r| r.lds_bytes.to_string()),
        ("kernel instructions", &|r| r.mix.total.to_string()),
        ("hot-loop instructions", &|r| {
            hot(r, &|l| l.mix.total.to_string())
        }),
        ("hot-loop MFMAs", &|r| hot(r, &|l| l.mix.mfma.to_string())),
        ("MFMA share", &|r| {
            hot(r, &|l| format!("{:.1}%", 100.0 * l.mfma_share))
        }),
    ];
    println!("  {:<22} {:>14} {:>14}", "", variant, "default");
    for (name, f) in rows {
        println!("  {name:<22} {:>14} {:>14}", f(v), f(d));
    }
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
    /// The variant compiled, `None` for the target's default configuration.
    pub variant: Option<String>,
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
        doc["variant"] = self.variant.clone().into();
        Ok(doc)
    }
}

/// Lower `kernel` for `arch`, compile it with the AMDGPU clang and analyse the code object.
pub fn amd_compile(kernel: &KernelEntry, arch: Arch) -> Result<AmdCompiled> {
    amd_compile_variant(kernel, arch, None)
}

/// [`amd_compile`] of the kernel's variant `variant` (`None`: the target's default configuration).
pub fn amd_compile_variant(
    kernel: &KernelEntry,
    arch: Arch,
    variant: Option<&str>,
) -> Result<AmdCompiled> {
    let target = Target::from(arch);
    let l = lowered_variant(kernel, target, variant)?;
    let clang = amd::find_clang(arch)?;
    let version = clang.version().unwrap_or_else(|e| format!("unknown ({e})"));
    let compiled = clang
        .compile(&l.source, arch)
        .with_context(|| format!("compiling `{}` for {target}", kernel.name))?;
    let report = amd::analyze(&compiled.asm, arch, Some(&l.entry))?;
    Ok(AmdCompiled {
        report,
        code_object_bytes: compiled.code_object.len(),
        asm: compiled.asm,
        version,
        compiler_source: serde_json::to_value(clang.source)?,
        arch,
        configured_for: target.gpu(),
        variant: variant.map(str::to_string),
    })
}

/// Print emitted text; a closed pipe (`| head`) ends quietly, a full disk is an error (`crate::out`).
fn emit(text: &str) -> Result<()> {
    crate::out::write_str(text);
    Ok(())
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
            println!(
                "             mfma share {:.1}% of issued instructions, {} runs of MFMAs, longest {}",
                100.0 * l.mfma_share,
                l.mfma_runs,
                l.longest_mfma_run
            );
            println!("             MFMAs {}", hot_loop_mfmas(r));
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

/// sm_90a goes through NVRTC in `kittens_runtime::cuda`.
fn run_cuda(args: &Args) -> Result<()> {
    match args.emit {
        Some(Emit::Cuda) => {
            return emit(
                &lowered_variant(args.kernel, args.target, args.schedule.as_deref())?.source,
            )
        }
        Some(Emit::Hip) => {
            bail!("--emit hip is for gfx942/gfx950; sm_90a lowers to CUDA (--emit cuda)")
        }
        Some(Emit::Asm) => {
            bail!("--emit asm is not supported for sm_90a (NVRTC gives a cubin, no listing)")
        }
        None => {}
    }
    let report = cuda_compile_variant(args.kernel, args.schedule.as_deref())?;
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

/// Lower `kernel` for sm_90a and compile it with NVRTC; the report carries registers, spills and
/// shared memory as ptxas states them.
pub fn cuda_compile(kernel: &KernelEntry) -> Result<kittens_runtime::cuda::CudaCompileReport> {
    cuda_compile_variant(kernel, None)
}

/// [`cuda_compile`] of the kernel's variant `variant` (`None`: the target's default configuration).
pub fn cuda_compile_variant(
    kernel: &KernelEntry,
    variant: Option<&str>,
) -> Result<kittens_runtime::cuda::CudaCompileReport> {
    let l = lowered_variant(kernel, Target::Sm90a, variant)?;
    Ok(kittens_runtime::cuda::compile_report(
        &l.source,
        &l.entry,
        l.target.name(),
        l.dynamic_shared_bytes(),
    )?)
}

/// The hot loop's MFMAs as the code object has them, for one-line summaries (the demo's): their
/// count and opcodes, e.g. `32 (v_mfma_f32_16x16x128_f8f6f4)`; `0 (no MFMA)` for a loop without
/// any and `- (no loop)` without a hot loop. Read from the report, never from the target's default
/// instruction: gemm_fp8's loop issues fp8 MFMAs, layernorm's none.
pub fn hot_loop_mfmas(r: &CodeObjectReport) -> String {
    let Some(l) = &r.hot_loop else {
        return "- (no loop)".into();
    };
    let ops: Vec<(&String, &u32)> = l
        .mix
        .opcodes
        .iter()
        .filter(|(op, _)| op.starts_with("v_mfma"))
        .collect();
    match ops.as_slice() {
        [] => format!("{} (no MFMA)", l.mix.mfma),
        [(op, _)] => format!("{} ({op})", l.mix.mfma),
        many => {
            let each: Vec<String> = many.iter().map(|(op, n)| format!("{n} {op}")).collect();
            format!("{} ({})", l.mix.mfma, each.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_runtime::amd::{InstructionMix, LoopReport};

    fn report(opcodes: &[(&str, u32)]) -> CodeObjectReport {
        let mut mix = InstructionMix::default();
        for &(op, n) in opcodes {
            mix.total += n;
            if op.starts_with("v_mfma") {
                mix.mfma += n;
            }
            mix.opcodes.insert(op.to_string(), n);
        }
        let hot_loop = Some(LoopReport {
            label: ".LBB0_1".into(),
            mix,
            mfma_share: 0.0,
            longest_mfma_run: 0,
            mfma_runs: 0,
        });
        CodeObjectReport {
            kernel: "k".into(),
            target: "gfx950".into(),
            vgpr: 0,
            agpr: 0,
            unified_vgpr: 0,
            sgpr: 0,
            vgpr_spill: 0,
            sgpr_spill: 0,
            scratch_bytes: 0,
            lds_bytes: 0,
            lds_budget_bytes: 0,
            waves_per_simd: 0,
            occupancy: 0,
            instructions: Default::default(),
            mix: InstructionMix::default(),
            hot_loop,
        }
    }

    #[test]
    fn hot_loop_mfmas_names_the_loops_own_instructions() {
        let fp8 = report(&[("v_mfma_f32_16x16x128_f8f6f4", 32), ("ds_read_b128", 8)]);
        assert_eq!(hot_loop_mfmas(&fp8), "32 (v_mfma_f32_16x16x128_f8f6f4)");
        let norm = report(&[("v_add_f32", 40)]);
        assert_eq!(hot_loop_mfmas(&norm), "0 (no MFMA)");
        let mixed = report(&[
            ("v_mfma_f32_16x16x32_bf16", 16),
            ("v_mfma_f32_32x32x16_bf16", 8),
        ]);
        assert_eq!(
            hot_loop_mfmas(&mixed),
            "24 (16 v_mfma_f32_16x16x32_bf16, 8 v_mfma_f32_32x32x16_bf16)"
        );
    }
}
