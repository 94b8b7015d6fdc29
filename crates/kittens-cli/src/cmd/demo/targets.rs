//! Every kernel lowered and compiled for every target with real compilers: the AMDGPU clang for gfx942
//! and gfx950, NVRTC for sm_90a. What a kernel cannot be lowered to yet is said, not hidden.

use super::Section;
use crate::cmd::compile;
use kittens_hw::{Arch, Target};
use kittens_kernels::registry::{self, KernelEntry, Status};
use kittens_runtime::amd;
use serde_json::{json, Value};

/// Says which install script provides each compiler the demo cannot find. The demo runs no script
/// itself: `scripts/demo.sh` installs the toolchains into the user's cache before it starts the demo.
fn check_toolchains(s: &mut Section) {
    if let Err(e) = amd::find_clang(Arch::Cdna4) {
        s.line(format!(
            "{e} [scripts/install-amdgpu-clang.sh installs it; bash scripts/demo.sh runs it first]"
        ));
    }
    if let Err(e) = kittens_runtime::cuda::nvrtc() {
        s.line(format!(
            "{e} [scripts/install-nvrtc.sh installs it; bash scripts/demo.sh runs it first]"
        ));
    }
}

fn amd_line(kernel: &KernelEntry, arch: Arch) -> (String, Value) {
    match compile::amd_compile(kernel, arch) {
        Ok(c) => {
            let r = &c.report;
            // The hot loop's own MFMA opcodes (gemm_fp8's f8f6f4, none for the strip kernels), not
            // the target's bf16 default.
            let text = format!(
                "vgpr {:>3} agpr {} sgpr {:>3}  spills {}/{}  scratch {} B  LDS {:>6}/{} B  hot-loop MFMA {}",
                r.vgpr, r.agpr, r.sgpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes, r.lds_bytes,
                r.lds_budget_bytes, compile::hot_loop_mfmas(r)
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
    check_toolchains(s);
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
