//! The attention kernel's schedule is hazard-free under the schedule analysis, causal or not.

use kittens_ir::analysis::{analyze, Options};
use kittens_kernels::attn_fwd::{build, AttnConfig};

#[test]
fn attention_schedule_has_no_hazard() {
    for causal in [false, true] {
        let cfg = AttnConfig {
            dim: 64,
            q_rows: 16,
            kv_block: 32,
            causal,
            ..AttnConfig::default()
        };
        let k = build(&cfg).unwrap();
        // batch 1, 2 heads sharing one KV head, 200 keys: 7 KV blocks, the last one partial.
        let r = analyze(
            &k,
            &Options {
                params: vec![1, 2, 1, 200],
                block: vec![0, 1, 1],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(r.hazards.is_empty(), "causal={causal}: {:?}", r.hazards);
        assert!(r.waits.iter().all(|w| w.max_outstanding <= 4));
    }
}
