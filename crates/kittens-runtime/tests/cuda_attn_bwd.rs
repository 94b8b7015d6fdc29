//! The attention backward's Hopper launches (kittens-kernels `attn_bwd`: the key blocks for dK and dV,
//! the query blocks for dQ) lowered for sm_90a compile with NVRTC without spills and without ignored
//! register reallocation or serialised `wgmma`, at both head dimensions, every mask and both memory
//! orders, and hold the machinery the programs imply (4-d TMA loads, `wgmma` from shared memory and
//! with A from registers, B N-major).

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, test_cache};
use kittens_hw::Target;
use kittens_kernels::attn::{AttnLayout, Causal};
use kittens_kernels::attn_bwd::{build, BwdConfig, BwdSchedule};

#[test]
fn attn_bwd_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("lowered-attn-bwd");
    let mut n = 0;
    for schedule in [BwdSchedule::HopperKv, BwdSchedule::HopperQ] {
        for dim in [64, 128] {
            for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
                for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
                    if dim == 64 && layout == AttnLayout::Bhsd {
                        continue; // the layout changes strides only; one order at head dim 64
                    }
                    let cfg = BwdConfig {
                        schedule,
                        dim,
                        causal,
                        layout,
                        ..BwdConfig::for_gpu(h100)
                    };
                    let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                    let l = kittens_codegen::lower(&k, Target::Sm90a)
                        .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                    let code = ptx::of(&l);
                    for op in [
                        "cp.async.bulk.tensor.4d.shared::cluster.global",
                        "setmaxnreg.inc.sync.aligned.u32 240",
                        "setmaxnreg.dec.sync.aligned.u32 24",
                    ] {
                        assert!(ptx::count(&code, op) > 0, "{cfg:?} lacks {op}");
                    }
                    // wgmma from shared memory (both K-major) and with A from registers, B N-major.
                    let wgmmas = ptx::stream(&code);
                    assert!(
                        ptx::has_wgmma(&wgmmas, &[1, 1, 0, 0]),
                        "{cfg:?}: no ss wgmma"
                    );
                    assert!(
                        ptx::has_wgmma(&wgmmas, &[1, 1, 1]),
                        "{cfg:?}: no rs_tb wgmma"
                    );
                    // No spills or stack, the H100's shared memory, no C75xx warning.
                    let r = compile_clean(&l, &cache, &format!("{cfg:?}"));
                    eprintln!("{} {dim} {causal:?} {layout:?}: {r:?}", l.entry);
                    n += 1;
                }
            }
        }
    }
    assert_eq!(n, 18);
}

/// The FlashAttention-3 form (`--schedule hopper-atomic`): the strip passes before and after, and the
/// key blocks that store dSᵀ to a swizzled shared tile, read it back as an M-major `wgmma` A operand
/// and add dQ through each warpgroup's f32 staging slab with TMA reductions
/// (`cp.reduce.async.bulk.tensor.4d … .add`) — no spills, no serialised `wgmma` (ptxas C7514/C7515).
#[test]
fn attn_bwd_atomic_dq_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("lowered-attn-bwd-atomic");
    let mut n = 0;
    for schedule in [
        BwdSchedule::HopperAtomicPre,
        BwdSchedule::HopperAtomicKv,
        BwdSchedule::HopperAtomicDq,
    ] {
        for dim in [64, 128] {
            for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
                let pass = schedule != BwdSchedule::HopperAtomicKv;
                if pass && causal != Causal::No {
                    continue; // the strip passes know no mask
                }
                let cfg = BwdConfig {
                    schedule,
                    dim,
                    causal,
                    layout: AttnLayout::Bshd,
                    ..BwdConfig::for_gpu(h100)
                };
                let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                let l = kittens_codegen::lower(&k, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                if !pass {
                    let code = ptx::of(&l);
                    for op in [
                        "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add",
                        "st.shared.v2.f32",
                        "st.shared.b32",
                    ] {
                        assert!(ptx::count(&code, op) > 0, "{cfg:?} lacks {op}");
                    }
                    // dQ = dSᵀ·K with both operands transposed; dV, dK with A from registers.
                    let wgmmas = ptx::stream(&code);
                    assert!(ptx::has_wgmma(&wgmmas, &[1, 1, 1, 1]), "{cfg:?}: no ta_tb");
                    assert!(ptx::has_wgmma(&wgmmas, &[1, 1, 1]), "{cfg:?}: no rs_tb");
                    // Head dimension 128: both warpgroups' dSᵀ through the consumers barrier (the
                    // ID after the three warpgroups' own, 256 threads).
                    let consumers = ptx::constant_operands(&code, "bar.sync")
                        .contains(&vec![Some(7), Some(256)]);
                    assert_eq!(consumers, dim == 128, "{cfg:?}");
                    // Kept as text: the fence also precedes C's stores, so its place is the property.
                    assert!(l
                        .source
                        .contains("kt::fence_proxy_async(); // the stores above"));
                }
                // No spills (the TMA reductions hold no per-element addresses; the per-element `red`
                // version spilled 4 words at head dimension 128), no stack, the H100's shared memory,
                // no C75xx warning (C7508 setmaxnreg ignored, C7514/C7515 serialised wgmma).
                let r = compile_clean(&l, &cache, &format!("{cfg:?}"));
                eprintln!("{} {dim} {causal:?}: {r:?}", l.entry);
                n += 1;
            }
        }
    }
    assert_eq!(n, 10);
}

