//! The Hopper backward's two launches (key blocks for dK and dV, query blocks for dQ) on the CPU
//! interpreter against the f64 gradients, each judged by the test rule against the PyTorch-style bf16
//! backward, at lengths that are no multiple of the 128-row blocks or 64-row steps, with query and key
//! lengths that differ, MHA and GQA, both masks and both layouts, head dimensions 64 and 128; and the
//! FlashAttention-3 form (`BwdSchedule::HopperAtomicPre`, `HopperAtomicKv`, `HopperAtomicDq`: D,
//! the key blocks adding dQ in f32, the conversion) at the same shapes; and FlashAttention's
//! options (`kittens_kernels::attn::score`: a scale, a soft cap, a sliding window, each alone and all
//! together) against the f64 gradients of the same options; ALiBi's slopes (read from a tensor) alone
//! and with every other option.

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::attn::score::{AttnOptions, Logits, Window};
use kittens_kernels::attn::{AttnLayout, BwdShape, Causal};
use kittens_kernels::attn_bwd::{build, delta, BwdConfig, BwdSchedule};
use kittens_kernels::problem::random_scaled;
use kittens_kernels::reference::{compare, judge, Tolerance};
use kittens_kernels::reference_bwd;
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// `empty`: the log-sum-exp given for a query that keeps no key (the f64 forward's own value when
/// `None`; the forward kernels write −∞). Returns the wave ops the launches ran.
fn check_with(sh: BwdShape, causal: Causal, scale: f32, empty: Option<f32>, atomic: bool) -> u64 {
    check_opts(sh, causal, scale, empty, atomic, &AttnOptions::default())
}

/// [`check_with`] with the options `opts`, against the f64 gradients of the same options.
fn check_opts(
    sh: BwdShape,
    causal: Causal,
    scale: f32,
    empty: Option<f32>,
    atomic: bool,
    opts: &AttnOptions,
) -> u64 {
    check_step(sh, causal, scale, empty, atomic, opts, 64)
}

