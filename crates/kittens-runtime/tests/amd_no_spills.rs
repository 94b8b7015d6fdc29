//! Every registry kernel that lowers to an AMD target, in its default configuration and in each named
//! variant listed for that target (the GEMMs' `interleave4`, the attention's `causal` kernel), compiles
//! with no spills and no scratch: with the AMDGPU clang for gfx950 and gfx942, and with Debian's
//! clang-19 for gfx942. gfx942's causal attention held the work-item id across its key loop and
//! spilled it (one VGPR, 8 bytes of scratch) until the lane index came from `v_mbcnt`.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_hw::{Arch, Target};
use kittens_runtime::amd::{analyze, AmdgpuClang};

/// `(kernel, target, variant)` of every AMD configuration the registry builds.
fn configurations() -> Vec<(&'static str, Target, Option<&'static str>)> {
    let mut out = Vec::new();
    for e in kittens_kernels::registry::ALL.iter() {
        for t in [Target::Gfx950, Target::Gfx942] {
            if e.build_for(t).is_err() {
                continue;
            }
            out.push((e.name, t, None));
            for v in e.variants.iter().filter(|v| v.targets.contains(&t)) {
                out.push((e.name, t, Some(v.name)));
            }
        }
    }
    out
}

fn assert_no_spills(clang: &AmdgpuClang, kernel: &str, t: Target, variant: Option<&str>) {
    let arch = t.arch().unwrap();
    let entry = kittens_kernels::by_name(kernel).unwrap();
    let k = entry.build_variant(t, variant).unwrap();
    let lowered = kittens_codegen::lower(&k, t).unwrap();
    let out = clang
        .compile(&lowered.source, arch)
        .unwrap_or_else(|e| panic!("{kernel} {t} {variant:?}: {e}"));
    let r = analyze(&out.asm, arch, Some(&lowered.entry)).unwrap();
    eprintln!(
        "{kernel} {t} {variant:?}: {} VGPR + {} AGPR, spills {}/{}, scratch {}",
        r.vgpr, r.agpr, r.vgpr_spill, r.sgpr_spill, r.scratch_bytes
    );
    assert_eq!(
        (r.vgpr_spill, r.sgpr_spill, r.scratch_bytes),
        (0, 0, 0),
        "{kernel} {t} {variant:?}"
    );
    assert!(r.within_budget(), "{kernel} {t} {variant:?}: {r:?}");
}

#[test]
fn every_amd_configuration_compiles_without_spills() {
    let all = configurations();
    // Six kernels on both targets, the GEMMs' gfx950 interleave, the causal attention on both.
    assert!(all.len() >= 16, "{all:?}");
    assert!(all.contains(&("attn_fwd", Target::Gfx942, Some("causal"))));
    for (kernel, t, variant) in all {
        assert_no_spills(&clang_for(t.arch().unwrap()), kernel, t, variant);
    }
}

#[test]
fn every_gfx942_configuration_compiles_without_spills_with_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    for (kernel, t, variant) in configurations() {
        if t.arch() == Some(Arch::Cdna3) {
            assert_no_spills(&clang, kernel, t, variant);
        }
    }
}
