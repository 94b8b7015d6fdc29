//! The registry's own checks: names unique and found, variants build or say why not, every plan and
//! problem builds the kernel its entry names.

use super::*;

#[test]
fn names_are_unique_and_found() {
    let names = names();
    for (i, n) in names.iter().enumerate() {
        assert!(!names[..i].contains(n), "{n} registered twice");
        assert_eq!(by_name(n).map(|e| e.name).ok(), Some(*n));
    }
}

#[test]
fn unknown_names_list_the_registry() {
    let msg = by_name("gemm_fp4").unwrap_err().to_string();
    assert!(msg.contains("`gemm_fp4`"), "{msg}");
    for n in names() {
        assert!(msg.contains(n), "{msg}");
    }
}

/// The GEMMs' `interleave4` variant builds the 4-wave interleave for gfx950 with the GPU's element
/// types; an unknown name lists the variants, a target the variant does not list is refused
/// naming its targets; the attention's variant is its causal kernel.
#[test]
fn variants_build_or_say_why_not() {
    for (name, input) in [
        ("gemm_bf16", kittens_hw::dtype::DType::Bf16),
        ("gemm_fp8", kittens_hw::dtype::DType::Fp8E4m3),
    ] {
        let e = by_name(name).unwrap();
        let k = e
            .build_variant(Target::Gfx950, Some("interleave4"))
            .unwrap();
        assert_eq!(k.schedule, kittens_ir::Schedule::Interleave4, "{name}");
        assert_eq!(k.globals[0].dtype, input, "{name}");
        let msg = e
            .build_variant(Target::Gfx950, Some("pingpong4"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("pingpong4") && msg.contains("interleave4"),
            "{msg}"
        );
        for t in [Target::Cpu, Target::Sm90a, Target::Gfx942] {
            let msg = e
                .build_variant(t, Some("interleave4"))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(t.name()) && msg.contains("gfx950"), "{msg}");
        }
        // No variant: the target's own plan.
        let k = e.build_variant(Target::Gfx950, None).unwrap();
        assert_eq!(k.schedule, kittens_ir::Schedule::PingPong8, "{name}");
    }
    // The attention's variants: its causal kernel on both CDNA targets, MI300X-attn's on gfx942.
    let attn = by_name("attn_fwd").unwrap();
    let msg = attn
        .build_variant(Target::Gfx950, Some("interleave4"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("interleave4") && msg.contains("causal"),
        "{msg}"
    );
    for t in [Target::Gfx950, Target::Gfx942] {
        let k = attn.build_variant(t, Some("causal")).unwrap();
        assert_eq!(k.name, "attn_fwd_causal", "{t}");
    }
    assert!(attn.build_variant(Target::Sm90a, Some("causal")).is_err());
    let k = attn.build_variant(Target::Gfx942, Some("seed001")).unwrap();
    assert_eq!(k.name, "attn_fwd_mi300x");
    assert_eq!((k.waves, k.shared_bytes()), (8, 65536));
    let msg = attn
        .build_variant(Target::Gfx950, Some("seed001"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gfx942"), "{msg}");
    // The backward's AMD schedules on both CDNA targets; its `dq` on Hopper only.
    let bwd = by_name("attn_bwd").unwrap();
    for t in [Target::Gfx950, Target::Gfx942] {
        let k = bwd.build_variant(t, Some("interleave4")).unwrap();
        assert_eq!(k.schedule, kittens_ir::Schedule::Interleave4, "{t}");
        let k = bwd.build_variant(t, Some("pingpong8")).unwrap();
        assert_eq!(
            (k.schedule, k.waves),
            (kittens_ir::Schedule::PingPong8, 8),
            "{t}"
        );
        assert!(bwd.build_variant(t, Some("dq")).is_err());
        assert!(bwd.build_variant(t, Some("atomic")).is_err());
    }
    let msg = bwd
        .build_variant(Target::Sm90a, Some("interleave4"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gfx950") && msg.contains("gfx942"), "{msg}");
}

/// Every available plan builds for its target with the schedule it names; a target marked not
/// yet refuses with the registry's reason.
#[test]
fn plans_build_with_the_schedule_they_name() {
    for e in &ALL {
        for t in Target::ALL {
            let plan = e
                .plan(t)
                .unwrap_or_else(|| panic!("{} lists no {t}", e.name));
            match e.build_for(t) {
                Ok(k) => {
                    assert!(plan.status.available(), "{} {t}", e.name);
                    assert!(
                        plan.schedule.starts_with(k.schedule.name()),
                        "{} on {t}: plan says `{}`, built `{}`",
                        e.name,
                        plan.schedule,
                        k.schedule.name()
                    );
                }
                Err(err) => {
                    let Status::NotYet { why } = plan.status else {
                        panic!("{} on {t}: {err}", e.name)
                    };
                    let msg = err.to_string();
                    assert!(msg.contains(why) && msg.contains(t.name()), "{msg}");
                }
            }
        }
    }
}

/// Every kernel's problem definition plans and builds, at the default problem, on every target it
/// lowers to, the kernel of the entry's name with the schedule its plan names; a kernel's tensors
/// are its launch's inputs and outputs, and each output is a written tensor.
#[test]
fn problems_build_the_registered_kernel() {
    for e in &ALL {
        let p = e.default_problem().unwrap();
        for plan in e.targets.iter().filter(|t| t.status.available()) {
            let t = plan.target;
            let k = p
                .build(t)
                .unwrap_or_else(|err| panic!("{} {t}: {err}", e.name));
            assert!(
                k.name.starts_with(e.name),
                "{} {t}: built {}",
                e.name,
                k.name
            );
            assert!(
                plan.schedule.starts_with(k.schedule.name()),
                "{} {t}",
                e.name
            );
            // Every launch of the run (one, or the stages of a several-launch run such as the
            // Hopper backward's query and key blocks) matches its kernel.
            let plan = p.plan(t).unwrap();
            for st in p.stages(t, &plan).unwrap() {
                let (launch, k) = (&st.launch, &st.kernel);
                let what = format!("{} {t} {}", e.name, k.name);
                assert_eq!(launch.params.len(), k.params.len(), "{what}");
                let n = launch.inputs.len() + launch.outputs.len();
                assert_eq!(n, k.globals.len(), "{what}");
                assert!(
                    k.globals[launch.inputs.len()..]
                        .iter()
                        .all(|g| g.access != kittens_ir::Access::Read),
                    "{what}"
                );
            }
        }
    }
}

/// The registry builds a kernel one way, through its problem: every size and variant its builds name
/// is an argument the problem reads (a misspelt one would leave the problem's default and build
/// another kernel), and where the registry names no size for a target, what `kittens compile` builds
/// there (`build_for`) is the problem's own build at its default sizes.
#[test]
fn builds_go_through_the_problem() {
    let mut at_defaults = 0;
    for e in &ALL {
        for plan in e.targets.iter().filter(|p| p.status.available()) {
            let t = plan.target;
            let variants = e.variants.iter().filter(|v| v.targets.contains(&t));
            for v in std::iter::once(None).chain(variants.map(|v| Some(v.name))) {
                let a = e.build_args(t, v);
                let p = e.problem(&a).unwrap();
                assert_eq!(a.unread(), Vec::<String>::new(), "{} {t} {v:?}", e.name);
                let built = e.build_variant(t, v).unwrap();
                assert_eq!(p.build(t).unwrap(), built, "{} {t} {v:?}", e.name);
            }
            let sizes = match t {
                Target::Cpu => e.sizes.cpu,
                _ => e.sizes.gpu,
            };
            if sizes.is_empty() {
                let p = e.default_problem().unwrap();
                assert_eq!(
                    p.build(t).unwrap(),
                    e.build_for(t).unwrap(),
                    "{} {t}",
                    e.name
                );
                at_defaults += 1;
            }
        }
    }
    assert!(
        at_defaults >= 18,
        "only {at_defaults} builds at the defaults"
    );
}

/// A GPU model's build is its architecture's target's (the catalog's models of one architecture
/// share their configurations), also where the registry does not lower it yet.
#[test]
fn a_gpu_models_build_is_its_targets() {
    for e in &ALL {
        for g in kittens_hw::gpu::ALL {
            let t = Target::from(g.arch);
            let k = e.build_for_gpu(g).unwrap();
            if let Ok(for_target) = e.build_for(t) {
                assert_eq!(k, for_target, "{} {}", e.name, g.name);
            }
        }
    }
}