/// [`check_opts`] with `step` queries per key-block step (`BwdConfig::hopper_step`).
fn check_step(
    sh: BwdShape,
    causal: Causal,
    scale: f32,
    empty: Option<f32>,
    atomic: bool,
    opts: &AttnOptions,
    step: u32,
) -> u64 {
    let what = format!(
        "{sh:?} {causal:?} scale {scale} empty rows {empty:?} atomic dQ {atomic} {opts:?} \
         {step}-query steps"
    );
    let mut rng = SmallRng::seed_from_u64((sh.seq_q * 977 + sh.seq_kv) as u64);
    let q = random_scaled(&mut rng, sh.q_len(), DType::Bf16, scale);
    let k = random_scaled(&mut rng, sh.kv_len(), DType::Bf16, scale);
    let v = random_scaled(&mut rng, sh.kv_len(), DType::Bf16, 1.0);
    let d_o = random_scaled(&mut rng, sh.q_len(), DType::Bf16, 1.0);
    let f = reference_bwd::forward_with(&q, &k, &v, &sh, causal, opts);
    let o: Vec<f32> =
        f.o.iter()
            .map(|&x| round(x as f32, DType::Bf16, Rounding::Rtne))
            .collect();
    let lse: Vec<f32> = f
        .lse
        .iter()
        .map(|&x| match empty {
            Some(e) if !x.is_finite() => e,
            _ => x as f32,
        })
        .collect();
    let dl = delta(&o, &d_o, &sh);
    let params: Vec<i64> = [sh.batch, sh.heads, sh.heads_kv, sh.seq_q, sh.seq_kv]
        .iter()
        .map(|&x| x as i64)
        .collect();
    let cfg = |schedule| BwdConfig {
        schedule,
        dim: sh.dim as u32,
        causal,
        layout: sh.layout,
        logits: opts.logits,
        window: opts.window,
        alibi: opts.alibi.is_some(),
        hopper_step: step,
        ..BwdConfig::default()
    };
    let slopes = opts.alibi.clone().unwrap_or_default();
    let wave_ops = std::cell::Cell::new(0u64);
    // Tensors by the names the programs declare, in their declaration order.
    let run = |kernel: &kittens_ir::Kernel, named: &[(&str, &Vec<f32>)]| -> Vec<Vec<f32>> {
        let mut t: Vec<Vec<f32>> = kernel
            .globals
            .iter()
            .map(|g| {
                named
                    .iter()
                    .find(|(n, _)| *n == g.name)
                    .map(|(_, v)| (*v).clone())
                    .unwrap_or_else(|| panic!("{what}: no tensor `{}`", g.name))
            })
            .collect();
        let stats = kittens_ir::interp::run(kernel, &params, &mut t)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        wave_ops.set(wave_ops.get() + stats.wave_ops);
        t
    };
    let index = |kernel: &kittens_ir::Kernel, name: &str| {
        kernel.globals.iter().position(|g| g.name == name).unwrap()
    };
    let (nan_q, nan_kv, nan_s) = (
        vec![f32::NAN; sh.q_len()],
        vec![f32::NAN; sh.kv_len()],
        vec![f32::NAN; sh.lse_len()],
    );
    // The key blocks: dK and dV, and in the atomic form dQ added into `acc` (`dq_acc`; the two-launch
    // kernel declares no such tensor and the entry is unused).
    let key_blocks = |schedule, d_kernel: &Vec<f32>, acc: &Vec<f32>| {
        let kv = build(&cfg(schedule)).unwrap();
        let t = run(
            &kv,
            &[
                ("q", &q),
                ("k", &k),
                ("v", &v),
                ("do", &d_o),
                ("lse", &lse),
                ("delta", d_kernel),
                ("alibi", &slopes),
                ("dk", &nan_kv),
                ("dv", &nan_kv),
                ("dq_acc", acc),
            ],
        );
        let acc = kv.globals.iter().position(|g| g.name == "dq_acc");
        (
            t[index(&kv, "dk")].clone(),
            t[index(&kv, "dv")].clone(),
            acc.map(|i| t[i].clone()),
        )
    };
    let (dq, dk, dv, d_kernel) = if atomic {
        // FlashAttention-3's form: D and the zeroed accumulator, the key blocks adding dQ, the
        // conversion.
        let pre = build(&cfg(BwdSchedule::HopperAtomicPre)).unwrap();
        let nan_acc = vec![f32::NAN; sh.q_len()];
        let t = run(
            &pre,
            &[
                ("o", &o),
                ("do", &d_o),
                ("delta", &nan_s),
                ("dq_acc", &nan_acc),
            ],
        );
        let (d_kernel, acc) = (
            t[index(&pre, "delta")].clone(),
            t[index(&pre, "dq_acc")].clone(),
        );
        assert!(acc.iter().all(|&x| x == 0.0), "{what}: dq_acc not zeroed");
        let (dk, dv, acc) = key_blocks(BwdSchedule::HopperAtomicKv, &d_kernel, &acc);
        let acc = acc.expect("the atomic key blocks declare dq_acc");
        let conv = build(&cfg(BwdSchedule::HopperAtomicDq)).unwrap();
        let t = run(&conv, &[("dq_acc", &acc), ("dq", &nan_q)]);
        (t[index(&conv, "dq")].clone(), dk, dv, d_kernel)
    } else {
        // The query blocks first: dQ, and D for the key blocks.
        let qk = build(&cfg(BwdSchedule::HopperQ)).unwrap();
        let t = run(
            &qk,
            &[
                ("q", &q),
                ("k", &k),
                ("v", &v),
                ("do", &d_o),
                ("o", &o),
                ("lse", &lse),
                ("alibi", &slopes),
                ("delta", &nan_s),
                ("dq", &nan_q),
            ],
        );
        let (dq, d_kernel) = (t[index(&qk, "dq")].clone(), t[index(&qk, "delta")].clone());
        let (dk, dv, _) = key_blocks(BwdSchedule::HopperKv, &d_kernel, &nan_q);
        (dq, dk, dv, d_kernel)
    };
    // D as the kernel wrote it (f32 sums of the bf16 products) against the f64 sums.
    let e = compare(
        &d_kernel,
        &dl.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
    );
    assert!(e.rel_err < 1e-5, "{what}: D {e:?}");
    let g = reference_bwd::backward_with(&q, &k, &v, &d_o, &sh, causal, opts);
    let base = reference_bwd::backward_bf16_baseline_with(&q, &k, &v, &d_o, &sh, causal, opts);
    for (name, ours, reference, baseline) in [
        ("dq", &dq, &g.dq, &base[0]),
        ("dk", &dk, &g.dk, &base[1]),
        ("dv", &dv, &g.dv, &base[2]),
    ] {
        let e = compare(ours, reference);
        let b = compare(baseline, reference);
        eprintln!("{what}: {name} {e:?} baseline {b:?}");
        assert!(
            e.rel_err > 0.0 && e.rel_err.is_finite(),
            "{what}: {name} {e:?}"
        );
        for c in judge(Tolerance::Rule, &e, Some(&b), None) {
            assert!(c.verdict.passed, "{what}: {name} {c:?}");
        }
    }
    wave_ops.get()
}