/// Head dims 192 and 256 (kittens-kernels `attn_bwd::hopper::wide`: 64-key blocks whose warpgroups
/// split the scores by queries, exchange `Pᵀ` and `dSᵀ` through shared memory as 16 × 32 fragments
/// and split dK, dV (and the atomic form's dQ) by head-dimension tiles): the two-launch key blocks and
/// the FlashAttention-3 form's three launches, and the deterministic form's query blocks (32 or 64
/// keys per streamed step), every mask, both layouts, and the options (soft cap, window, ALiBi,
/// scale) — no spills, no serialised `wgmma`.
#[test]
fn attn_bwd_wide_head_dims_compile_for_sm_90a_without_spills() {
    use kittens_kernels::attn::score::{Logits, Window};
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("lowered-attn-bwd-wide");
    let mut lowered = Vec::new();
    let capped = Logits {
        scale: Some(0.1),
        softcap: Some(5.0),
    };
    for dim in [192, 256] {
        let mut cfgs = Vec::new();
        for schedule in [
            BwdSchedule::HopperQ,
            BwdSchedule::HopperKv,
            BwdSchedule::HopperAtomicPre,
            BwdSchedule::HopperAtomicKv,
            BwdSchedule::HopperAtomicDq,
        ] {
            for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
                let kv = matches!(
                    schedule,
                    BwdSchedule::HopperKv | BwdSchedule::HopperAtomicKv | BwdSchedule::HopperQ
                );
                if !kv && causal != Causal::No {
                    continue; // the strip passes know no mask
                }
                for layout in [AttnLayout::Bshd, AttnLayout::Bhsd] {
                    let base = BwdConfig {
                        schedule,
                        dim,
                        causal,
                        layout,
                        ..BwdConfig::for_gpu(h100)
                    };
                    cfgs.push(base);
                    if kv && causal == Causal::BottomRight && layout == AttnLayout::Bshd {
                        // Every option at once.
                        cfgs.push(BwdConfig {
                            logits: capped,
                            window: Some(Window::new(90, 20).unwrap()),
                            alibi: true,
                            ..base
                        });
                    }
                }
            }
        }
        for cfg in cfgs {
            let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            let l = kittens_codegen::lower(&k, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            if matches!(
                cfg.schedule,
                BwdSchedule::HopperKv | BwdSchedule::HopperAtomicKv
            ) {
                let mut needles = vec![
                    "kt::tma_load_4d(",
                    "_bf16_ss(",
                    "_bf16_ss_tb(",
                    "const u32 c0 = ",
                    "setmaxnreg_inc<240>",
                ];
                if cfg.schedule == BwdSchedule::HopperAtomicKv {
                    needles.extend(["kt::tma_reduce_add_4d(", "_bf16_ss_ta_tb("]);
                }
                for needle in needles {
                    assert!(l.source.contains(needle), "{cfg:?} lacks {needle}");
                }
            }
            if let Ok(dir) = std::env::var("BWD256_DUMP") {
                let f = format!(
                    "{dir}/{:?}-{dim}-{:?}-{:?}-{}.cu",
                    cfg.schedule, cfg.causal, cfg.layout, cfg.alibi
                );
                std::fs::write(f, &l.source).unwrap();
            }
            lowered.push((cfg, l));
        }
    }
    assert_eq!(lowered.len(), 2 * (6 + 1 + 6 + 1 + 2 + 6 + 1 + 2));
    parallel::each(lowered, |(cfg, l)| {
        let r = compile_clean(&l, &cache, &format!("{cfg:?}"));
        eprintln!(
            "{} {} {:?} {:?}: {r:?}",
            l.entry, cfg.dim, cfg.causal, cfg.layout
        );
    });
}

