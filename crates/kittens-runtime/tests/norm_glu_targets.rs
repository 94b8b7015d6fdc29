//! `rmsnorm`, `rmsnorm_bwd`, `swiglu`, `swiglu_bwd` (and `rotary_bwd`, `layernorm_bwd`) on the GPU targets, every configuration the
//! registry builds (the defaults and the variants: the backward's `dweight` launch, SwiGLU's packed
//! form): gfx942 and gfx950 compile with zero spills (gfx942 also with Debian's clang-19), sm_90a
//! through NVRTC with zero spills; the lowered HIP on the host emulation and the code objects on the
//! ISA emulator match the f64 references at odd shapes, every launch of a run (the backward's two)
//! included.

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;

use amd_common::{assert_compiles_without_spills, clang_for};
use kittens_hw::Target;
use kittens_kernels::problem::{NamedArgs, RunSettings};
use kittens_kernels::registry::KernelEntry;
use kittens_kernels::rotary::problem::{RotaryBwdProblem, RotaryProblem};
use kittens_kernels::rows::{RowLoop, RowStrides};
use kittens_kernels::{layernorm, rmsnorm, swiglu};
use kittens_runtime::runner::{run, Backend, HipEmu, IsaEmu};

const NAMES: [&str; 6] = [
    "rmsnorm",
    "rmsnorm_bwd",
    "swiglu",
    "swiglu_bwd",
    "rotary_bwd",
    "layernorm_bwd",
];
const AMD: [Target; 2] = [Target::Gfx950, Target::Gfx942];

fn entry(name: &str) -> &'static KernelEntry {
    kittens_kernels::by_name(name).unwrap()
}