/// Both Hopper forms: two launches (the query blocks recompute dQ) and three (dQ added atomically
/// by the key blocks).
fn check(sh: BwdShape, causal: Causal, scale: f32) {
    for atomic in [false, true] {
        check_with(sh, causal, scale, None, atomic);
    }
}

fn shape(
    heads: usize,
    heads_kv: usize,
    seq_q: usize,
    seq_kv: usize,
    dim: usize,
    layout: AttnLayout,
) -> BwdShape {
    BwdShape {
        batch: 1,
        heads,
        heads_kv,
        seq_q,
        seq_kv,
        dim,
        layout,
    }
}

#[test]
fn mha_d64_without_mask_and_causal() {
    check(shape(1, 1, 150, 133, 64, AttnLayout::Bshd), Causal::No, 1.0);
    check(
        shape(1, 1, 141, 141, 64, AttnLayout::Bhsd),
        Causal::TopLeft,
        1.0,
    );
}

#[test]
fn gqa_d128_both_alignments() {
    check(
        shape(4, 2, 70, 137, 128, AttnLayout::Bhsd),
        Causal::BottomRight,
        1.0,
    );
    check(
        shape(2, 1, 133, 70, 128, AttnLayout::Bshd),
        Causal::TopLeft,
        1.0,
    );
}

/// Logits past ±64 (inputs scaled by 8 at head dimension 64).
#[test]
fn large_logits() {
    check(shape(1, 1, 77, 90, 64, AttnLayout::Bshd), Causal::No, 8.0);
}

/// Bottom-right alignment with more queries than keys: the first queries keep no key (their dQ is 0
/// and they add nothing to dK, dV), whichever infinity their log-sum-exp is given as.
#[test]
fn queries_without_keys() {
    for empty in [None, Some(f32::NEG_INFINITY), Some(f32::INFINITY)] {
        check_with(
            shape(2, 2, 100, 40, 64, AttnLayout::Bshd),
            Causal::BottomRight,
            1.0,
            empty,
            true,
        );
        check_with(
            shape(2, 2, 100, 40, 64, AttnLayout::Bshd),
            Causal::BottomRight,
            1.0,
            empty,
            false,
        );
    }
}

/// Under a causal mask both launches pair their blocks long with short
/// (`KernelBuilder::pair_long_short`): with 3 and 4 blocks of 128 the pairs reorder them, an odd
/// count leaves the middle block alone; every block still runs once.
#[test]
fn causal_blocks_paired_long_with_short() {
    check(
        shape(1, 1, 300, 300, 64, AttnLayout::Bshd),
        Causal::TopLeft,
        1.0,
    );
    check(
        shape(2, 1, 390, 500, 64, AttnLayout::Bhsd),
        Causal::BottomRight,
        1.0,
    );
}

fn opts(scale: Option<f32>, softcap: Option<f32>, window: Option<(i64, i64)>) -> AttnOptions {
    AttnOptions {
        logits: Logits { scale, softcap },
        window: window.map(|(l, r)| Window::new(l, r).unwrap()),
        alibi: None,
    }
}

/// ALiBi slopes for `batch × heads`: fresh values of both signs and sizes (any values run: the
/// kernels read them from a tensor), one per head.
fn slopes(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    random_scaled(&mut rng, n, DType::F32, 0.5)
}

