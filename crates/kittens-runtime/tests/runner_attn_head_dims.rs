//! The Hopper attention forward at head dims 32 and 96 (tiles padded to 64 and 128 columns, the
//! columns past the head dim read as zeros and stored nowhere, `attn_fwd::producer_consumer`) on the
//! CPU interpreter against the f64 references by the test rule, at odd lengths with GQA, with and
//! without a causal mask and ALiBi. (The backward's launches at 96: `kittens-kernels`'
//! `tests/attn_bwd_hopper.rs`, `head_dim_96`.)

use kittens_kernels::attn::score::AttnArgs;
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::AttnConfig;
use kittens_kernels::problem::RunSettings;
use kittens_kernels::reference::AttnShape;
use kittens_runtime::runner::{self, Interpreter};

fn problem(dim: usize, seq_q: usize, seq_kv: usize, causal: bool, alibi: bool) -> AttnProblem {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    AttnProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads: 4,
                heads_kv: 2,
                seq: seq_q,
                dim,
                layout: AttnLayout::Bshd,
            },
            seq_kv: Some(seq_kv),
            causal,
            bottom_right: causal,
            alibi,
            ..AttnArgs::default()
        },
        lse: true,
        attn_cfg: AttnConfig {
            kv_block: 64,
            ..AttnConfig::for_gpu(h100)
        },
        run: RunSettings {
            input_scale: 2.0,
            seed: (dim * 31 + seq_q) as u64,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    }
}

#[test]
fn forward_head_dims_32_and_96() {
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    for dim in [32, 96] {
        for (seq_q, seq_kv, causal, alibi) in [(150, 133, false, false), (77, 200, true, true)] {
            let p = problem(dim, seq_q, seq_kv, causal, alibi);
            let what = format!("D{dim} Nq{seq_q} Nkv{seq_kv} causal {causal} alibi {alibi}");
            let r = runner::run(entry, &p, &Interpreter).unwrap_or_else(|e| panic!("{what}: {e}"));
            for o in &r.outputs {
                eprintln!("{what}: {} {:?}", o.name, o.error);
            }
            assert!(r.passed, "{what}: {:?}", r.failures());
        }
    }
}
