//! gfx950's attention with HipKittens E.3's 64-key K/V block in a ring of three slots (the block after
//! next is prefetched, the next one lands at the end of the iteration): through the host emulation it
//! passes the attention test rule against f64 at lengths that wrap the ring and end in a partial block,
//! causal or not, BSHD and BHSD, with grouped KV heads and large logits. Its P·V cluster carries the
//! softmax's running sum beside the MFMAs, which the compiler interleaves (no run of more than a few
//! MFMAs in the hot loop, no spills); gfx942's program asks for no interleave and keeps its fixed order.

#[path = "amd_support/common.rs"]
mod amd_common;

use kittens_hw::{Arch, Target};
use kittens_kernels::attn_fwd::AttnLayout;
use kittens_kernels::problem::Problem;
use kittens_kernels::reference::AttnShape;
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
        let p = Problem {
            attn: AttnShape {
                batch: 1,
                heads: 2,
                heads_kv: 1,
                seq,
                dim: 128,
                layout,
            },
            causal,
            input_scale: 4.0,
            seed: seq as u64,
            ..Problem::default()
        };
        let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert_eq!(r.shape["kv_block"], 64, "{:?}", r.shape);
        assert!(r.passed, "seq {seq} causal {causal}: {r:?}");
        assert!(r.error.rel_err > 0.0, "seq {seq}: {r:?}");
    }
}

#[test]
fn gfx950_attention_interleaves_the_softmax_sum_with_pv() {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let k = entry.build_for(Target::Gfx950).unwrap();
    let src = kittens_codegen::hip::lower(&k, Arch::Cdna4).unwrap().source;
    assert!(src.contains(
        "sched_group_barrier<SCHED_MFMA, 1, 0>(); sched_group_barrier<SCHED_VALU, 1, 0>();"
    ));
    let asm = amd_common::clang_for(Arch::Cdna4)
        .compile_to_asm(&src, Arch::Cdna4)
        .unwrap();
    let r = kittens_runtime::amd::analyze(&asm, Arch::Cdna4, Some("attn_fwd")).unwrap();
    assert_eq!((r.vgpr_spill, r.sgpr_spill, r.scratch_bytes), (0, 0, 0));
    let hot = r.hot_loop.expect("a hot loop");
    eprintln!(
        "gfx950 attn hot loop: {}",
        serde_json::to_string(&hot).unwrap()
    );
    assert_eq!(hot.mix.mfma, 64);
    assert!(hot.longest_mfma_run <= 4, "{hot:?}");
    let gfx942 = entry.build_for(Target::Gfx942).unwrap();
    let src = kittens_codegen::hip::lower(&gfx942, Arch::Cdna3)
        .unwrap()
        .source;
    assert!(!src.contains("_sched(r_"), "gfx942 keeps the asm MFMAs");
}
