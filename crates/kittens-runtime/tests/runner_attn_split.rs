//! The attention forward's key split (`kittens_kernels::attn_fwd::split`) on the CPU interpreter: the
//! split kernel and its merge, run as the runner's two launches, judged by the same rule as the
//! unsplit attention (O and the log-sum-exp each at most 2x the PyTorch-style bf16 forward's error
//! against the f64 reference, plus a floor), for the AMD program (8-wave ping-pong), MI300X-attn's
//! kernel (`--variant seed001`) and the Hopper program (producer/consumer), at odd lengths (Nq 1, 3,
//! 77; Nkv 1, 63, 1000, 3001), causal top-left and bottom-right (rows with no key at all: O = 0 and
//! lse = −∞ exactly, or the check fails), GQA, D64/D128, logits past ±64, and 2 to 8 parts, more
//! parts than key blocks included.

use kittens_hw::Target;
use kittens_ir::Rounding;
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::attn_fwd::problem::SEED001;
use kittens_kernels::attn_fwd::split::KvSplits;
use kittens_kernels::attn_fwd::AttnConfig;
use kittens_kernels::problem::KernelProblem;
use kittens_kernels::problem::RunSettings;
use kittens_runtime::runner::{self, Interpreter, RunReport};

#[derive(Debug, Clone, Copy)]
struct Case {
    heads: usize,
    heads_kv: usize,
    seq: usize,
    seq_kv: usize,
    dim: usize,
    causal: Option<bool>, // None: no mask; Some(bottom_right)
    splits: u32,
}

fn case(heads: usize, heads_kv: usize, seq: usize, seq_kv: usize, dim: usize) -> Case {
    Case {
        heads,
        heads_kv,
        seq,
        seq_kv,
        dim,
        causal: None,
        splits: 2,
    }
}

fn problem(c: &Case, cfg: AttnConfig, layout: AttnLayout) -> AttnProblem {
    AttnProblem {
        args: AttnArgs {
            attn: AttnShape {
                batch: 1,
                heads: c.heads,
                heads_kv: c.heads_kv,
                seq: c.seq,
                dim: c.dim,
                layout,
            },
            seq_kv: Some(c.seq_kv),
            causal: c.causal.is_some(),
            bottom_right: c.causal == Some(true),
            ..Default::default()
        },
        lse: true,
        kv_splits: KvSplits::Fixed(c.splits),
        attn_cfg: cfg,
        run: RunSettings {
            // Inputs to ±8: logits past ±64 at both head dimensions.
            input_scale: 8.0,
            seed: (c.seq * 31 + c.seq_kv * 7 + c.dim + c.splits as usize) as u64,
            ..RunSettings::default()
        },
        ..AttnProblem::default()
    }
}

fn entry() -> &'static kittens_kernels::registry::KernelEntry {
    kittens_kernels::by_name("attn_fwd").unwrap()
}

/// Runs `c` split in `c.splits` parts and asserts both outputs pass the rule.
fn check(c: &Case, cfg: AttnConfig, layout: AttnLayout) {
    judge(c, &problem(c, cfg, layout), layout);
}

/// Runs problem `p` of case `c` and asserts both outputs pass the rule; the report.
fn judge(c: &Case, p: &dyn KernelProblem, layout: AttnLayout) -> RunReport {
    let r = runner::run(entry(), p, &Interpreter).unwrap();
    let what = format!("{} {c:?} {layout:?}", r.shape["program"]);
    assert_eq!(r.shape["kv_splits"], c.splits, "{what}");
    assert_eq!(
        r.then,
        [format!("attn_fwd_merge{}_lse", c.splits)],
        "{what}: the merge is the second launch"
    );
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["o", "lse"], "{what}");
    for o in &r.outputs {
        eprintln!(
            "{what}: {} rel_err {:.2e} (baseline {:.2e})",
            o.name,
            o.error.rel_err,
            o.baseline.map_or(0.0, |b| b.rel_err)
        );
    }
    assert_eq!(r.checks.len(), 4, "{what}");
    assert!(r.passed, "{what}: {:?}", r.failures());
    // A handful of logits may stay below 64 (one key); any few hundred reach past it.
    if c.heads * c.seq * c.seq_kv >= 600 {
        assert!(r.max_abs_logit.unwrap_or(0.0) > 64.0, "{what}: logits");
    }
    r
}