/// ALiBi alone at odd lengths (queries ≠ keys, no multiple of the blocks), GQA, head dims 64 and
/// 128, both layouts; with a causal mask; and with a scale, a soft cap and a window together.
#[test]
fn alibi() {
    let with = |o: AttnOptions, n: usize, seed: u64| AttnOptions {
        alibi: Some(slopes(n, seed)),
        ..o
    };
    let sh = shape(4, 2, 150, 133, 64, AttnLayout::Bshd);
    check_both(sh, Causal::No, 2.0, &with(opts(None, None, None), 4, 1));
    check_both(
        sh,
        Causal::BottomRight,
        2.0,
        &with(opts(None, None, None), 4, 2),
    );
    let sh = shape(4, 1, 70, 201, 128, AttnLayout::Bhsd);
    check_both(
        sh,
        Causal::TopLeft,
        2.0,
        &with(opts(Some(0.2), None, None), 4, 3),
    );
    let sh = shape(2, 2, 211, 300, 64, AttnLayout::Bhsd);
    let o = with(opts(Some(0.1), Some(5.0), Some((90, 20))), 2, 4);
    check_both(sh, Causal::BottomRight, 2.0, &o);
}

/// [`check_opts`] in both Hopper forms (the atomic one refuses a soft cap past head dimension 64);
/// the wave ops of the two-launch form.
fn check_both(sh: BwdShape, causal: Causal, input: f32, o: &AttnOptions) -> u64 {
    if o.logits.softcap.is_none() || sh.dim == 64 {
        check_opts(sh, causal, input, None, true, o);
    }
    check_opts(sh, causal, input, None, false, o)
}

/// A soft cap that bites (inputs ×4 at head dimension 64: logits of about ±5 before the cap of 5),
/// alone and with a scale; at head dimension 128 under GQA and a bottom-right mask.
#[test]
fn softcap() {
    let sh = shape(1, 1, 150, 133, 64, AttnLayout::Bshd);
    check_both(sh, Causal::No, 4.0, &opts(None, Some(5.0), None));
    check_both(sh, Causal::TopLeft, 4.0, &opts(Some(0.2), Some(5.0), None));
    let sh = shape(4, 2, 70, 137, 128, AttnLayout::Bhsd);
    check_both(sh, Causal::BottomRight, 2.0, &opts(None, Some(3.0), None));
}

/// Windows whose edges fall inside and on the 64- and 128-row blocks and steps, bounded on one side
/// or both, with and without a causal mask, query and key lengths that differ.
#[test]
fn windows() {
    let sh = shape(2, 1, 300, 300, 64, AttnLayout::Bshd);
    for w in [(64, 63), (100, 30), (-1, 40), (50, -1), (128, 0)] {
        check_both(sh, Causal::No, 1.0, &opts(None, None, Some(w)));
    }
    check_both(sh, Causal::TopLeft, 1.0, &opts(None, None, Some((70, -1))));
    let sh = shape(2, 2, 190, 333, 128, AttnLayout::Bhsd);
    check_both(
        sh,
        Causal::BottomRight,
        1.0,
        &opts(None, None, Some((64, 0))),
    );
    check_both(sh, Causal::No, 1.0, &opts(None, None, Some((30, 200))));
}

/// A scale, a soft cap, a window and a bottom-right mask together, GQA, head dimension 128.
#[test]
fn every_option_together() {
    let sh = shape(4, 2, 211, 300, 128, AttnLayout::Bhsd);
    let o = opts(Some(0.1), Some(5.0), Some((90, 20)));
    check_both(sh, Causal::BottomRight, 2.0, &o);
}

/// A window that leaves the first 140 queries without keys (140 more queries than keys, keys
/// `i − 150 ..= i − 140`), whichever infinity their log-sum-exp is given as, with and without a cap.
#[test]
fn windows_leave_queries_without_keys() {
    let sh = shape(2, 2, 200, 60, 64, AttnLayout::Bshd);
    for cap in [None, Some(4.0)] {
        for empty in [None, Some(f32::NEG_INFINITY), Some(f32::INFINITY)] {
            for atomic in [false, true] {
                let o = opts(None, cap, Some((10, 0)));
                check_opts(sh, Causal::No, 2.0, empty, atomic, &o);
            }
        }
    }
}

