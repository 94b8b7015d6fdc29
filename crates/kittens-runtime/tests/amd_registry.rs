//! The registry's `gemm_bf16` (kittens-kernels), configured per GPU by `GemmConfig::for_gpu`, lowered
//! and compiled for both CDNA targets: gfx950 (MI355X) double-buffers
//! the next K step in LDS, gfx942 (MI325X, 64 KiB LDS) stages it in registers (HipKittens E.1). Both must
//! compile with zero spills, LDS within the target's budget and the target's bf16 MFMA in the hot loop;
//! the gfx942 source must also build with Debian's clang-19.

#[path = "amd_support/common.rs"]
mod amd_common;

use amd_common::{clang_for, debian_clang19};
use kittens_codegen::hip::{bf16_mfma_opcode, lower};
use kittens_hw::Arch;
use kittens_kernels::gemm::{build, GemmConfig, Staging};
use kittens_runtime::amd::{analyze, ClangSource, CodeObjectReport};

/// The registry kernel as `kittens compile` builds it for a GPU, and its HIP.
fn registry_source(gpu: &str) -> (GemmConfig, String, Arch) {
    let g = kittens_hw::gpu(gpu).unwrap();
    let cfg = GemmConfig::for_gpu(g);
    let src = lower(&build(&cfg).unwrap(), g.arch).expect("lowers").source;
    (cfg, src, g.arch)
}

/// Zero spills and scratch, LDS within the budget and equal to the config's shared tiles, and per K
/// step of 64 the MFMAs of four 64×32 += 64×64·(32×64)ᵀ products in the hot loop: 4·(4·2)·(64/k) with
/// k the MFMA's K (16 on gfx942's 16x16x16, 32 on gfx950's 16x16x32).
fn check(arch: Arch, cfg: &GemmConfig, r: &CodeObjectReport) {
    eprintln!("{}: {}", arch.target(), serde_json::to_string(r).unwrap());
    assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
    assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
    assert_eq!(r.lds_bytes, cfg.shared_bytes());
    let hot = r.hot_loop.as_ref().expect("a hot loop");
    let k_mfma = if arch == Arch::Cdna4 { 32 } else { 16 };
    let mfma = bf16_mfma_opcode(arch).unwrap();
    assert_eq!(
        hot.mix.opcodes.get(mfma).copied(),
        Some(4 * 4 * 2 * cfg.k_step / k_mfma),
        "{}",
        arch.target()
    );
    assert!(hot.mix.s_barrier >= 8, "a barrier at every cluster end");
}

#[test]
fn registry_gemm_fits_gfx950_with_lds_staging() {
    let (cfg, src, arch) = registry_source("mi355x");
    assert_eq!(cfg.staging, Staging::Lds);
    let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
    let r = analyze(&asm, arch, Some("gemm_bf16")).unwrap();
    check(arch, &cfg, &r);
    assert_eq!(
        r.lds_bytes,
        2 * 2 * 2 * 128 * 64 * 2,
        "two slots of A and B halves"
    );
}

/// HipKittens E.1's ping-pong (`GemmConfig::default()`) as clang compiles it for gfx950: the IR's
/// op-counted waits are the instruction counts HipKittens writes by hand (Fig. 21 lines 68 and 76:
/// `s_waitcnt vmcnt(4)` then `vmcnt(6)`, two and three tile loads of 128×64 bf16, each two 16-byte
/// `buffer_load … lds` per wave of 8); the stagger barrier before the hot loop and the re-join after
/// it are each on a path a branch can skip; each K step is eight clusters closed by a barrier between
/// two scheduling fences, compute at priority 1.
#[test]
fn ping_pong_waits_and_clusters_survive_compilation_on_gfx950() {
    let arch = Arch::Cdna4;
    let src = lower(&build(&GemmConfig::default()).unwrap(), arch)
        .expect("lowers")
        .source;
    let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
    let r = analyze(&asm, arch, Some("gemm_bf16")).unwrap();
    let label = r.hot_loop.as_ref().expect("a hot loop").label.clone();
    let lines: Vec<&str> = asm.lines().map(str::trim).collect();
    let head = lines
        .iter()
        .position(|l| l.split_whitespace().next() == Some(&format!("{label}:")))
        .expect("the hot loop's label");
    let back = head
        + lines[head..]
            .iter()
            .position(|l| l.starts_with("s_cbranch") && l.ends_with(label.as_str()))
            .expect("the back-edge");
    // Waits that leave loads in flight (the ragged-edge fix-ups drain to 0 on a cold path).
    let waits: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("s_waitcnt vmcnt(") && !l.ends_with("vmcnt(0)"))
        .copied()
        .collect();
    assert_eq!(
        &waits[..2],
        ["s_waitcnt vmcnt(4)", "s_waitcnt vmcnt(6)"],
        "{waits:?}"
    );
    let body = &lines[head..back];
    let count = |p: &str| body.iter().filter(|l| l.starts_with(p)).count();
    assert_eq!(
        count("buffer_load_dwordx4"),
        4 * 2,
        "2 per wave per tile load"
    );
    assert!(body
        .iter()
        .filter(|l| l.starts_with("buffer_load_dwordx4"))
        .all(|l| l.ends_with(" lds")));
    assert_eq!(count("s_barrier"), 8);
    assert_eq!(count("; sched_barrier"), 16);
    assert_eq!(count("s_setprio 1"), 4);
    // A barrier alone in a block that a conditional branch jumps over: `s_cbranch_* L`, a label, the
    // barrier, `L:`.
    let skippable = |range: std::ops::Range<usize>| {
        range.filter(|&i| i >= 2 && i + 1 < lines.len()).any(|i| {
            lines[i] == "s_barrier"
                && lines[i - 1].ends_with(':')
                && lines[i - 2].starts_with("s_cbranch_")
                && lines[i + 1]
                    .strip_suffix(':')
                    .is_some_and(|l| lines[i - 2].ends_with(l))
        })
    };
    assert!(skippable(0..head), "the stagger barrier before the loop");
    assert!(skippable(back..lines.len()), "the re-join barrier after it");
}