/// A case with its mask (`None`, or `Some(bottom_right)`) and parts.
fn split_case(
    heads: usize,
    heads_kv: usize,
    seq: usize,
    seq_kv: usize,
    dim: usize,
    causal: Option<bool>,
    splits: u32,
) -> Case {
    Case {
        causal,
        splits,
        ..case(heads, heads_kv, seq, seq_kv, dim)
    }
}

/// The CPU configuration of the AMD program: 8 waves of 16 queries, 32-key blocks.
fn ping_pong() -> AttnConfig {
    AttnProblem::default().attn_cfg
}

/// The Hopper program as configured for the H100: 128 queries, 128-key blocks.
fn producer_consumer() -> AttnConfig {
    AttnConfig::for_gpu(kittens_hw::gpu("h100").unwrap())
}

#[test]
fn ping_pong_split_passes_the_rule() {
    let br = |c: Case, bottom_right| Case {
        causal: Some(bottom_right),
        ..c
    };
    let g = |c: Case, splits| Case { splits, ..c };
    for (c, layout) in [
        // Decoding: one query against 3001 keys (94 blocks of 32) in 8 parts, GQA 4/1.
        (g(case(4, 1, 1, 3001, 128), 8), AttnLayout::Bshd),
        // Three queries, bottom-right (the last 3 keys' diagonal), 3 parts, D64.
        (g(br(case(2, 2, 3, 1000, 64), true), 3), AttnLayout::Bhsd),
        // 77 queries top-left against 1000 keys: the causal limit leaves 3 blocks, split in 5
        // (parts 3 and 4 have no block: lse −∞ and O 0, merged away).
        (g(br(case(2, 1, 77, 1000, 128), false), 5), AttnLayout::Bshd),
        // More queries than keys, bottom-right: 14 rows keep no key at all (O 0, lse −∞ exactly).
        (g(br(case(2, 1, 77, 63, 64), true), 4), AttnLayout::Bhsd),
        // One key, 6 parts: five parts have none.
        (g(case(2, 2, 3, 1, 64), 6), AttnLayout::Bshd),
        // 63 keys (two blocks) in 7 parts, no mask.
        (g(case(2, 1, 77, 63, 128), 7), AttnLayout::Bhsd),
        // Top-left with fewer keys than queries: rows past the keys keep all 63.
        (g(br(case(1, 1, 77, 63, 64), false), 2), AttnLayout::Bshd),
    ] {
        check(&c, ping_pong(), layout);
    }
}

/// MI300X-attn's kernel (384-query blocks, 64-key steps, V given transposed) split by the same
/// mechanism, 2 to 5 parts.
#[test]
fn seed001_split_passes_the_rule() {
    let c = split_case;
    for (c, layout, rounding) in [
        // Decoding: one query against 3001 keys (47 blocks) in 5 parts, GQA 4/1.
        (
            c(4, 1, 1, 3001, 128, None, 5),
            AttnLayout::Bshd,
            Rounding::Rtne,
        ),
        // More queries than keys, bottom-right: 14 rows keep no key at all; 63 keys are one
        // block, so parts 1-3 have none.
        (
            c(2, 1, 77, 63, 64, Some(true), 4),
            AttnLayout::Bhsd,
            Rounding::Rtne,
        ),
        // Three queries bottom-right against 1000 keys (16 blocks) in 3 parts, RTZ output.
        (
            c(2, 2, 3, 1000, 64, Some(true), 3),
            AttnLayout::Bshd,
            Rounding::Rtz,
        ),
        // 77 queries top-left against 1000 keys: the block's causal limit leaves 6 blocks, 2
        // parts of 3; the rows below 192 keep no key of the second.
        (
            c(2, 1, 77, 1000, 128, Some(false), 2),
            AttnLayout::Bhsd,
            Rounding::Rtna,
        ),
    ] {
        let cfg = AttnConfig {
            rounding,
            ..ping_pong()
        };
        let p = AttnProblem {
            run: RunSettings {
                variant: Some(SEED001),
                ..problem(&c, cfg, layout).run
            },
            ..problem(&c, cfg, layout)
        };
        let r = judge(&c, &p, layout);
        assert_eq!(r.shape["program"], "mi300x");
        assert_eq!(
            r.kernel,
            format!("attn_fwd_mi300x{}_split{}", mask(&c), c.splits)
        );
    }
}