/// The key blocks stop at the last query step that reaches their keys and the query blocks start
/// at the first key step their queries keep: at 2048 queries and keys a (64, 63) window runs a
/// small part of the dense program's wave ops (both launches).
#[test]
fn windows_skip_steps() {
    let sh = shape(1, 1, 2048, 2048, 64, AttnLayout::Bshd);
    let dense = check_opts(sh, Causal::No, 1.0, None, false, &AttnOptions::default());
    let window = check_opts(
        sh,
        Causal::No,
        1.0,
        None,
        false,
        &opts(None, None, Some((64, 63))),
    );
    eprintln!("{window} wave ops with a (64, 63) window, {dense} without");
    assert!(window * 5 < dense, "{window} vs {dense}");
}

/// Head dim 96 (128 columns, the last 32 read as zeros and stored nowhere): both forms, both masks,
/// GQA, odd lengths, with ALiBi and every other option.
#[test]
fn head_dim_96() {
    let sh = shape(4, 2, 150, 133, 96, AttnLayout::Bshd);
    check_both(sh, Causal::No, 2.0, &AttnOptions::default());
    let sh = shape(2, 1, 211, 300, 96, AttnLayout::Bhsd);
    check_both(sh, Causal::BottomRight, 2.0, &AttnOptions::default());
    let o = AttnOptions {
        alibi: Some(slopes(2, 5)),
        ..opts(Some(0.1), None, Some((90, 20)))
    };
    check_both(sh, Causal::TopLeft, 2.0, &o);
}

/// Head dims 192 and 256 (`attn_bwd::hopper::wide`: 64-key blocks, the scores split by queries and
/// exchanged through shared memory, dK and dV split by head-dimension tiles between the two
/// warpgroups): the atomic form at odd lengths (no multiple of the 64-row blocks and steps),
/// MHA and GQA, no mask and both causal alignments, both layouts.
#[test]
fn head_dims_192_256() {
    for dim in [192, 256] {
        let none = AttnOptions::default();
        let sh = shape(4, 2, 150, 133, dim, AttnLayout::Bshd);
        check_opts(sh, Causal::No, 2.0, None, true, &none);
        let sh = shape(2, 1, 97, 171, dim, AttnLayout::Bhsd);
        check_opts(sh, Causal::BottomRight, 2.0, None, true, &none);
        let sh = shape(3, 3, 171, 97, dim, AttnLayout::Bshd);
        check_opts(sh, Causal::TopLeft, 2.0, None, true, &none);
    }
}

/// Head dims 192 and 256 with FlashAttention's options: a soft cap that bites, a window with
/// edges inside the 64-row steps, ALiBi, a scale, and all of them at once, GQA and a causal mask;
/// and queries without keys (bottom-right, more queries than keys).
#[test]
fn head_dims_192_256_options() {
    for dim in [192, 256] {
        let sh = shape(4, 2, 130, 111, dim, AttnLayout::Bshd);
        check_opts(
            sh,
            Causal::No,
            4.0,
            None,
            true,
            &opts(None, Some(5.0), None),
        );
        check_opts(
            sh,
            Causal::No,
            1.0,
            None,
            true,
            &opts(None, None, Some((40, 9))),
        );
        let o = AttnOptions {
            alibi: Some(slopes(4, 7)),
            ..opts(Some(0.1), Some(5.0), Some((90, 20)))
        };
        check_opts(sh, Causal::BottomRight, 2.0, None, true, &o);
        let o = AttnOptions {
            alibi: Some(slopes(4, 8)),
            ..AttnOptions::default()
        };
        check_opts(sh, Causal::TopLeft, 2.0, None, true, &o);
        let sh = shape(2, 2, 100, 40, dim, AttnLayout::Bhsd);
        for empty in [None, Some(f32::NEG_INFINITY), Some(f32::INFINITY)] {
            check_opts(
                sh,
                Causal::BottomRight,
                1.0,
                empty,
                true,
                &AttnOptions::default(),
            );
        }
    }
}

