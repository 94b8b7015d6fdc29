//! Every kernel lowered and compiled for every target with real compilers: the AMDGPU clang for gfx942
//! and gfx950, NVRTC for sm_90a. What a kernel cannot be lowered to yet is said, not hidden.

use super::Section;
use crate::cmd::compile;
use kittens_hw::{Arch, Target};
use kittens_kernels::registry::{self, KernelEntry, Status};
use kittens_runtime::amd;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// Install the compilers the demo needs into the project cache when they are missing (one time).
fn ensure_toolchains(s: &mut Section) -> anyhow::Result<()> {
    if amd::find_clang(Arch::Cdna4).is_err() {
        eprintln!("      installing PyPI ziglang (clang 22 for gfx942/gfx950) into the project cache, one time ...");
        amd::install_ziglang(&amd::cache_dir())?;
        s.line("installed ziglang into the project cache");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-nvrtc.sh");
    if script.is_file() && std::env::var_os("KITTENS_NVRTC").is_none() {
        eprintln!("      making sure NVRTC is in the project cache (scripts/install-nvrtc.sh) ...");
        let out = Command::new("bash").arg(&script).output()?;
        if !out.status.success() {
            s.line(format!(
                "NVRTC install failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

fn amd_line(kernel: &KernelEntry, arch: Arch) -> (String, Value) {
    match compile::amd_compile(kernel, arch) {
        Ok(c) => {
            let r = &c.report;
            let mfma = kittens_codegen::hip::bf16_mfma_opcode(arch).unwrap_or("?");
            let hot = r.hot_loop.as_ref().map(|l| l.mix.mfma).unwrap_or(0);
            let text = format!(
                "vgpr {:>3} agpr {} sgpr {:>3}  spills {}/{}  scratch {} B  LDS {:>6}/{} B  hot-loop MFMA {} ({})",
                r.vgpr, r.agpr, r.sgpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes, r.lds_bytes,
                r.lds_budget_bytes, hot, mfma
            );
            (text, c.json().unwrap_or(Value::Null))
        }
        Err(e) => (
            format!("not compiled: {e:#}"),
            json!({ "error": format!("{e:#}") }),
        ),
    }
}

fn cuda_line(kernel: &KernelEntry) -> (String, Value) {
    match compile::cuda_compile(kernel) {
        Ok(r) => (
            format!(
                "registers {}  spill stores/loads {}/{}  shared {} B dynamic  (NVRTC {})",
                r.registers, r.spill_stores, r.spill_loads, r.dynamic_shared_bytes, r.nvrtc_version
            ),
            kittens_runtime::cuda::compile_report_json(&r),
        ),
        Err(e) => (
            format!("not compiled: {e:#}"),
            json!({ "error": format!("{e:#}") }),
        ),
    }
}

pub fn run(s: &mut Section) -> anyhow::Result<Value> {
    ensure_toolchains(s)?;
    let mut out = Vec::new();
    for kernel in &registry::ALL {
        for target in [Target::Gfx942, Target::Gfx950, Target::Sm90a] {
            eprintln!("      {} -> {target}", kernel.name);
            let (text, doc) = match (target.arch(), kernel.plan(target).map(|p| p.status)) {
                (_, Some(Status::NotYet { why })) => {
                    (format!("not lowered yet: {why}"), json!({ "not_yet": why }))
                }
                (Some(arch), _) if arch.is_amd() => amd_line(kernel, arch),
                _ => cuda_line(kernel),
            };
            s.line(format!("{:<10} {:<7} {text}", kernel.name, target.name()));
            out.push(json!({ "kernel": kernel.name, "target": target, "report": doc }));
        }
    }
    Ok(Value::Array(out))
}
