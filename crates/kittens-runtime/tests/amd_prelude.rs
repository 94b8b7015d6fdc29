//! The HIP prelude compiles for gfx942 and gfx950 and every wrapper reaches the assembly: each
//! opcode in `kittens_codegen::hip::WRAPPED_OPCODES` for the target, the LDS forms of the
//! buffer loads, AGPR operands on MFMAs, and the scheduling hints.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, printer_comment};
use kittens_codegen::hip::{builtin_kernel_source, translation_unit, wrapped_opcodes};
use kittens_hw::Arch;
use kittens_runtime::amd::{analyze, AmdError};

fn smoke(arch: Arch) -> String {
    let src = builtin_kernel_source("prelude_smoke", arch).expect("prelude_smoke is built in");
    clang_for(arch)
        .compile_to_asm(&src, arch)
        .expect("prelude_smoke compiles")
}

fn check_every_wrapper(arch: Arch) {
    let asm = smoke(arch);
    let report = analyze(&asm, arch, Some("prelude_smoke")).expect("analysis");
    for op in wrapped_opcodes(arch) {
        assert!(
            report.instructions.get(op).copied().unwrap_or(0) > 0,
            "{op} missing for {}",
            arch.target()
        );
    }
    let insts: Vec<&str> = asm.lines().map(str::trim).collect();
    let has = |pred: &dyn Fn(&str) -> bool| insts.iter().any(|l| pred(l));
    assert!(
        has(&|l| l.starts_with("buffer_load_dword ") && l.ends_with(" lds")),
        "dword load into LDS"
    );
    if arch == Arch::Cdna4 {
        assert!(
            has(&|l| l.starts_with("buffer_load_dwordx4 ") && l.ends_with(" lds")),
            "dwordx4 load into LDS"
        );
    }
    // AGPRs as accumulator (destination) and as A/B sources.
    assert!(has(&|l| l.starts_with("v_mfma")
        && l.split_whitespace()
            .nth(1)
            .is_some_and(|d| d.starts_with('a'))));
    assert!(has(
        &|l| l.starts_with("v_mfma") && l.split(", ").nth(1).is_some_and(|a| a.starts_with('a'))
    ));
    // The zero-accumulator form feeds a literal 0 as C.
    assert!(has(&|l| l.starts_with("v_mfma") && l.ends_with(", 0")));
    assert!(has(&|l| l.starts_with("; sched_barrier mask(0x00000000)")));
    assert!(has(&|l| l.starts_with(
        "; sched_group_barrier mask(0x00000008) size(1) SyncID(0)"
    )));
    assert!(report.instructions.get("s_setprio").copied().unwrap_or(0) >= 2);
    assert!(report.instructions.get("s_barrier").copied().unwrap_or(0) >= 2);
    assert_eq!(
        (report.vgpr_spill, report.sgpr_spill, report.scratch_bytes),
        (0, 0, 0)
    );
    // The metadata reading agrees with the asm printer's own summary.
    assert_eq!(report.agpr, printer_comment(&asm, "NumAgprs"));
    assert_eq!(report.unified_vgpr, printer_comment(&asm, "TotalNumVgprs"));
    assert_eq!(
        report.vgpr,
        printer_comment(&asm, "NumVgprs").div_ceil(4) * 4
    );
    assert_eq!(report.sgpr, printer_comment(&asm, "TotalNumSgprs"));
    assert_eq!(report.lds_bytes, printer_comment(&asm, "LDSByteSize"));
    assert_eq!(report.lds_bytes, 16384, "smem is 1024 x 16 bytes");
    // Registers and LDS limits agree with the compiler's occupancy: on gfx942 the 16 KiB workgroups fit
    // 4 times in 64 KiB, so LDS binds there; on gfx950 (160 KiB) the registers do.
    assert_eq!(report.occupancy, printer_comment(&asm, "Occupancy"));
    let lds_limit = if arch == Arch::Cdna3 { 4 } else { 10 };
    assert_eq!(report.occupancy, report.waves_per_simd.min(lds_limit));
}

#[test]
fn every_wrapper_reaches_gfx942_assembly() {
    check_every_wrapper(Arch::Cdna3);
}

#[test]
fn every_wrapper_reaches_gfx950_assembly() {
    check_every_wrapper(Arch::Cdna4);
}

/// Target guards: a CDNA3-only wrapper does not exist on gfx950, and a CDNA4-only one not on gfx942.
#[test]
fn target_only_wrappers_are_absent_elsewhere() {
    let body = |call: &str| {
        translation_unit(&format!(
            "using namespace kittens;\nextern \"C\" __global__ void k(f32x4* o, f32x2 x, u32 a) {{ {call} }}"
        ))
    };
    let xf32 = body("f32x4 c = mfma_f32_16x16x8_xf32_zero(x, x); *o = c;");
    let tr = body("u32x2 r = ds_read_b64_tr_b16<0>(a); o->x = r.x;");
    assert!(clang_for(Arch::Cdna3)
        .compile_to_asm(&xf32, Arch::Cdna3)
        .is_ok());
    assert!(clang_for(Arch::Cdna4)
        .compile_to_asm(&tr, Arch::Cdna4)
        .is_ok());
    for (src, arch) in [(&xf32, Arch::Cdna4), (&tr, Arch::Cdna3)] {
        match clang_for(arch).compile_to_asm(src, arch) {
            Err(AmdError::ToolFailed { stderr, .. }) => {
                assert!(stderr.contains("undeclared identifier"), "{stderr}")
            }
            other => panic!(
                "expected a compile error for {}, got {other:?}",
                arch.target()
            ),
        }
    }
}
