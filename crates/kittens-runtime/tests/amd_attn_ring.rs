//! gfx950's attention with HipKittens E.3's 64-key K/V block in a ring of three slots (the block after
//! next is prefetched, the next one lands at the end of the iteration): through the host emulation it
//! passes the attention test rule against f64 at lengths that wrap the ring and end in a partial block,
//! causal or not, BSHD and BHSD, with grouped KV heads and large logits.

use kittens_hw::Target;
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