/// The next K step goes global → registers (`buffer_load_dwordx4`: gfx942 has no 16-byte load into
/// LDS, so these load registers) → LDS (`ds_write_b128`) inside the hot loop, one 16-byte load and one
/// write per lane for each of the four bands (16×64 bf16 = 2 KiB per wave); lanes take no branch
/// (out-of-range chunks read zero), only the uniform ones around the ragged-edge fix-ups; the one LDS
/// buffer of A and B takes exactly gfx942's 64 KiB.
fn check_gfx942(cfg: &GemmConfig, r: &CodeObjectReport) {
    check(Arch::Cdna3, cfg, r);
    assert_eq!(r.lds_bytes, 2 * 2 * 128 * 64 * 2);
    let hot = r.hot_loop.as_ref().unwrap();
    let count = |p: &str| -> u32 {
        let ops = hot.mix.opcodes.iter();
        ops.filter(|(o, _)| o.starts_with(p)).map(|(_, n)| n).sum()
    };
    assert_eq!(
        count("buffer_load_dwordx4"),
        4 * 2,
        "next step staged in registers"
    );
    assert_eq!(count("ds_write_b128"), 4 * 2, "staged step written to LDS");
    // The loop's own branch and, per global load, one uniform branch (scalar condition) around its
    // ragged-edge fix-up, which only a K step crossing the last column of A or B takes.
    let uniform = count("s_cbranch") - count("s_cbranch_exec");
    assert_eq!(
        uniform,
        1 + 4,
        "the back-edge and four ragged-edge branches"
    );
    assert_eq!(
        count("buffer_load_ushort"),
        0,
        "element loads stay off the steady state"
    );
}

#[test]
fn registry_gemm_fits_gfx942_with_register_staging() {
    let (cfg, src, arch) = registry_source("mi325x");
    assert_eq!((cfg.staging, cfg.k_step), (Staging::Registers, 64));
    let asm = clang_for(arch).compile_to_asm(&src, arch).unwrap();
    check_gfx942(&cfg, &analyze(&asm, arch, Some("gemm_bf16")).unwrap());
}

/// docs/architecture.md §6: the gfx942 source also builds with Debian's clang-19. Only clang-19
/// is searched for; where it is missing the test skips locally but fails in CI (`CI=true`), where
/// scripts/install-amdgpu-clang.sh installs it.
#[test]
fn registry_gemm_gfx942_builds_with_debian_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    assert_eq!(clang.source, ClangSource::DebianClang19);
    assert!(clang.version().unwrap().contains("version 19"));
    let (cfg, src, arch) = registry_source("mi325x");
    let out = clang
        .compile(&src, arch)
        .expect("clang-19 compiles the gfx942 GEMM");
    assert!(!out.code_object.is_empty());
    check_gfx942(&cfg, &analyze(&out.asm, arch, Some("gemm_bf16")).unwrap());
}