/// The default and every variant the entry lists for `t`, as `(label, kernel)`; for the norms also
/// the row lengths that change the split (one wave per row at 768 on AMD; 8 and 16 waves; 16 values
/// per lane at 8192 on NVIDIA) and the backward's second launch at each.
fn builds(e: &KernelEntry, t: Target) -> Vec<(String, kittens_ir::Kernel)> {
    let mut v = vec![("default".to_string(), e.build_for(t).unwrap())];
    for var in e.variants.iter().filter(|v| v.targets.contains(&t)) {
        v.push((
            var.name.to_string(),
            e.build_variant(t, Some(var.name)).unwrap(),
        ));
    }
    let gpu = t.gpu().unwrap();
    for dim in [768, 3080, 5128, 8192] {
        let cfg = |residual| rmsnorm::RmsNormConfig::for_gpu(gpu, dim, residual);
        let lp = RowLoop::for_target(t, cfg(true).waves);
        let label = |what: &str| format!("D{dim} {what}");
        match e.name {
            "rmsnorm" => {
                v.push((label("residual"), rmsnorm::build(&cfg(true)).unwrap()));
                v.push((label("plain"), rmsnorm::build(&cfg(false)).unwrap()));
                let strided = rmsnorm::RmsNormConfig {
                    strides: RowStrides::default()
                        .with("x", dim + 256)
                        .with("residual", 3 * dim),
                    ..cfg(true)
                };
                v.push((label("strided"), rmsnorm::build(&strided).unwrap()));
            }
            "rmsnorm_bwd" => {
                v.push((
                    label("residual"),
                    rmsnorm::build_bwd(&cfg(true), &lp).unwrap(),
                ));
                v.push((
                    label("plain"),
                    rmsnorm::build_bwd(&cfg(false), &lp).unwrap(),
                ));
                let strided = rmsnorm::RmsNormConfig {
                    strides: RowStrides::default()
                        .with("dy", dim + 8)
                        .with("r", 2 * dim)
                        .with("dresidual_out", dim + 64),
                    ..cfg(true)
                };
                v.push((label("strided"), rmsnorm::build_bwd(&strided, &lp).unwrap()));
                v.push((
                    label("dweight"),
                    rmsnorm::build_dweight(&cfg(true), &lp).unwrap(),
                ));
            }
            // At 5128 and 8192 a 32-lane wave walks its share of a row in two chunks.
            "layernorm_bwd" => {
                let cfg = |p| layernorm::LayerNormConfig::for_gpu(gpu, dim, p);
                for p in [0.0, 0.1] {
                    if gpu.wave_width == 32 && p > 0.0 && dim > 4096 {
                        continue;
                    }
                    let k = layernorm::bwd::build_bwd(&cfg(p), &lp).unwrap();
                    v.push((label(&format!("p={p}")), k));
                    // From the forward's h (`LayerNormConfig::from_h`), and on 32 lanes as its
                    // default walks the rows from D 4096 (one barrier a row, two rows staged).
                    let h = layernorm::LayerNormConfig {
                        from_h: true,
                        ..cfg(p)
                    };
                    let k = layernorm::bwd::build_bwd(&h, &lp).unwrap();
                    v.push((label(&format!("from_h p={p}")), k));
                    if gpu.wave_width == 32 {
                        let staged = RowLoop {
                            one_sum: true,
                            stage: 2,
                            index32: true,
                            ..lp
                        };
                        let k = layernorm::bwd::build_bwd(&h, &staged).unwrap();
                        v.push((label(&format!("from_h staged p={p}")), k));
                    }
                }
                let k = layernorm::bwd::build_dweight(&cfg(0.0), &lp).unwrap();
                v.push((label("dweight"), k));
            }
            _ => {}
        }
    }
    // rotary_bwd's dy sliced out of a fused QKV projection (3 heads of 128 per position).
    if e.name == "rotary_bwd" {
        let cfg = kittens_kernels::rotary::RotaryConfig {
            inverse: true,
            x_strides: Some([64 * 3 * 8 * 128, 128, 3 * 8 * 128]),
            ..kittens_kernels::rotary::RotaryConfig::new(
                128,
                kittens_kernels::attn::AttnLayout::Bshd,
                false,
            )
        };
        let k = kittens_kernels::rotary::build(&cfg).unwrap();
        v.push(("D128 strided".to_string(), k));
    }
    // SwiGLU's inputs in row strides: split (gate a slice of wider rows) and packed (a slice of a
    // wider fused projection).
    if matches!(e.name, "swiglu" | "swiglu_bwd") {
        let f = 2824;
        for packed in [false, true] {
            let strides = RowStrides::default()
                .with("gate", f + 8)
                .with("up", 2 * f)
                .with("x", 2 * f + 256)
                .with("dy", f + 64);
            let cfg = swiglu::SwigluConfig {
                strides,
                ..swiglu::SwigluConfig::for_gpu(gpu, f, packed)
            };
            let k = match e.name {
                "swiglu" => swiglu::build(&cfg),
                _ => swiglu::build_bwd(&cfg),
            };
            v.push((format!("F{f} strided packed={packed}"), k.unwrap()));
        }
    }
    v
}

#[test]
fn amd_builds_compile_without_spills() {
    let mut cases = Vec::new();
    for name in NAMES {
        for t in AMD {
            clang_for(t.arch().unwrap()); // installed (if missing) once, before the threads
            for (label, k) in builds(entry(name), t) {
                cases.push((k, t, format!("{name} {label}")));
            }
        }
    }
    parallel::each(cases, |(k, t, label)| {
        assert_compiles_without_spills(&k, t, &label)
    });
}

#[test]
fn sm90a_builds_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    let mut cases = Vec::new();
    for name in NAMES {
        for (label, k) in builds(entry(name), Target::Sm90a) {
            cases.push((name, label, k));
        }
    }
    parallel::each(cases, |(name, label, k)| {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap();
        let image =
            kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
                .unwrap_or_else(|err| panic!("{name} {label}: {err}"));
        eprintln!("{name} {label} sm_90a: {:?}", image.report);
        assert_eq!(
            image.report.spill_stores, 0,
            "{name} {label}: {:?}",
            image.report
        );
        assert!(!image.cubin.is_empty(), "{name} {label}");
    });
}

