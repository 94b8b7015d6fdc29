//! `cross_entropy` on the GPU targets: every configuration the registry builds (bf16 logits, the
//! `f32` variant, and label smoothing) compiles on gfx942 and gfx950 with zero spills (gfx942 also
//! with Debian's clang-19) and on sm_90a through NVRTC with zero spills; the lowered HIP on the host
//! emulation and the code objects on the ISA emulator pass the test rule against the f64 reference
//! at odd shapes (a vocabulary shorter than one block step, one that is odd, one that takes several
//! steps).

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "cuda_support/common.rs"]
mod cuda_common;

use amd_common::{assert_compiles_without_spills, clang_for};
use kittens_hw::Target;
use kittens_kernels::cross_entropy::problem::CrossEntropyOptions;
use kittens_kernels::cross_entropy::problem::CrossEntropyProblem;
use kittens_kernels::cross_entropy::{build, CrossEntropyConfig};
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{run, Backend, HipEmu, IsaEmu};

const AMD: [Target; 2] = [Target::Gfx950, Target::Gfx942];

/// The registry's default, its `f32` variant, and both with label smoothing.
fn builds(t: Target) -> Vec<(String, kittens_ir::Kernel)> {
    let e = kittens_kernels::by_name("cross_entropy").unwrap();
    let gpu = t.gpu().unwrap();
    let mut v = vec![
        ("default".to_string(), e.build_for(t).unwrap()),
        ("f32".to_string(), e.build_variant(t, Some("f32")).unwrap()),
    ];
    for f32_logits in [false, true] {
        let cfg = CrossEntropyConfig::for_gpu(gpu, f32_logits, 0.1);
        v.push((format!("smoothed f32={f32_logits}"), build(&cfg).unwrap()));
    }
    v
}

#[test]
fn amd_builds_compile_without_spills() {
    for t in AMD {
        for (label, k) in builds(t) {
            assert_compiles_without_spills(&k, t, &label);
        }
    }
}

#[test]
fn sm90a_builds_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    for (label, k) in builds(Target::Sm90a) {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap();
        let image =
            kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
                .unwrap_or_else(|err| panic!("{label}: {err}"));
        eprintln!("{label} sm_90a: {:?}", image.report);
        assert_eq!(image.report.spill_stores, 0, "{label}: {:?}", image.report);
        assert!(!image.cubin.is_empty(), "{label}");
    }
}

/// `(rows, vocab, pitch, smoothing, f32 logits)`: AMD's block step is 8192 columns; an odd vocabulary
/// padded to a pitch of a multiple of 8 (as the fused loss pads it).
const CASES: [(usize, usize, Option<usize>, f32, bool); 4] = [
    (7, 1000, None, 0.0, false),
    (5, 20011, None, 0.1, false),
    (3, 9001, None, 0.0, true),
    (6, 20011, Some(20016), 0.0, false),
];

fn run_all(backend: &dyn Backend) {
    for (rows, vocab, pitch, smoothing, f32_logits) in CASES {
        let p = CrossEntropyProblem {
            rows,
            vocab,
            pitch,
            options: CrossEntropyOptions {
                smoothing,
                f32_logits,
            },
            run: RunSettings {
                seed: 23 + rows as u64,
                input_scale: 12.0,
                ..RunSettings::default()
            },
        };
        let e = kittens_kernels::by_name("cross_entropy").unwrap();
        let r = run(e, &p, backend).unwrap_or_else(|e| panic!("{}: {e}", backend.about().name));
        for o in &r.outputs {
            eprintln!(
                "{} {} {}: {} rel_err {:.3e}",
                backend.about().name,
                r.target,
                r.shape,
                o.name,
                o.error.rel_err
            );
        }
        assert!(r.passed, "{} {}: {:?}", r.target, r.shape, r.failures());
        assert!(r.error.rel_err > 0.0, "the rounding must show");
    }
}

#[test]
fn the_host_emulation_matches_the_reference() {
    for t in AMD {
        run_all(&HipEmu::new(t).unwrap());
    }
}

#[test]
fn the_code_objects_match_the_reference_on_the_isa_emulator() {
    for t in AMD {
        clang_for(t.gpu().unwrap().arch);
        run_all(&IsaEmu::new(t).unwrap());
    }
}
