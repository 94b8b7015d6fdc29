//! The attention forward's key split lowered for sm_90a: the split producer/consumer kernel (f32
//! partial outputs and log-sum-exps, its part of the keys) and the merge strip program compile with
//! NVRTC without spills, at both head dimensions, every mask, and split counts from 2 to 8; the merge
//! for each output rounding, layout, with and without the log-sum-exp, up to 16 parts.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_ir::Rounding;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::attn_fwd::split::build_merge;
use kittens_kernels::attn_fwd::{build, AttnConfig};
use kittens_runtime::cuda::compile_with_cache;

/// The global tensors the kernel takes, by name (its launch contract).
fn globals(l: &kittens_codegen::Lowered) -> Vec<&str> {
    l.args
        .iter()
        .filter_map(|a| match a {
            kittens_codegen::KernelArg::Global { name } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

fn h100() -> &'static kittens_hw::Gpu {
    kittens_hw::gpu("h100").expect("catalog")
}

#[test]
fn split_attention_and_merge_compile_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let mut kernels = Vec::new();
    for (dim, causal, bottom_right, splits) in [
        (128, false, false, 4),
        (64, true, true, 2),
        (128, true, true, 8),
        (64, false, false, 3),
        (128, true, false, 5),
    ] {
        let cfg = AttnConfig {
            dim,
            causal,
            bottom_right,
            kv_splits: splits,
            ..AttnConfig::for_gpu(h100())
        };
        kernels.push((build(&cfg).unwrap_or_else(|e| panic!("{e}")), true));
    }
    for (dim, lse, rounding, layout, splits) in [
        (128, false, Rounding::Rtne, AttnLayout::Bshd, 4),
        (64, true, Rounding::Rtz, AttnLayout::Bhsd, 2),
        (128, true, Rounding::Rtna, AttnLayout::Bhsd, 8),
        (64, false, Rounding::Rtne, AttnLayout::Bshd, 16),
    ] {
        let cfg = AttnConfig {
            dim,
            lse,
            rounding,
            layout,
            kv_splits: splits,
            ..AttnConfig::for_gpu(h100())
        };
        kernels.push((build_merge(&cfg).unwrap_or_else(|e| panic!("{e}")), false));
    }
    let cache = test_cache("attn-split");
    for (k, split) in &kernels {
        let l =
            kittens_codegen::lower(k, Target::Sm90a).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        if let Ok(dir) = std::env::var("KITTENS_DUMP") {
            std::fs::write(format!("{dir}/{}.cu", l.entry), &l.source).expect("dump");
        }
        let image = compile_with_cache(
            &l.source,
            &l.entry,
            "sm_90a",
            l.dynamic_shared_bytes(),
            Some(&cache),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let r = &image.report;
        eprintln!("{} : {r:?}", l.entry);
        assert_eq!(
            (r.spill_stores, r.spill_loads, r.stack_frame),
            (0, 0, 0),
            "{}: {r:?}",
            k.name
        );
        if *split {
            // Q, K, V by TMA as unsplit; O and the log-sum-exp go to the f32 partials only.
            assert_eq!(l.tma_maps().len(), 3, "{}", k.name);
            let globals = globals(&l);
            assert!(
                globals.contains(&"o_partial") && globals.contains(&"lse_partial"),
                "{}: {globals:?}",
                k.name
            );
            assert!(!globals.contains(&"o"), "{}: {globals:?}", k.name);
            assert!(
                ptx::count(&ptx::of(&l), "st.global.f32") > 0,
                "{}: f32 partial stores",
                k.name
            );
            assert!(r.dynamic_shared_bytes <= h100().shared_bytes_per_block);
        } else {
            // A strip program: no tensor maps, the output rounded as configured.
            assert!(l.tma_maps().is_empty(), "{}", k.name);
            let round = match k.name.as_str() {
                "attn_fwd_merge2_lse" => "ks::f32_to_bf16_rz(",
                "attn_fwd_merge8_lse" => "ks::f32_to_bf16_rna(",
                _ => "ks::f32_to_bf16(",
            };
            // Kept as text: the three roundings are integer arithmetic on the bits in the PTX; the
            // merge's results are runner_attn_split.rs's.
            assert!(l.source.contains(round), "{}: lacks {round}", k.name);
            assert_eq!(
                globals(&l).contains(&"lse"),
                k.name.ends_with("_lse"),
                "{}",
                k.name
            );
        }
    }
}
