//! Variable-length attention forward on the CPU interpreter against the f64 per-sequence reference,
//! judged by FlashAttention's rule (at most 2x the plain bf16 computation's error + 2^-12) at odd
//! lengths, an empty sequence, GQA, causal bottom-right and not, head dims 64 and 128. The packed
//! tensors have padding rows after the last sequence; the output there must stay untouched.

use kittens_hw::dtype::DType::Bf16;
use kittens_ir::interp;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::attn::score::{Logits, Window};
use kittens_kernels::attn_varlen::{build, VarlenConfig};
use kittens_kernels::exec::BwdTensors;
use kittens_kernels::exec_varlen::{backward as plain_bwd, backward_sm90 as sm90_bwd, Packed};
use kittens_kernels::reference::{check_rule, compare, RULE_FLOOR};
use kittens_kernels::reference_varlen::{backward, forward, forward_bf16_baseline, VarlenShape};

/// Uniform values in [-a, a) from a 64-bit LCG (Knuth's MMIX constants), rounded to bf16.
fn random(seed: &mut u64, n: usize, a: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (*seed >> 40) as f32 / (1u64 << 24) as f32;
            round((2.0 * u - 1.0) * a, Bf16, Rounding::Rtne)
        })
        .collect()
}

fn offsets(lens: &[usize]) -> Vec<usize> {
    let mut cu = vec![0];
    for l in lens {
        cu.push(cu.last().unwrap() + l);
    }
    cu
}

const PAD: usize = 3;
// Exactly representable in bf16 (`o`) and f32 (`lse`).
const SENTINEL: f32 = 12288.0;

type Builder = fn(&VarlenConfig) -> Result<kittens_ir::Kernel, kittens_kernels::KernelError>;

/// A packed batch drawn for a test: the configuration, offsets (the packed tensors `PAD` rows longer),
/// random `q, k, v` (scores of order a few units: large enough that the softmax is not flat), the
/// references' shape, and the seed's state after them.
struct Drawn {
    cfg: VarlenConfig,
    cu_q: Vec<usize>,
    cu_k: Vec<usize>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    sh: VarlenShape,
    total_q: usize,
    total_k: usize,
    seed: u64,
}

