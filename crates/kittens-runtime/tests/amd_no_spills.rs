//! Every registry kernel that lowers to an AMD target, in its default configuration and in each named
//! variant listed for that target (the GEMMs' `interleave4`, the attention's `causal` kernel), compiles
//! with no spills and no scratch: with the AMDGPU clang for gfx950 and gfx942, and with Debian's
//! clang-19 for gfx942. gfx942's causal attention held the work-item id across its key loop and
//! spilled it (one VGPR, 8 bytes of scratch) until the lane index came from `v_mbcnt`.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::Lowered;
use kittens_hw::{Arch, Target};
use kittens_runtime::amd::{analyze, AmdgpuClang};
use std::sync::OnceLock;

/// `(kernel, target, variant)` of every AMD configuration the registry builds, with its build lowered
/// for the target: built and lowered once for both tests (both are pure functions of the
/// configuration; only the compiler differs between the tests).
type Configuration = (&'static str, Target, Option<&'static str>, Lowered);

fn configurations() -> &'static [Configuration] {
    static ALL: OnceLock<Vec<Configuration>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut out = Vec::new();
        for e in kittens_kernels::registry::ALL.iter() {
            for t in [Target::Gfx950, Target::Gfx942] {
                let Ok(k) = e.build_for(t) else {
                    continue;
                };
                out.push((e.name, t, None, kittens_codegen::lower(&k, t).unwrap()));
                for v in e.variants.iter().filter(|v| v.targets.contains(&t)) {
                    let k = e
                        .build_variant(t, Some(v.name))
                        .unwrap_or_else(|err| panic!("{} {t} {}: {err}", e.name, v.name));
                    out.push((
                        e.name,
                        t,
                        Some(v.name),
                        kittens_codegen::lower(&k, t).unwrap(),
                    ));
                }
            }
        }
        out
    })
}

fn assert_no_spills(clang: &AmdgpuClang, c: &Configuration) {
    let (kernel, t, variant, lowered) = c;
    let (t, variant) = (*t, *variant);
    let arch = t.arch().unwrap();
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
    let names: Vec<_> = all.iter().map(|(n, t, v, _)| (*n, *t, *v)).collect();
    // Six kernels on both targets, the GEMMs' gfx950 interleave, the causal attention on both.
    assert!(all.len() >= 16, "{names:?}");
    assert!(names.contains(&("attn_fwd", Target::Gfx942, Some("causal"))));
    for c in all {
        assert_no_spills(&clang_for(c.1.arch().unwrap()), c);
    }
}

#[test]
fn every_gfx942_configuration_compiles_without_spills_with_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    for c in configurations() {
        if c.1.arch() == Some(Arch::Cdna3) {
            assert_no_spills(&clang, c);
        }
    }
}