/// Odd shapes for the runs on an emulator: `(rows, D or F, residual, packed)`. On the AMD targets
/// (64 lanes) D = 1000 and 776 put two rows in a block (and the backward's scratch two rows per
/// block), D = 3080 splits a row over 8 waves. The layernorm's backward runs with the default 10%
/// dropout (the mask drawn again on the device).
const CASES: [(&str, usize, usize, bool, bool); 10] = [
    ("rmsnorm", 37, 1000, true, false),
    ("rmsnorm", 5, 3080, false, false),
    ("rmsnorm_bwd", 37, 1000, true, false),
    ("rmsnorm_bwd", 21, 3080, false, false),
    ("swiglu", 7, 1000, false, false),
    ("swiglu", 3, 2824, false, true),
    ("swiglu_bwd", 7, 1000, false, true),
    ("swiglu_bwd", 3, 2824, false, false),
    ("layernorm_bwd", 37, 1000, false, false),
    ("layernorm_bwd", 21, 3080, false, false),
];

/// The row-wise kernel `name`'s problem at `rows` rows of `dim` (`residual` for the RMSNorms,
/// `packed` for the SwiGLUs).
fn problem(
    name: &str,
    rows: usize,
    dim: usize,
    residual: bool,
    packed: bool,
) -> Box<dyn kittens_kernels::problem::KernelProblem> {
    let mut a = NamedArgs::new()
        .with("rows", rows)
        .with("norm_dim", dim)
        .with("seed", 17 + rows as u64)
        .with("input_scale", 4.0f32);
    if name.starts_with("rmsnorm") {
        a.set("residual", residual);
    }
    if name.starts_with("swiglu") {
        a.set("packed", packed);
    }
    entry(name).problem(&a).unwrap()
}

fn run_all(backend: &dyn Backend, cases: &[(&str, usize, usize, bool, bool)]) {
    for &(name, rows, dim, residual, packed) in cases {
        let p = problem(name, rows, dim, residual, packed);
        let r = run(entry(name), p.as_ref(), backend)
            .unwrap_or_else(|e| panic!("{name} {}: {e}", backend.about().name));
        for o in &r.outputs {
            eprintln!(
                "{name} {} {} {}: {} rel_err {:.3e}",
                backend.about().name,
                r.target,
                r.shape,
                o.name,
                o.error.rel_err
            );
        }
        assert!(r.passed, "{name} {}: {:?}", r.target, r.failures());
        assert!(r.error.rel_err > 0.0, "{name}: bf16 rounding must show");
    }
}

#[test]
fn the_host_emulation_matches_the_reference() {
    for t in AMD {
        run_all(&HipEmu::new(t).unwrap(), &CASES);
    }
}

#[test]
fn the_code_objects_match_the_reference_on_the_isa_emulator() {
    for t in AMD {
        clang_for(t.gpu().unwrap().arch);
        run_all(&IsaEmu::new(t).unwrap(), &CASES);
    }
}

/// Inputs in row strides past the row (`x[:, :D]` of wider tensors) on the host emulation and the
/// ISA emulator of gfx942: the AMD lowering's index arithmetic takes the strides as NVIDIA's does.
#[test]
fn strided_rows_on_the_amd_emulators() {
    let t = Target::Gfx942;
    clang_for(t.gpu().unwrap().arch);
    let backends: [Box<dyn Backend>; 2] = [
        Box::new(HipEmu::new(t).unwrap()),
        Box::new(IsaEmu::new(t).unwrap()),
    ];
    let cases: [(&str, &[(&str, usize)]); 2] = [
        ("rmsnorm", &[("x", 1024), ("residual", 1096)]),
        (
            "rmsnorm_bwd",
            &[("dy", 1096), ("r", 1024), ("dresidual_out", 2000)],
        ),
    ];
    for backend in &backends {
        for (name, strides) in cases {
            let a = strides.iter().fold(
                NamedArgs::new()
                    .with("rows", 37usize)
                    .with("norm_dim", 1000usize)
                    .with("seed", 5u64)
                    .with("input_scale", 4.0f32),
                |a, &(n, s)| a.with(&format!("{n}_row_stride"), s),
            );
            let p = entry(name).problem(&a).unwrap();
            let r = run(entry(name), p.as_ref(), backend.as_ref())
                .unwrap_or_else(|e| panic!("{name} {}: {e}", backend.about().name));
            eprintln!(
                "{name} strided {}: rel_err {:.3e}",
                backend.about().name,
                r.error.rel_err
            );
            assert!(r.passed, "{name} {}: {:?}", r.target, r.failures());
            assert!(r.error.rel_err > 0.0, "{name}: bf16 rounding must show");
        }
    }
}

