//! The sm_90a paged-KV-cache decode (`kittens_kernels::attn_paged_hopper`) lowered and compiled by
//! NVRTC without spills at every head dim and key block it takes, causal and not, with and without a
//! key split, with and without ALiBi, a soft cap and a sliding window: the proof available without a GPU that the block-table reads (`Expr::Elem` in a
//! `cp.async` fill's origin) and the per-step clip lower to valid CUDA. Its numbers are checked on
//! the interpreter (`kittens-kernels/tests/attn_paged.rs`) and on the device by
//! `python/tests/test_gpu_kvcache.py`.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;

use cuda_common::ensure_nvrtc;
use kittens_hw::Target;
use kittens_kernels::attn::score::{Logits, Window};
use kittens_kernels::attn_paged::PagedConfig;

#[test]
fn paged_decode_compiles_for_sm90a_without_spills() {
    ensure_nvrtc();
    let mut cases = Vec::new();
    // GQA packing (a group's query heads as the block's rows), split and not, causal and not.
    for (dim, kv, causal, splits) in [
        (128, 128, true, 1),
        (128, 128, false, 4),
        (256, 64, true, 2),
    ] {
        let cfg = PagedConfig {
            dim,
            causal,
            logits: Logits::default(),
            kv_block: kv,
            splits,
            alibi: false,
            window: None,
            pack_gqa: true,
        };
        let what = format!("packed D{dim} kv{kv} causal {causal} splits {splits}");
        cases.push((cfg, what));
    }
    // Every head dim and key block, each mask and split form at the registry's page 16 and the
    // widest blocks (the most registers).
    // (causal, splits, alibi, soft cap and window)
    let all = [
        (false, 1, false, false),
        (true, 1, false, false),
        (false, 4, false, false),
        (true, 1, true, false),
        (false, 4, true, false),
        (true, 1, true, true),
        (false, 4, false, true),
    ];
    let plain = [(false, 1, false, false)];
    for (dim, kv, forms) in [
        (64, 128, &all[..]),
        (128, 16, &all[..]),
        (128, 32, &plain[..]),
        (128, 64, &plain[..]),
        (128, 128, &all[..]),
        (192, 64, &plain[..]),
        (256, 16, &all[..]),
        (256, 64, &all[..]),
    ] {
        for &(causal, splits, alibi, capped) in forms {
            let cfg = PagedConfig {
                dim,
                causal,
                logits: Logits {
                    scale: None,
                    softcap: capped.then_some(30.0),
                },
                kv_block: kv,
                splits,
                alibi,
                window: capped.then(|| Window::new(1000, if causal { 0 } else { 7 }).unwrap()),
                pack_gqa: false,
            };
            let what = format!(
                "D{dim} kv{kv} causal {causal} splits {splits} alibi {alibi} softcap+window {capped}"
            );
            cases.push((cfg, what));
        }
    }
    parallel::each(cases, |(cfg, what)| compiles_without_spills(&cfg, &what));
}

fn compiles_without_spills(cfg: &PagedConfig, what: &str) {
    let k = kittens_kernels::attn_paged_hopper::build(cfg).unwrap();
    let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{what}: {e}"));
    let image =
        kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(image.report.spill_stores, 0, "{what}: {:?}", image.report);
    eprintln!("{} {what}: {:?}", k.name, image.report);
}