/// The registry's attn_fwd as `kittens compile` configures it per GPU (`KernelEntry::build_for_gpu`), lowered
/// and compiled for both CDNA targets: zero spills and scratch, LDS = the K/V rings plus the per-wave
/// scratch of the P remap (f32 scores → bf16 MFMA operand), within the budget; per KV step the hot loop
/// holds the MFMAs of `Sᵀ = K·Qᵀ` (kv × q_rows over d) and `Oᵀ += Vᵀ·P` (d × q_rows over kv):
/// 2·kv·q_rows·d / (16·16·k) with k the MFMA's K.
#[test]
fn registry_attention_fits_both_targets() {
    use kittens_kernels::attn_fwd::AttnConfig;
    let info = kittens_kernels::by_name("attn_fwd").unwrap();
    for gpu in ["mi355x", "mi300x"] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let kernel = info.build_for_gpu(g).unwrap();
        let cfg = AttnConfig::for_gpu(g);
        // HipKittens E.3's 64-key block where a ring of three fits (gfx950), 32 keys in two slots on
        // gfx942's 64 KiB.
        let (want_kv, slots) = if g.arch == Arch::Cdna4 {
            (64, 3)
        } else {
            (32, 2)
        };
        assert_eq!(cfg.kv_block, want_kv, "{gpu}");
        let src = lower(&kernel, g.arch).expect("attn_fwd lowers").source;
        let asm = clang_for(g.arch).compile_to_asm(&src, g.arch).unwrap();
        let r = analyze(&asm, g.arch, Some("attn_fwd")).unwrap();
        eprintln!(
            "{}: {}",
            g.arch.target(),
            serde_json::to_string(&r).unwrap()
        );
        assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
        assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
        let (kv, qr, d) = (cfg.kv_block, cfg.q_rows, cfg.dim);
        // The P scratch holds one score tile: a whole block, or half of one where the 64-key
        // blocks are taken in halves (gfx950).
        let p_keys = if slots == 3 { kv / 2 } else { kv };
        assert_eq!(
            r.lds_bytes,
            slots * 2 * kv * d * 2 + kernel.waves * p_keys * qr * 2
        );
        let k_mfma = if g.arch == Arch::Cdna4 { 32 } else { 16 };
        let mfma = bf16_mfma_opcode(g.arch).unwrap();
        let hot = r.hot_loop.as_ref().expect("a hot loop");
        assert_eq!(
            hot.mix.opcodes.get(mfma).copied(),
            Some(2 * kv * qr * d / (16 * 16 * k_mfma)),
            "{}",
            g.arch.target()
        );
        // gfx950 loads the column-layout V with ds_read_b64_tr_b16: 4 of each lane's 8 keys per
        // instruction, over the (kv/32)·(d/16) base tiles (HipKittens D.1); gfx942 lacks it.
        let tr = hot.mix.opcodes.get("ds_read_b64_tr_b16").copied();
        let want = (g.arch == Arch::Cdna4).then_some(kv / 32 * (d / 16) * 2);
        assert_eq!(tr, want, "{}", g.arch.target());
    }
}

/// The attention with the log-sum-exp output (the f32 vector store) and RTZ output, and on gfx942
/// also with the bottom-right causal mask (the floored running max, the guarded reciprocal),
/// compiles without spills or scratch and within the LDS budget. (On gfx950 the bottom-right mask
/// spills 2 VGPRs, 3 with the log-sum-exp, outside the hot loop: not yet fixed.)
#[test]
fn attention_with_lse_and_bottom_right_fits_both_targets() {
    use kittens_ir::Rounding;
    use kittens_kernels::attn_fwd::{build, AttnConfig};
    for (gpu, bottom_right, lse, rounding) in [
        ("mi355x", false, true, Rounding::Rtz),
        ("mi355x", false, false, Rounding::Rtna),
        ("mi300x", true, true, Rounding::Rtz),
    ] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let kernel = build(&AttnConfig {
            causal: true,
            bottom_right,
            lse,
            rounding,
            ..AttnConfig::for_gpu(g)
        })
        .unwrap();
        let src = lower(&kernel, g.arch).expect("attn_fwd lowers").source;
        assert_eq!(src.contains("g_lse["), lse, "the log-sum-exp store");
        let asm = clang_for(g.arch).compile_to_asm(&src, g.arch).unwrap();
        let r = analyze(&asm, g.arch, Some(&kernel.name)).unwrap();
        eprintln!(
            "{}: {}",
            g.arch.target(),
            serde_json::to_string(&r).unwrap()
        );
        assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
        assert!(r.lds_bytes <= r.lds_budget_bytes, "{r:?}");
    }
}

/// The gfx942 attention source also builds with Debian's clang-19, with no spills and the MFMAs kept.
#[test]
fn registry_attention_gfx942_builds_with_debian_clang19() {
    let Some(clang) = debian_clang19() else {
        return;
    };
    let g = kittens_hw::gpu("mi300x").unwrap();
    let kernel = kittens_kernels::by_name("attn_fwd")
        .unwrap()
        .build_for_gpu(g)
        .unwrap();
    let out = clang
        .compile(&lower(&kernel, Arch::Cdna3).unwrap().source, Arch::Cdna3)
        .expect("clang-19 compiles the gfx942 attention");
    let r = analyze(&out.asm, Arch::Cdna3, Some("attn_fwd")).unwrap();
    assert!(
        r.within_budget() && r.vgpr_spill == 0 && r.scratch_bytes == 0,
        "{r:?}"
    );
    let hot = r.hot_loop.expect("a hot loop");
    assert!(
        hot.mix
            .opcodes
            .get("v_mfma_f32_16x16x16_bf16")
            .copied()
            .unwrap_or(0)
            > 0
    );
}