/// Head dim 32 (64 columns, the last 32 read as zeros and stored nowhere, as 96 on 128): both
/// forms, both causal alignments, GQA, odd lengths, and with ALiBi, a scale and a window.
#[test]
fn head_dim_32() {
    let sh = shape(4, 2, 150, 133, 32, AttnLayout::Bshd);
    check_both(sh, Causal::No, 2.0, &AttnOptions::default());
    let sh = shape(2, 1, 211, 300, 32, AttnLayout::Bhsd);
    check_both(sh, Causal::BottomRight, 2.0, &AttnOptions::default());
    let o = AttnOptions {
        alibi: Some(slopes(2, 9)),
        ..opts(Some(0.3), None, Some((90, 20)))
    };
    check_both(sh, Causal::TopLeft, 2.0, &o);
    check_both(sh, Causal::No, 4.0, &opts(None, Some(5.0), None));
}

/// The key blocks' 128-query steps (`BwdConfig::hopper_step`, head dims up to 64; the atomic form
/// takes them as two 64-query halves and exchanges dSᵀ by halves): both forms, lengths that end inside a step and inside its second 64 queries, both causal alignments
/// (blocks paired long with short), GQA, both layouts, queries without keys, large logits, and
/// FlashAttention's options (a soft cap that bites, windows on and across the 64-query half,
/// ALiBi) against the f64 gradients; head dim 32 on its 64 columns.
#[test]
fn d64_128_query_steps() {
    let two = |sh, causal, scale, o: &AttnOptions| {
        for atomic in [false, true] {
            check_step(sh, causal, scale, None, atomic, o, 128);
        }
    };
    let none = AttnOptions::default();
    two(
        shape(1, 1, 150, 133, 64, AttnLayout::Bshd),
        Causal::No,
        1.0,
        &none,
    );
    two(
        shape(1, 1, 300, 300, 64, AttnLayout::Bshd),
        Causal::TopLeft,
        1.0,
        &none,
    );
    two(
        shape(4, 2, 390, 200, 64, AttnLayout::Bhsd),
        Causal::BottomRight,
        1.0,
        &none,
    );
    two(
        shape(1, 1, 77, 90, 64, AttnLayout::Bshd),
        Causal::No,
        8.0,
        &none,
    );
    for empty in [None, Some(f32::INFINITY)] {
        let sh = shape(2, 2, 100, 40, 64, AttnLayout::Bshd);
        for atomic in [false, true] {
            check_step(sh, Causal::BottomRight, 1.0, empty, atomic, &none, 128);
        }
    }
    let sh = shape(2, 1, 300, 300, 64, AttnLayout::Bshd);
    for w in [(64, 63), (100, 30), (50, -1)] {
        two(sh, Causal::No, 1.0, &opts(None, None, Some(w)));
    }
    two(sh, Causal::TopLeft, 4.0, &opts(Some(0.2), Some(5.0), None));
    let o = AttnOptions {
        alibi: Some(slopes(2, 11)),
        ..opts(Some(0.1), Some(5.0), Some((90, 20)))
    };
    two(
        shape(2, 2, 211, 300, 64, AttnLayout::Bhsd),
        Causal::BottomRight,
        2.0,
        &o,
    );
    two(
        shape(4, 2, 150, 133, 32, AttnLayout::Bshd),
        Causal::TopLeft,
        2.0,
        &none,
    );
}

/// 128-query steps where they do not fit: past head dim 64 (the scores, dP, dK and dV would take
/// 256 of the 240 registers per consumer thread), in either form: refused by name.
#[test]
fn d64_128_query_steps_refused_where_they_do_not_fit() {
    for (dim, schedule) in [
        (128, BwdSchedule::HopperKv),
        (96, BwdSchedule::HopperKv),
        (128, BwdSchedule::HopperAtomicKv),
    ] {
        let cfg = BwdConfig {
            schedule,
            dim,
            hopper_step: 128,
            ..BwdConfig::default()
        };
        let e = build(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("128 queries per step"),
            "{dim} {schedule:?}: {e}"
        );
    }
    let cfg = BwdConfig {
        schedule: BwdSchedule::HopperKv,
        dim: 64,
        hopper_step: 96,
        ..BwdConfig::default()
    };
    let e = build(&cfg).unwrap_err().to_string();
    assert!(e.contains("96 queries per step"), "{e}");
}
