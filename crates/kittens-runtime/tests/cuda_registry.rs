//! Every kernel the registry lists for sm_90a, lowered through the one function
//! (`kittens_runtime::kernel::lower_entry`) and compiled by NVRTC without spills; its arguments are
//! exactly the tile program's globals and parameters, so the generic launch can pack them. NVRTC runs
//! without a GPU.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::ensure_nvrtc;
use kittens_codegen::KernelArg;
use kittens_hw::Target;
use kittens_runtime::kernel::lower_entry;

#[test]
fn every_sm90a_registry_kernel_compiles_through_the_one_function() {
    ensure_nvrtc();
    let mut seen = Vec::new();
    for e in &kittens_kernels::registry::ALL {
        if !e.targets.iter().any(|t| t.target == Target::Sm90a) {
            continue;
        }
        // A kernel the registry marks not yet for sm_90a: its refusal names why.
        if !e.plan(Target::Sm90a).is_some_and(|p| p.status.available()) {
            let err = lower_entry(e, Target::Sm90a, None)
                .err()
                .unwrap_or_else(|| panic!("{}: marked not yet, but it lowers", e.name));
            assert!(
                err.to_string().contains("sm_90a") || err.to_string().contains("sm90"),
                "{err}"
            );
            continue;
        }
        let l = lower_entry(e, Target::Sm90a, None).unwrap_or_else(|err| panic!("{err}"));
        let image =
            kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
                .unwrap_or_else(|err| panic!("{}: {err}", e.name));
        assert_eq!(
            image.report.spill_stores, 0,
            "{}: {:?}",
            e.name, image.report
        );
        assert!(!image.cubin.is_empty(), "{}", e.name);
        eprintln!(
            "{}: {} registers, {} B shared",
            e.name, image.report.registers, image.report.shared_bytes
        );
        // Every argument names a declared global or parameter, and every global is reached (by
        // address or through a tensor map).
        for a in &l.args {
            match a {
                KernelArg::Global { name } => {
                    assert!(l.ir.globals.iter().any(|g| &g.name == name), "{name}")
                }
                KernelArg::Param { name } => {
                    assert!(l.ir.params.iter().any(|p| &p.name == name), "{name}")
                }
                KernelArg::TensorMap(t) => assert!((t.global as usize) < l.ir.globals.len()),
            }
        }
        for (i, g) in l.ir.globals.iter().enumerate() {
            let reached = l.args.iter().any(|a| match a {
                KernelArg::Global { name } => name == &g.name,
                KernelArg::TensorMap(t) => t.global as usize == i,
                KernelArg::Param { .. } => false,
            });
            assert!(reached, "{}: tensor `{}` is never passed", e.name, g.name);
        }
        seen.push(e.name);
    }
    assert_eq!(
        seen,
        [
            "gemm_bf16",
            "gemm_fp8",
            "attn_fwd",
            "attn_bwd",
            "layernorm",
            "layernorm_bwd",
            "rotary",
            "rmsnorm",
            "rmsnorm_bwd",
            "swiglu",
            "swiglu_bwd",
            "rotary_bwd",
            "cross_entropy",
            "attn_varlen",
            "attn_varlen_bwd",
            "attn_paged"
        ]
    );
}

/// A variant or target the registry does not have is a typed error that names it.
#[test]
fn unknown_variants_and_targets_are_refused_by_name() {
    let e = kittens_kernels::by_name("gemm_bf16").unwrap();
    let err = lower_entry(e, Target::Sm90a, Some("nonesuch"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nonesuch"), "{err}");
    let err = lower_entry(e, Target::Cpu, None).unwrap_err().to_string();
    assert!(err.contains("cpu") || err.contains("interpreter"), "{err}");
}