/// The kernel name's mask part.
fn mask(c: &Case) -> &'static str {
    match c.causal {
        None => "",
        Some(false) => "_causal",
        Some(true) => "_causal_br",
    }
}

#[test]
fn producer_consumer_split_passes_the_rule() {
    let c = split_case;
    for (c, layout) in [
        // Decoding with 3001 keys (24 blocks of 128) in 4 parts, GQA 4/2.
        (c(4, 2, 1, 3001, 128, None, 4), AttnLayout::Bshd),
        // 16 queries bottom-right against 1000 keys (8 blocks), 3 parts of 3, 3, 2.
        (c(2, 1, 16, 1000, 64, Some(true), 3), AttnLayout::Bhsd),
        // 63 keys are one block: 8 parts, seven with none.
        (c(2, 2, 77, 63, 128, Some(true), 8), AttnLayout::Bshd),
        // Top-left, 77 queries of one block against 3001 keys: the block needs one key block.
        (c(2, 1, 77, 3001, 64, Some(false), 2), AttnLayout::Bhsd),
    ] {
        check(&c, producer_consumer(), layout);
    }
}

/// The merge rounds the output as configured (RTZ here), as the unsplit kernel does: the baseline
/// rounds the same way and the rule holds.
#[test]
fn the_merge_rounds_as_configured() {
    for rounding in [Rounding::Rtz, Rounding::Rtna] {
        let cfg = AttnConfig {
            rounding,
            ..ping_pong()
        };
        let c = Case {
            splits: 3,
            causal: Some(true),
            ..case(2, 1, 3, 1000, 64)
        };
        check(&c, cfg, AttnLayout::Bshd);
    }
}

/// `--kv-splits auto` plans for the GPU: decoding B1 H32 against 32768 keys on the H100 splits
/// (132 SMs, 32 blocks), a full grid does not; the CPU plans for the GPU of its schedule.
#[test]
fn auto_splits_decoding_and_not_a_full_grid() {
    let plan = |heads, seq, seq_kv, cfg: AttnConfig, target| {
        let p = AttnProblem {
            args: AttnArgs {
                attn: AttnShape {
                    batch: 1,
                    heads,
                    heads_kv: heads,
                    seq,
                    dim: 128,
                    layout: AttnLayout::Bshd,
                },
                seq_kv: Some(seq_kv),
                ..Default::default()
            },
            kv_splits: KvSplits::Auto,
            attn_cfg: cfg,
            ..AttnProblem::default()
        };
        let plan = p.plan(target).unwrap();
        plan.shape["kv_splits"].as_u64().unwrap()
    };
    let pc = producer_consumer();
    assert_eq!(plan(32, 1, 32768, pc, Target::Cpu), 4);
    assert_eq!(plan(32, 1, 32768, pc, Target::Sm90a), 4);
    // 32 heads × 32 query blocks fill 1024 blocks: no split.
    assert_eq!(plan(32, 4096, 4096, pc, Target::Sm90a), 1);
    // MI300X's 304 CUs and the ping-pong's 256-query blocks on gfx942.
    let g = plan(32, 1, 32768, ping_pong(), Target::Gfx942);
    assert!((2..=16).contains(&g), "gfx942 decoding split {g}");
}