/// Head dim 32 (the 64-column programs with the last 32 columns read as zeros): both Hopper forms'
/// launches, every mask — no spills, no serialised `wgmma`.
#[test]
fn attn_bwd_head_dim_32_compiles_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("lowered-attn-bwd-32");
    let mut n = 0;
    for schedule in [
        BwdSchedule::HopperQ,
        BwdSchedule::HopperKv,
        BwdSchedule::HopperAtomicPre,
        BwdSchedule::HopperAtomicKv,
        BwdSchedule::HopperAtomicDq,
    ] {
        for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
            let pass = matches!(
                schedule,
                BwdSchedule::HopperAtomicPre | BwdSchedule::HopperAtomicDq
            );
            if pass && causal != Causal::No {
                continue;
            }
            let cfg = BwdConfig {
                schedule,
                dim: 32,
                causal,
                layout: AttnLayout::Bshd,
                ..BwdConfig::for_gpu(h100)
            };
            let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            let l = kittens_codegen::lower(&k, Target::Sm90a)
                .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            let r = compile_clean(&l, &cache, &format!("{cfg:?}"));
            eprintln!("{} 32 {causal:?}: {r:?}", l.entry);
            n += 1;
        }
    }
    assert_eq!(n, 11);
}

/// The key blocks' 128-query steps at head dims 64 (both forms) and 32 (`BwdConfig::hopper_step`):
/// every mask,
/// and with a soft cap, a window and ALiBi at once (the step's most registers) — no spills, no
/// stack, no serialised `wgmma`.
#[test]
fn attn_bwd_128_query_steps_compile_for_sm_90a_without_spills() {
    ensure_nvrtc();
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cache = test_cache("lowered-attn-bwd-step128");
    let mut n = 0;
    let options = kittens_kernels::attn::score::AttnOptions {
        logits: kittens_kernels::attn::score::Logits {
            scale: Some(0.1),
            softcap: Some(5.0),
        },
        window: Some(kittens_kernels::attn::score::Window::new(90, 20).expect("a window")),
        alibi: None,
    };
    for (dim, schedule) in [
        (64, BwdSchedule::HopperKv),
        (64, BwdSchedule::HopperAtomicKv),
        (32, BwdSchedule::HopperKv),
    ] {
        for causal in [Causal::No, Causal::TopLeft, Causal::BottomRight] {
            for all_options in [false, true] {
                let base = BwdConfig {
                    schedule,
                    dim,
                    causal,
                    layout: AttnLayout::Bshd,
                    hopper_step: 128,
                    ..BwdConfig::for_gpu(h100)
                };
                let cfg = if all_options {
                    BwdConfig {
                        logits: options.logits,
                        window: options.window,
                        alibi: true,
                        ..base
                    }
                } else {
                    base
                };
                let k = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                let l = kittens_codegen::lower(&k, Target::Sm90a)
                    .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                let r = compile_clean(&l, &cache, &format!("{cfg:?}"));
                eprintln!("{} {dim} {causal:?} options {all_options}: {r:?}", l.entry);
                n += 1;
            }
        }
    }
    assert_eq!(n, 18);
}
