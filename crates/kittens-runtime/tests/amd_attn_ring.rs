//! gfx950's attention with HipKittens E.3's 64-key K/V block in a ring of three slots (the block after
//! next is prefetched, the next one lands at the end of the iteration): through the host emulation it
//! passes the attention test rule against f64 at lengths that wrap the ring and end in a partial block,
//! causal or not, BSHD and BHSD, with grouped KV heads and large logits. Each block is two 32-key
//! halves whose MFMAs and softmax interleave in the code object (one half's `K·Qᵀ` MFMAs between the
//! other's exponentials, read from the decoded machine code); gfx942's program asks for no interleave
//! and keeps its fixed order.

#[path = "amd_support/common.rs"]
mod amd_common;

use kittens_hw::{Arch, Target};
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{run, HipEmu};

#[test]
fn gfx950_attention_with_64_key_blocks_is_right_at_odd_lengths() {
    let emu = HipEmu::new(Target::Gfx950).unwrap();
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    for (seq, causal, layout) in [
        (133, false, AttnLayout::Bshd),
        (257, true, AttnLayout::Bhsd),
        (65, true, AttnLayout::Bshd),
    ] {
        let p = AttnProblem {
            args: AttnArgs {
                attn: AttnShape {
                    batch: 1,
                    heads: 2,
                    heads_kv: 1,
                    seq,
                    dim: 128,
                    layout,
                },
                causal,
                ..Default::default()
            },
            run: RunSettings {
                input_scale: 4.0,
                seed: seq as u64,
                ..RunSettings::default()
            },
            ..AttnProblem::default()
        };
        let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert_eq!(r.shape["kv_block"], 64, "{:?}", r.shape);
        assert!(r.passed, "seq {seq} causal {causal}: {r:?}");
        assert!(r.error.rel_err > 0.0, "seq {seq}: {r:?}");
    }
}

/// The compiled hot loop keeps the block's 64 MFMAs, no spills, and the MFMAs spread out (the
/// compiler schedules them around the softmax, no long run).
#[test]
fn gfx950_attention_hot_loop_fits() {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let k = entry.build_for(Target::Gfx950).unwrap();
    let src = kittens_codegen::hip::lower(&k, Arch::Cdna4).unwrap().source;
    let asm = amd_common::clang_for(Arch::Cdna4)
        .compile_to_asm(&src, Arch::Cdna4)
        .unwrap();
    // The compiler got the interleave: one MFMA group (mask 0x8) then one transcendental (0x400).
    let hints: Vec<&str> = asm
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("; sched_group_barrier"))
        .collect();
    assert!(
        hints.windows(2).any(|w| w
            == [
                "; sched_group_barrier mask(0x00000008) size(1) SyncID(0)",
                "; sched_group_barrier mask(0x00000400) size(1) SyncID(0)"
            ]),
        "{hints:?}"
    );
    let r = kittens_runtime::amd::analyze(&asm, Arch::Cdna4, Some("attn_fwd")).unwrap();
    assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
    let hot = r.hot_loop.expect("a hot loop");
    eprintln!(
        "gfx950 attn hot loop: {}",
        serde_json::to_string(&hot).unwrap()
    );
    assert_eq!(hot.mix.mfma, 64);
    assert!(hot.longest_mfma_run <= 8, "{hot:?}");
    let gfx942 = entry.build_for(Target::Gfx942).unwrap();
    let src = kittens_codegen::hip::lower(&gfx942, Arch::Cdna3)
        .unwrap()
        .source;
    // Kept as text: both forms compile to the same v_mfma; only the source tells them apart.
    assert!(!src.contains("_sched(r_"), "gfx942 keeps the asm MFMAs");
}

/// The loop the code object spends its time in: the backward branch whose range (decoded machine
/// code, in issue order) holds the most MFMAs.
fn hot_loop(code: &[kittens_amdsim::Instr]) -> &[kittens_amdsim::Instr] {
    let is_mfma = |i: &kittens_amdsim::Instr| i.op.name().starts_with("v_mfma");
    code.iter()
        .enumerate()
        .filter_map(|(e, i)| {
            let t = i.branch_target()?;
            let s = code.iter().position(|x| i64::from(x.offset) == t)?;
            (s < e).then(|| &code[s..=e])
        })
        .max_by_key(|l| l.iter().filter(|i| is_mfma(i)).count())
        .expect("a loop")
}

/// HipKittens E.3's compute clusters in gfx950's code object: one half-block's `K·Qᵀ` MFMAs are
/// issued between the exponentials of the other half's softmax. Read from the machine code's
/// order: nearly a half-block's worth of `v_exp_f32` (32 keys × 32 queries / 64 lanes = 16; at
/// least 14) and some of the column maxima each sit between two MFMAs at most 12 instructions apart.
/// Before the half-blocks, every exponential of the loop came after its last `K·Qᵀ` MFMA and before
/// the first `P·V` one (none between).
#[test]
fn gfx950_attention_issues_the_softmax_between_mfmas() {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let k = entry.build_for(Target::Gfx950).unwrap();
    let lowered = kittens_codegen::lower(&k, Target::Gfx950).unwrap();
    let co = amd_common::clang_for(Arch::Cdna4)
        .compile(&lowered.source, Arch::Cdna4)
        .unwrap();
    let co = kittens_amdsim::Kernel::load(&co.code_object).unwrap();
    let code = kittens_amdsim::decode_all(&co.code, co.arch).unwrap();
    let body = hot_loop(&code);
    let names: Vec<&str> = body.iter().map(|i| i.op.name()).collect();
    let mfma: Vec<usize> = (0..names.len())
        .filter(|&p| names[p].starts_with("v_mfma"))
        .collect();
    assert_eq!(mfma.len(), 64, "{names:?}");
    let between = |p: usize| {
        let before = mfma.iter().rev().find(|&&m| m < p);
        let after = mfma.iter().find(|&&m| m > p);
        matches!((before, after), (Some(&b), Some(&a)) if a - b <= 12)
    };
    let count = |want: &[&str]| {
        let at: Vec<usize> = (0..names.len())
            .filter(|&p| want.contains(&names[p]))
            .collect();
        (at.iter().filter(|&&p| between(p)).count(), at.len())
    };
    let (exp_in, exp_all) = count(&["v_exp_f32"]);
    let (max_in, max_all) = count(&["v_max_f32", "v_max3_f32"]);
    let order: String = names
        .iter()
        .map(|n| match *n {
            n if n.starts_with("v_mfma") => 'M',
            "v_exp_f32" => 'E',
            "v_max_f32" | "v_max3_f32" => 'X',
            _ => '.',
        })
        .collect();
    eprintln!("hot loop ({} instructions): {order}", names.len());
    eprintln!("exp2 between MFMAs: {exp_in} of {exp_all}; max: {max_in} of {max_all}");
    assert!(exp_all >= 32, "{order}");
    assert!(exp_in >= 14, "{order}");
    assert!(max_in >= 2, "{order}");
}
