//! The sm_90a varlen attention forward (`kittens_kernels::attn_varlen_hopper`) and backward
//! (`kittens_kernels::attn_varlen_bwd_hopper`) lowered and compiled by NVRTC without spills at every
//! head dim they take, causal and not: the proof available without a GPU
//! that the index reads (`Expr::Elem`) and the per-block clips lower to valid CUDA. Its numbers are
//! checked on the interpreter (`kittens-kernels/tests/attn_varlen.rs`) and on the device by
//! `python/tests/test_gpu_varlen.py`.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::ensure_nvrtc;
use kittens_hw::Target;
use kittens_kernels::attn::score::Logits;
use kittens_kernels::attn_varlen::VarlenConfig;

/// Lowers and compiles `build(cfg)` for sm_90a; panics on a lowering or NVRTC error or a spill.
fn compiles_without_spills(build: Builder, cfg: &VarlenConfig) {
    let what = format!(
        "D{} causal {} seqused_k {} alibi {} softcap {:?} window {:?}",
        cfg.dim, cfg.causal, cfg.seqused_k, cfg.alibi, cfg.logits.softcap, cfg.window
    );
    let k = build(cfg).unwrap();
    let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{what}: {e}"));
    let image =
        kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(image.report.spill_stores, 0, "{what}: {:?}", image.report);
    // No C75xx warning (C7508 setmaxnreg ignored, C7512-C7520 serialised `wgmma`).
    let serial = image.report.warnings.iter().filter(|w| w.contains("C75"));
    assert_eq!(serial.count(), 0, "{what}: {:?}", image.report.warnings);
    eprintln!("{} {what}: {:?}", k.name, image.report);
}

type Builder = fn(&VarlenConfig) -> Result<kittens_ir::Kernel, kittens_kernels::KernelError>;

fn config(dim: u32, causal: bool, seqused_k: bool) -> VarlenConfig {
    VarlenConfig {
        dim,
        causal,
        logits: Logits::default(),
        window: None,
        seqused_k,
        alibi: false,
    }
}

#[test]
fn varlen_forward_compiles_for_sm90a_without_spills() {
    ensure_nvrtc();
    for (dim, seqused_k) in [
        (64, false),
        (128, false),
        (192, false),
        (256, false),
        (64, true),
        (128, true),
    ] {
        for causal in [false, true] {
            let cfg = config(dim, causal, seqused_k);
            compiles_without_spills(kittens_kernels::attn_varlen_hopper::build, &cfg);
        }
    }
}

/// The backward at every head dim: the 128-key blocks at 64 and 128, the 64-key blocks at 192 and
/// 256.
#[test]
fn varlen_backward_compiles_for_sm90a_without_spills() {
    ensure_nvrtc();
    for dim in [64, 128, 192, 256] {
        for causal in [false, true] {
            let cfg = config(dim, causal, false);
            compiles_without_spills(kittens_kernels::attn_varlen_bwd_hopper::build, &cfg);
        }
    }
}

/// With ALiBi (the slopes' tensor, one more row vector per consumer thread): forward and backward at
/// every head dim, causal and not, still without spills.
#[test]
fn varlen_alibi_compiles_for_sm90a_without_spills() {
    ensure_nvrtc();
    for dim in [64, 128, 192, 256] {
        for causal in [false, true] {
            let cfg = VarlenConfig {
                alibi: true,
                ..config(dim, causal, false)
            };
            compiles_without_spills(kittens_kernels::attn_varlen_hopper::build, &cfg);
            compiles_without_spills(kittens_kernels::attn_varlen_bwd_hopper::build, &cfg);
        }
    }
}

/// With a soft cap and a sliding window (the forward: one `tanh` per score, the window's key range
/// read on the device; the backward: the cap's derivative, the window's masks), at every head dim,
/// causal and not, still without spills; the backward also with each alone (at 128 a cap runs the
/// 64-key blocks, a window alone the 128-key blocks).
#[test]
fn varlen_softcap_and_window_compile_for_sm90a_without_spills() {
    ensure_nvrtc();
    for dim in [64, 128, 192, 256] {
        for causal in [false, true] {
            let cfg = VarlenConfig {
                logits: Logits {
                    scale: None,
                    softcap: Some(30.0),
                },
                window: Some(kittens_kernels::attn::score::Window {
                    left: 256,
                    right: 0,
                }),
                ..config(dim, causal, false)
            };
            compiles_without_spills(kittens_kernels::attn_varlen_hopper::build, &cfg);
            compiles_without_spills(kittens_kernels::attn_varlen_bwd_hopper::build, &cfg);
            if matches!(dim, 64 | 128) {
                for (softcap, window) in [(cfg.logits.softcap, None), (None, cfg.window)] {
                    let one = VarlenConfig {
                        logits: Logits {
                            scale: None,
                            softcap,
                        },
                        window,
                        ..cfg
                    };
                    compiles_without_spills(kittens_kernels::attn_varlen_bwd_hopper::build, &one);
                }
            }
        }
    }
}