/// `rotary_bwd` (rotation by −θ) on both emulators: both forms, both layouts, the heads-along-rows
/// and positions-along-rows arrangements (head dimensions 64 and 96).
#[test]
fn rotary_backward_on_the_emulators() {
    use kittens_kernels::attn::{AttnLayout, AttnShape};
    for t in AMD {
        clang_for(t.gpu().unwrap().arch);
        let backends: [Box<dyn Backend>; 2] = [
            Box::new(HipEmu::new(t).unwrap()),
            Box::new(IsaEmu::new(t).unwrap()),
        ];
        for b in &backends {
            for (layout, interleaved, heads, seq, dim) in [
                (AttnLayout::Bshd, false, 3, 37, 64),
                (AttnLayout::Bhsd, true, 2, 9, 96),
            ] {
                let p = RotaryBwdProblem(RotaryProblem {
                    attn: AttnShape {
                        batch: 1,
                        heads,
                        heads_kv: heads,
                        seq,
                        dim,
                        layout,
                    },
                    interleaved,
                    x_strides: None,
                    run: RunSettings {
                        seed: 23,
                        ..RunSettings::default()
                    },
                });
                let r = run(entry("rotary_bwd"), &p, b.as_ref()).unwrap();
                eprintln!(
                    "rotary_bwd {} {t} {}: rel_err {:.3e}",
                    b.about().name,
                    r.shape,
                    r.error.rel_err
                );
                assert!(r.passed && r.error.rel_err > 0.0, "{t}: {:?}", r.failures());
            }
        }
    }
}

/// The forwards as their problems build them on sm_90a (`fwd_config`: the default split of
/// `kittens_kernels::rows::fwd_per_lane_for`, one wave per row up to D = 1024 for the layernorm, 16
/// values per lane past D = 3072) compile with zero spills at the row lengths where the split
/// changes.
#[test]
fn the_forwards_default_splits_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    if std::env::var_os(kittens_kernels::rows::FWD_SPLIT_VAR).is_some() {
        return; // a measurement's own split: not the defaults
    }
    for dim in [768usize, 776, 1024, 2056, 2560, 3072, 3080, 4096, 8192] {
        for (name, key, v) in [
            ("rmsnorm", "residual", 1.0),
            ("layernorm", "p", 0.0),
            ("layernorm", "p", 0.1),
        ] {
            let mut a = kittens_kernels::problem::NamedArgs::new()
                .with("rows", 4133usize)
                .with("norm_dim", dim);
            a = if key == "residual" {
                a.with(key, v > 0.0)
            } else {
                a.with(key, v)
            };
            let k = entry(name)
                .problem(&a)
                .unwrap()
                .build(Target::Sm90a)
                .unwrap();
            let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap();
            let image = kittens_runtime::cuda::compile(
                &l.source,
                &l.entry,
                "sm_90a",
                l.dynamic_shared_bytes(),
            )
            .unwrap_or_else(|err| panic!("{name} D{dim}: {err}"));
            eprintln!(
                "{name} D{dim} {key}={v} waves {}: {:?}",
                k.schedule.waves(),
                image.report
            );
            assert_eq!(image.report.spill_stores, 0, "{name} D{dim} {key}={v}");
        }
    }
}