impl Drawn {
    fn new(
        lens_q: &[usize],
        lens_k: &[usize],
        (heads, heads_kv): (usize, usize),
        dim: u32,
        causal: bool,
        scale: Option<f32>,
        seed: u64,
    ) -> Drawn {
        let cfg = VarlenConfig {
            dim,
            causal,
            logits: Logits {
                scale,
                softcap: None,
            },
            window: None,
            seqused_k: false,
            alibi: false,
        };
        let (cu_q, cu_k) = (offsets(lens_q), offsets(lens_k));
        let (total_q, total_k) = (cu_q[lens_q.len()] + PAD, cu_k[lens_k.len()] + PAD);
        let d = dim as usize;
        let mut s = seed;
        let q = random(&mut s, total_q * heads * d, 2.0);
        let k = random(&mut s, total_k * heads_kv * d, 2.0);
        let v = random(&mut s, total_k * heads_kv * d, 1.0);
        let sh = VarlenShape {
            heads,
            heads_kv,
            dim: d,
            cu_q: cu_q.clone(),
            cu_k: cu_k.clone(),
            causal,
            scale: f64::from(cfg.logits.scale(dim)),
            ..Default::default()
        };
        Drawn {
            cfg,
            cu_q,
            cu_k,
            q,
            k,
            v,
            sh,
            total_q,
            total_k,
            seed: s,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check(
    lens_q: &[usize],
    lens_k: &[usize],
    heads: usize,
    heads_kv: usize,
    dim: u32,
    causal: bool,
    scale: Option<f32>,
    seed: u64,
) {
    check_with(
        build, lens_q, lens_k, heads, heads_kv, dim, causal, scale, seed,
    )
}

#[allow(clippy::too_many_arguments)]
fn check_with(
    builder: Builder,
    lens_q: &[usize],
    lens_k: &[usize],
    heads: usize,
    heads_kv: usize,
    dim: u32,
    causal: bool,
    scale: Option<f32>,
    seed: u64,
) {
    let drawn = Drawn::new(lens_q, lens_k, (heads, heads_kv), dim, causal, scale, seed);
    check_drawn(builder, drawn, lens_q, lens_k);
}

/// A soft cap and a window on the drawn batch: both in the configuration and the references.
fn with_options(mut d: Drawn, softcap: Option<f32>, window: Option<Window>) -> Drawn {
    d.cfg.logits.softcap = softcap;
    d.cfg.window = window;
    d.sh.softcap = softcap.map(f64::from);
    d.sh.window = window;
    d
}

/// Runs `builder`'s program of `drawn` on the interpreter and judges it against the references.
fn check_drawn(builder: Builder, drawn: Drawn, lens_q: &[usize], lens_k: &[usize]) {
    let (heads, heads_kv) = (drawn.sh.heads, drawn.sh.heads_kv);
    let Drawn {
        cfg,
        cu_q,
        cu_k,
        q,
        k,
        v,
        sh,
        total_q,
        total_k,
        ..
    } = drawn;
    let (dim, causal, scale) = (cfg.dim, cfg.causal, cfg.logits.scale);
    let kernel = builder(&cfg).expect("the varlen kernel builds");
    let d = dim as usize;
    let (want_o, want_lse) = forward(&q, &k, &v, &sh);
    let base = forward_bf16_baseline(&q, &k, &v, &sh);
    let as_f32 = |c: &[usize]| c.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let mut tensors = vec![
        q,
        k,
        v,
        as_f32(&cu_q),
        as_f32(&cu_k),
        vec![SENTINEL; total_q * heads * d],
        vec![SENTINEL; heads * total_q],
    ];
    let max = |l: &[usize]| l.iter().copied().max().unwrap_or(0).max(1) as i64;
    let params = [
        lens_q.len() as i64,
        heads as i64,
        heads_kv as i64,
        total_q as i64,
        total_k as i64,
        max(lens_q),
        max(lens_k),
    ];
    interp::run(&kernel, &params, &mut tensors).expect("the interpreter runs it");
    let what = format!(
        "{} lens_q {lens_q:?} lens_k {lens_k:?} H{heads}/{heads_kv} D{dim} causal {causal} scale \
         {scale:?} softcap {:?} window {:?}",
        kernel.name, cfg.logits.softcap, cfg.window
    );
    // Padding rows: nobody's, never written.
    let real = cu_q[lens_q.len()];
    assert!(
        tensors[5][real * heads * d..]
            .iter()
            .all(|&x| x == SENTINEL),
        "{what}: o written past the last sequence"
    );
    for h in 0..heads {
        assert!(
            tensors[6][h * total_q + real..(h + 1) * total_q]
                .iter()
                .all(|&x| x == SENTINEL),
            "{what}: lse written past the last sequence"
        );
    }
    let n = real * heads * d;
    let (ours, baseline) = (
        compare(&tensors[5][..n], &want_o[..n]),
        compare(&base[..n], &want_o[..n]),
    );
    for (name, o, b) in [
        ("rel_err", ours.rel_err, baseline.rel_err),
        ("max_rel", ours.max_rel, baseline.max_rel),
    ] {
        let v = check_rule(o, b, RULE_FLOOR);
        assert!(
            v.passed,
            "{what}: output {name} {o:.3e} over the rule's bound {:.3e} (bf16 baseline {b:.3e})",
            v.bound
        );
    }
    // The log-sum-exp is f32 arithmetic throughout (no bf16 step), so a fixed f32-level tolerance.
    for h in 0..heads {
        for r in 0..real {
            let (got, want) = (
                tensors[6][h * total_q + r] as f64,
                want_lse[h * total_q + r],
            );
            let ok = if want.is_finite() {
                (got - want).abs() <= 1e-5 * (1.0 + want.abs())
            } else {
                got == want
            };
            assert!(ok, "{what}: lse[{h}, {r}] = {got}, want {want}");
        }
    }
    eprintln!(
        "{what}: rel_err {:.3e} (bf16 {:.3e}), max_rel {:.3e} (bf16 {:.3e})",
        ours.rel_err, baseline.rel_err, ours.max_rel, baseline.max_rel
    );
}

#[test]
fn varlen_forward_matches_f64_d64() {
    let lens = [1, 17, 0, 130, 300];
    check(&lens, &lens, 2, 1, 64, false, None, 1);
    check(&lens, &lens, 2, 1, 64, true, None, 2);
}

#[test]
fn varlen_forward_different_q_and_k_lengths_causal_bottom_right() {
    // More queries than keys (rows that keep no key), fewer, and an empty key sequence.
    check(
        &[45, 3, 70, 9],
        &[20, 33, 0, 64],
        4,
        2,
        64,
        true,
        Some(0.3),
        3,
    );
    check(&[45, 3, 70, 9], &[20, 33, 0, 64], 4, 2, 64, false, None, 4);
}

#[test]
fn varlen_forward_matches_f64_d128() {
    let lens = [1, 17, 0, 130, 300];
    check(&lens, &lens, 3, 3, 128, true, None, 5);
    check(&[33, 65], &[100, 7], 4, 1, 128, false, None, 6);
}

/// A program, head dim, causal, soft cap and window.
type OptionCase = (Builder, u32, bool, Option<f32>, Option<Window>);

/// FlashAttention's soft cap and sliding window (bottom-right per sequence) in both forward programs
/// (the one-wave program and the sm_90a one on the interpreter), alone and together, causal and not:
/// windows narrower than a key block, cutting inside blocks on both sides, wider than the sequences,
/// a right side before the diagonal (rows that keep no key), at lengths crossing 128-row tiles.
#[test]
fn varlen_forward_softcap_and_window_match_f64() {
    let hopper: Builder = kittens_kernels::attn_varlen_hopper::build;
    let (lq, lk) = ([45, 3, 0, 300, 129], [20, 150, 7, 300, 260]);
    let w = |left, right| Some(Window { left, right });
    let cases: [OptionCase; 8] = [
        (build, 64, true, Some(5.0), None),
        (build, 64, false, None, w(20, 3)),
        (build, 64, true, Some(30.0), w(40, -1)),
        (build, 64, false, None, w(-1, 0)),
        (hopper, 64, true, Some(5.0), None),
        (hopper, 64, false, Some(5.0), w(70, 10)),
        (hopper, 128, true, None, w(130, -1)),
        (hopper, 64, false, None, w(0, 140)),
    ];
    for (i, (builder, dim, causal, cap, win)) in cases.into_iter().enumerate() {
        let d = Drawn::new(&lq, &lk, (4, 2), dim, causal, None, 40 + i as u64);
        check_drawn(builder, with_options(d, cap, win), &lq, &lk);
    }
}

#[test]
fn bad_configurations_are_refused_by_name() {
    let e = build(&VarlenConfig {
        dim: 48,
        causal: false,
        logits: Logits::default(),
        window: None,
        seqused_k: false,
        alibi: false,
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("head dim") && e.contains("48"), "{e}");
    let capped = Logits {
        scale: None,
        softcap: Some(30.0),
    };
    // Both directions take a soft cap and a window (`varlen_forward_softcap_and_window_match_f64`,
    // `varlen_backward_softcap_and_window_match_f64`): the backward programs build them, named for
    // them; the backward refuses `seqused_k` by name, and the forward a window side below -1.
    use kittens_kernels::attn_varlen_bwd::Part;
    let plain = VarlenConfig {
        dim: 64,
        causal: false,
        logits: Logits::default(),
        window: None,
        seqused_k: false,
        alibi: false,
    };
    let capped = VarlenConfig {
        logits: capped,
        ..plain
    };
    let windowed = VarlenConfig {
        window: Some(Window { left: 8, right: -1 }),
        ..plain
    };
    for (cfg, what) in [(capped, "_softcap"), (windowed, "_window")] {
        let one_wave = kittens_kernels::attn_varlen_bwd::build(&cfg, Part::Keys).unwrap();
        assert!(one_wave.name.contains(what), "{}", one_wave.name);
        let sm90 = kittens_kernels::attn_varlen_bwd_hopper::build(&cfg).unwrap();
        assert!(sm90.name.contains(what), "{}", sm90.name);
    }
    let used = VarlenConfig {
        seqused_k: true,
        ..plain
    };
    let e = kittens_kernels::attn_varlen_bwd::build(&used, Part::Keys)
        .unwrap_err()
        .to_string();
    assert!(e.contains("seqused_k"), "{e}");
    let e = kittens_kernels::attn_varlen_bwd_hopper::build(&used)
        .unwrap_err()
        .to_string();
    assert!(e.contains("seqused_k"), "{e}");
    let odd = VarlenConfig { dim: 96, ..plain };
    let e = kittens_kernels::attn_varlen_bwd_hopper::build(&odd)
        .unwrap_err()
        .to_string();
    assert!(e.contains("head dim") && e.contains("96"), "{e}");
    let bad = VarlenConfig {
        window: Some(Window { left: -2, right: 0 }),
        ..plain
    };
    let e = build(&bad).unwrap_err().to_string();
    assert!(e.contains("window") && e.contains("-2"), "{e}");
}

/// A soft cap and a window (`None, None`: neither).
type Opts = (Option<f32>, Option<Window>);
const PLAIN: Opts = (None, None);

type BwdRunner =
    fn(&VarlenConfig, BwdTensors, &Packed) -> Result<[Vec<f32>; 3], kittens_kernels::KernelError>;

/// The backward on lengths `lens_q`/`lens_k`: the kernel's f32 gradients against the f64 reference,
/// judged by the rule against the plain-bf16 baseline. O and lse come from the f64 forward (rounded
/// as the forward stores them), as a training step hands them over.
#[allow(clippy::too_many_arguments)]
fn check_bwd(
    run: BwdRunner,
    lens_q: &[usize],
    lens_k: &[usize],
    heads: usize,
    heads_kv: usize,
    dim: u32,
    causal: bool,
    (softcap, window): Opts,
    seed: u64,
) {
    let drawn = Drawn::new(lens_q, lens_k, (heads, heads_kv), dim, causal, None, seed);
    let Drawn {
        cfg,
        cu_q,
        cu_k,
        q,
        k,
        v,
        sh,
        total_q,
        mut seed,
        ..
    } = with_options(drawn, softcap, window);
    let d = dim as usize;
    let d_o = random(&mut seed, total_q * heads * d, 1.0);
    let (o, lse) = forward(&q, &k, &v, &sh);
    let (q, k, v, d_o) = (&q[..], &k[..], &v[..], &d_o[..]);
    let o: Vec<f32> = o
        .iter()
        .map(|&x| round(x as f32, Bf16, Rounding::Rtne))
        .collect();
    let lse: Vec<f32> = lse.iter().map(|&x| x as f32).collect();
    let want = backward(q, k, v, d_o, &sh, false);
    let base = backward(q, k, v, d_o, &sh, true);
    let packed = Packed {
        heads,
        heads_kv,
        cu_q: cu_q.iter().map(|&x| x as i64).collect(),
        cu_k: cu_k.iter().map(|&x| x as i64).collect(),
        max_q: lens_q.iter().copied().max().unwrap_or(0),
        max_k: lens_k.iter().copied().max().unwrap_or(0),
        used_k: None,
        alibi: None,
    };
    let t = BwdTensors {
        q,
        k,
        v,
        o: &o,
        d_o,
        lse: &lse,
    };
    let tensors = run(&cfg, t, &packed).expect("the interpreter runs it");
    let what = format!(
        "bwd lens_q {lens_q:?} lens_k {lens_k:?} H{heads}/{heads_kv} D{dim} causal {causal} \
         softcap {softcap:?} window {window:?}"
    );
    let (rq, rk) = (
        cu_q[lens_q.len()] * heads * d,
        cu_k[lens_k.len()] * heads_kv * d,
    );
    for (name, got, want, base, n) in [
        ("dq", &tensors[0], &want.0, &base.0, rq),
        ("dk", &tensors[1], &want.1, &base.1, rk),
        ("dv", &tensors[2], &want.2, &base.2, rk),
    ] {
        assert!(
            got[n..].iter().all(|&x| x == 0.0),
            "{what}: {name} written past the last sequence"
        );
        let base32: Vec<f32> = base[..n].iter().map(|&x| x as f32).collect();
        let (ours, b) = (compare(&got[..n], &want[..n]), compare(&base32, &want[..n]));
        for (m, o, bb) in [
            ("rel_err", ours.rel_err, b.rel_err),
            ("max_rel", ours.max_rel, b.max_rel),
        ] {
            let v = check_rule(o, bb, RULE_FLOOR);
            assert!(
                v.passed,
                "{what}: {name} {m} {o:.3e} over the rule's bound {:.3e} (bf16 baseline {bb:.3e})",
                v.bound
            );
        }
        eprintln!(
            "{what}: {name} rel_err {:.3e} (bf16 {:.3e}) max_rel {:.3e} (bf16 {:.3e})",
            ours.rel_err, b.rel_err, ours.max_rel, b.max_rel
        );
    }
}

/// One backward case: query and key lengths, `(heads, heads_kv)`, head dim, causal, options, seed.
type BwdCase<'a> = (
    &'a [usize],
    &'a [usize],
    (usize, usize),
    u32,
    bool,
    Opts,
    u64,
);

/// [`check_bwd`] of `run` on each case in turn.
fn check_bwd_cases(run: BwdRunner, cases: &[BwdCase]) {
    for &(lens_q, lens_k, (heads, heads_kv), dim, causal, opts, seed) in cases {
        check_bwd(
            run, lens_q, lens_k, heads, heads_kv, dim, causal, opts, seed,
        );
    }
}

#[test]
fn varlen_backward_matches_f64_d64() {
    let lens = [1, 17, 0, 130, 75];
    check_bwd_cases(
        plain_bwd,
        &[
            (&lens, &lens, (2, 1), 64, false, PLAIN, 11),
            (&lens, &lens, (2, 1), 64, true, PLAIN, 12),
            (&[45, 3, 70], &[20, 33, 0], (4, 2), 64, true, PLAIN, 13),
        ],
    );
}

#[test]
fn varlen_backward_matches_f64_d128() {
    let lens = [1, 17, 0, 130];
    check_bwd_cases(plain_bwd, &[(&lens, &lens, (2, 2), 128, true, PLAIN, 14)]);
}

/// The sm_90a backward (`attn_varlen_bwd_hopper`: 128-key blocks, 64-query steps, unclipped TMA
/// fills whose rows past a sequence are masked, dQ by atomic adds) on the interpreter: lengths 0, 1,
/// one past a block (129) and more than two blocks (300), rows with no key (bottom-right causal with
/// more queries than keys, an empty key sequence), GQA; head dims 64 and 128.
#[test]
fn hopper_varlen_backward_matches_f64() {
    let lens = [1, 129, 0, 300, 64];
    let (lq, lk) = ([45, 3, 200, 9], [20, 150, 0, 64]);
    check_bwd_cases(
        sm90_bwd,
        &[
            (&lens, &lens, (2, 1), 64, true, PLAIN, 31),
            (&lens, &lens, (2, 1), 64, false, PLAIN, 32),
            (&lq, &lk, (4, 2), 128, true, PLAIN, 33),
        ],
    );
}

/// FlashAttention's soft cap and sliding window in the backward, both programs on the interpreter
/// (the one-wave programs of the CPU and CDNA, the sm_90a key blocks), alone and together, causal
/// and not: windows narrower than a key block and cutting inside blocks on both sides, a right side
/// before the diagonal (queries that keep no key), odd lengths, an empty sequence, GQA.
#[test]
fn varlen_backward_softcap_and_window_match_f64() {
    let (lq, lk) = ([45, 3, 0, 130, 1], [20, 150, 7, 129, 1]);
    let w = |left, right| Some(Window { left, right });
    let cases: [(BwdRunner, u32, bool, Opts); 7] = [
        (plain_bwd, 64, true, (Some(5.0), None)),
        (plain_bwd, 64, false, (None, w(20, 3))),
        (plain_bwd, 128, true, (Some(30.0), w(40, -1))),
        (sm90_bwd, 64, true, (Some(5.0), None)),
        (sm90_bwd, 64, false, (Some(5.0), w(70, 10))),
        (sm90_bwd, 128, true, (None, w(130, -1))),
        (sm90_bwd, 64, false, (None, w(0, 140))),
    ];
    for (i, (run, dim, causal, opts)) in cases.into_iter().enumerate() {
        check_bwd(run, &lq, &lk, 4, 2, dim, causal, opts, 50 + i as u64);
    }
}

/// The sm_90a backward's 64-key blocks (`attn_varlen_bwd_hopper`'s `wide`: head dims 192 and 256,
/// and 128 with a soft cap) on the interpreter: lengths crossing their 64-key blocks and 64-query
/// steps, an empty sequence, rows with no key, GQA, with a soft cap, a window and both.
#[test]
fn hopper_varlen_backward_wide_matches_f64() {
    let w = |left, right| Some(Window { left, right });
    let (lq, lk) = ([45, 0, 70], [20, 9, 100]);
    check_bwd_cases(
        sm90_bwd,
        &[
            (
                &[70, 1, 0, 65],
                &[33, 130, 5, 64],
                (2, 1),
                192,
                true,
                PLAIN,
                61,
            ),
            (&[66, 17], &[129, 1], (2, 2), 256, false, PLAIN, 62),
            (&lq, &lk, (4, 2), 128, true, (Some(5.0), None), 63),
            (&lq, &lk, (2, 1), 192, false, (Some(30.0), w(20, 3)), 64),
            (&lq, &lk, (2, 2), 256, true, (None, w(40, -1)), 65),
        ],
    );
}

/// The sm_90a program (`attn_varlen_hopper`: 128-query blocks, 128- or 64-key blocks, cp.async fills
/// clipped at the sequence's end, bounds-checked stores) on the interpreter, at lengths that cross
/// its tiles: 0, 1, one past a block, more than two blocks; rows with no key; GQA.
#[test]
fn hopper_varlen_forward_matches_f64() {
    let hopper: Builder = kittens_kernels::attn_varlen_hopper::build;
    let lens = [1, 129, 0, 300, 64];
    check_with(hopper, &lens, &lens, 2, 1, 64, true, None, 21);
    check_with(hopper, &lens, &lens, 2, 1, 64, false, None, 22);
    let (lq, lk) = ([45, 3, 200, 9], [20, 150, 0, 64]);
    check_with(hopper, &lq, &lk, 4, 2, 128, true, Some(0.3), 23);
    check_with(hopper, &[70, 1], &[33, 190], 2, 1, 192, false, None, 24);
}

/// The AMD lowerings lower the one-wave programs, forward and backward (index reads as loads through
/// the offsets' pointers, clipped rows past each sequence's end, and in the backward the lse read
/// into a register vector from the row `cu_seqlens_q` starts the sequence at;
/// crates/kittens-runtime/tests/amd_index_reads.rs compiles and emulates them). sm_90a lowers the
/// Hopper program (not the one-wave interpreter programs).
#[test]
fn amd_lowers_the_varlen_programs_sm90a_lowers_the_hopper_one() {
    use kittens_hw::Target;
    let cfg = VarlenConfig {
        dim: 64,
        causal: true,
        logits: Logits::default(),
        window: None,
        seqused_k: false,
        alibi: false,
    };
    let fwd = build(&cfg).unwrap();
    use kittens_kernels::attn_varlen_bwd::Part;
    let bwd = kittens_kernels::attn_varlen_bwd::build(&cfg, Part::Keys).unwrap();
    let bwd_q = kittens_kernels::attn_varlen_bwd::build(&cfg, Part::Queries).unwrap();
    for kernel in [&fwd, &bwd, &bwd_q] {
        for target in [Target::Gfx942, Target::Gfx950] {
            let l = kittens_codegen::lower(kernel, target)
                .unwrap_or_else(|e| panic!("{} {target}: {e}", kernel.name));
            assert!(l
                .source
                .contains("((const int*)g_cu_seqlens_q)[(blk0 + 1)]"));
            if kernel.name != fwd.name {
                // The lse: one buffer load per entry of the vector, from a resource at its row.
                assert!(
                    l.source.contains("tile_rsrc_t(g_lse, span_lse,"),
                    "{}",
                    kernel.name
                );
            }
        }
        // The one-wave programs: over the register budget or of the wrong schedule.
        assert!(kittens_codegen::lower(kernel, Target::Sm90a).is_err());
    }
    let maps = |l: &kittens_codegen::Lowered| {
        l.args
            .iter()
            .filter(|a| matches!(a, kittens_codegen::KernelArg::TensorMap(_)))
            .count()
    };
    // Q, K and V read unclipped by TMA (every score of a row past a sequence's end is masked or
    // never stored); the outputs clipped by direct stores.
    let hopper = kittens_kernels::attn_varlen_hopper::build(&cfg).unwrap();
    let l = kittens_codegen::lower(&hopper, Target::Sm90a).expect("sm_90a lowers it");
    assert!(maps(&l) >= 3, "{:?}", l.args);
    assert!(l.source.contains("g_cu_seqlens_q") && !l.source.contains("kt::cp_async_16("));
    // With seqused_k (a KV cache's stale rows past the used ones): no tensor maps, a TMA box would
    // cross the used rows' end; cp.async and direct stores clip.
    let used = VarlenConfig {
        seqused_k: true,
        ..cfg
    };
    let hopper = kittens_kernels::attn_varlen_hopper::build(&used).unwrap();
    let l = kittens_codegen::lower(&hopper, Target::Sm90a).expect("sm_90a lowers it");
    assert_eq!(maps(&l), 0, "{:?}", l.args);
    assert!(l.source.contains("g_cu_seqlens_q") && l.source.contains("kt::cp_async_16("));
}

/// `seqused_k` (a KV cache of fixed capacity per sequence: keys start at `b · capacity` and sequence
/// `b` uses the first `used[b]`) in both programs on the interpreter, against the f64 reference of
/// the same keys packed without gaps. The unused cache rows hold NaN: a read of them that reached
/// the output would show.
#[test]
fn seqused_k_keeps_each_sequences_first_keys_in_both_programs() {
    use kittens_kernels::exec_varlen::forward_with;
    let (heads, heads_kv, dim, cap) = (4usize, 2usize, 64u32, 150usize);
    let (lens_q, used) = ([1usize, 3, 130, 0, 17], [0usize, 1, 149, 5, 150]);
    let d = dim as usize;
    let mut s = 31;
    let cu_q = offsets(&lens_q);
    let q = random(&mut s, cu_q[lens_q.len()] * heads * d, 2.0);
    let mut k = random(&mut s, lens_q.len() * cap * heads_kv * d, 2.0);
    let mut v = random(&mut s, lens_q.len() * cap * heads_kv * d, 1.0);
    let row = heads_kv * d;
    for (b, &u) in used.iter().enumerate() {
        for r in b * cap + u..(b + 1) * cap {
            k[r * row..(r + 1) * row].fill(f32::NAN);
            v[r * row..(r + 1) * row].fill(f32::NAN);
        }
    }
    // The reference's keys: each sequence's used rows, packed.
    let pack = |t: &[f32]| -> Vec<f32> {
        used.iter()
            .enumerate()
            .flat_map(|(b, &u)| t[b * cap * row..(b * cap + u) * row].to_vec())
            .collect()
    };
    for causal in [false, true] {
        let cfg = VarlenConfig {
            dim,
            causal,
            logits: Logits::default(),
            window: None,
            seqused_k: true,
            alibi: false,
        };
        let sh = VarlenShape {
            heads,
            heads_kv,
            dim: d,
            cu_q: cu_q.clone(),
            cu_k: offsets(&used),
            causal,
            scale: f64::from(cfg.logits.scale(dim)),
            ..Default::default()
        };
        let (kp, vp) = (pack(&k), pack(&v));
        let (want, _) = forward(&q, &kp, &vp, &sh);
        let base = forward_bf16_baseline(&q, &kp, &vp, &sh);
        let packed = Packed {
            heads,
            heads_kv,
            cu_q: cu_q.iter().map(|&x| x as i64).collect(),
            cu_k: (0..=lens_q.len()).map(|b| (b * cap) as i64).collect(),
            max_q: 130,
            max_k: cap,
            used_k: Some(used.iter().map(|&x| x as i64).collect()),
            alibi: None,
        };
        for kernel in [
            build(&cfg).unwrap(),
            kittens_kernels::attn_varlen_hopper::build(&cfg).unwrap(),
        ] {
            let (o, _) = forward_with(&kernel, &cfg, &q, &k, &v, &packed).unwrap();
            assert!(
                o.iter().all(|x| x.is_finite()),
                "{}: NaN from unused rows",
                kernel.name
            );
            let (ours, bl) = (compare(&o, &want), compare(&base, &want));
            let r = check_rule(ours.rel_err, bl.rel_err, RULE_FLOOR);
            assert!(
                r.passed,
                "{} causal {causal}: {:.3e} vs bf16 {:.3e}",
                kernel.name, ours.rel_err, bl.rel_err
            );
            eprintln!(
                "seqused_k {} causal {causal}: rel_err {:.3e} (bf16 {:.3e})",
                kernel.name, ours.rel_err, bl.rel_err
            );
        }
    }
}
