//! The registry's statuses against the lowering itself: every kernel a GPU target lists as available
//! lowers there through the one interface (`kittens_codegen::lower`) with a consistent launch contract,
//! and every one it lists as not yet is refused by the lowering too, so the registry neither hides nor
//! overstates what exists.

use kittens_codegen::{lower, GridRule, KernelArg, SharedAlloc};
use kittens_hw::Target;
use kittens_kernels::registry::{self, Status};

const GPU_TARGETS: [Target; 3] = [Target::Gfx942, Target::Gfx950, Target::Sm90a];

#[test]
fn available_plans_lower_with_a_consistent_contract() {
    for e in &registry::ALL {
        for t in GPU_TARGETS {
            let plan = e.plan(t).expect("every GPU target has a plan");
            if !plan.status.available() {
                continue;
            }
            let k = e
                .build_for(t)
                .unwrap_or_else(|err| panic!("{} {t}: {err}", e.name));
            let l = lower(&k, t).unwrap_or_else(|err| panic!("{} {t}: {err}", e.name));
            let gpu = t.gpu().expect("a GPU target has a model");
            assert_eq!(l.target, t);
            assert_eq!(l.threads, gpu.wave_width * k.waves, "{} {t}", e.name);
            // That the source defines `l.entry` is what compiling it checks: the compilers are asked
            // for that kernel by name (kittens-runtime tests/cuda_registry.rs, amd_no_spills.rs).
            assert!(
                l.shared_bytes <= gpu.shared_bytes_per_block,
                "{} {t}",
                e.name
            );
            // Arguments: any tensor maps, then every global, then every parameter, in IR order.
            let names: Vec<&str> = l
                .args
                .iter()
                .filter_map(|a| match a {
                    KernelArg::Global { name } | KernelArg::Param { name } => Some(name.as_str()),
                    KernelArg::TensorMap(_) => None,
                })
                .collect();
            let want: Vec<&str> = k
                .globals
                .iter()
                .map(|g| g.name.as_str())
                .chain(k.params.iter().map(|p| p.name.as_str()))
                .collect();
            assert_eq!(names, want, "{} {t}", e.name);
            let maps = l.tma_maps().len();
            assert!(
                l.args[..maps]
                    .iter()
                    .all(|a| matches!(a, KernelArg::TensorMap(_))),
                "{} {t}: tensor maps come first",
                e.name
            );
            // HIP: static LDS, one block per tile; CUDA: dynamic shared memory, persistent grid —
            // except strip programs (memory-bound), which are per tile on every target and static
            // unless they declare more than CUDA's static limit (staged norm rows on sm_90a).
            let strip = kittens_codegen::strip::is_strip_program(&k);
            let (alloc, grid) = match t {
                Target::Sm90a if !strip => (SharedAlloc::Dynamic, GridRule::Persistent),
                Target::Sm90a if l.shared_bytes > kittens_codegen::strip::STATIC_SHARED => {
                    (SharedAlloc::Dynamic, GridRule::PerTile)
                }
                _ => (SharedAlloc::Static, GridRule::PerTile),
            };
            assert_eq!((l.shared_alloc, l.grid), (alloc, grid), "{} {t}", e.name);
        }
    }
}

#[test]
fn not_yet_plans_are_refused_by_the_lowering_too() {
    for e in &registry::ALL {
        for t in GPU_TARGETS {
            let Some(Status::NotYet { .. }) = e.plan(t).map(|p| p.status) else {
                continue;
            };
            let k = e
                .build_for_gpu(t.gpu().expect("a GPU target has a model"))
                .unwrap_or_else(|err| panic!("{} {t}: {err}", e.name));
            assert!(
                lower(&k, t).is_err(),
                "{} lowers to {t}: the registry should say so",
                e.name
            );
        }
    }
}

#[test]
fn the_cpu_has_no_source() {
    let k = registry::by_name("gemm_bf16")
        .and_then(|e| e.build_for(Target::Cpu))
        .expect("builds");
    assert!(lower(&k, Target::Cpu).is_err());
}
