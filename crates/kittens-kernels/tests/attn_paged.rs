//! Paged-KV-cache decode attention on the CPU interpreter against the f64 per-sequence reference
//! (the cache's pages gathered in sequence order by the test, then `reference_varlen::forward`),
//! judged by FlashAttention's rule (at most 2x the plain bf16 computation's error + 2^-12): page sizes
//! that do not divide the lengths (16, 48, 256 with lengths 1, 37, 300, 1000, and 0), a shuffled block
//! table, GQA, causal bottom-right with several queries, any scale, split-KV with the merge. Cache rows
//! that no sequence holds are NaN: a kernel that reads them into its sum fails.

use kittens_hw::dtype::DType::Bf16;
use kittens_hw::Target;
use kittens_ir::interp;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::attn::score::{Logits, Window};
use kittens_kernels::attn::AttnLayout;
use kittens_kernels::attn_fwd::{split::build_merge, AttnConfig};
use kittens_kernels::attn_paged::{build, kv_block_for, PagedConfig};
use kittens_kernels::attn_paged_problem::build_for;
use kittens_kernels::reference::{check_rule, compare, RULE_FLOOR};
use kittens_kernels::reference_varlen::{forward_alibi, forward_bf16_baseline_alibi, VarlenShape};

/// Uniform values in [-a, a) from a 64-bit LCG (Knuth's MMIX constants), rounded to bf16.
fn random(seed: &mut u64, n: usize, a: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = next(seed);
            let u = (*seed >> 40) as f32 / (1u64 << 24) as f32;
            round((2.0 * u - 1.0) * a, Bf16, Rounding::Rtne)
        })
        .collect()
}

fn next(seed: &u64) -> u64 {
    seed.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}

// Cache rows no sequence holds (past each length, spare pages): a read of one into a sum fails.
const STALE: f32 = f32::NAN;

struct Case {
    lens: Vec<usize>,
    seq_q: usize,
    heads: usize,
    heads_kv: usize,
    dim: u32,
    page: usize,
    causal: bool,
    scale: Option<f32>,
    splits: u32,
    /// ALiBi: random slopes `[batch, heads]` of either sign, an input after `cache_seqlens`.
    alibi: bool,
    /// The soft cap (`cap·tanh(x·scale/cap)` before ALiBi).
    softcap: Option<f32>,
    /// A sliding window `(left, right)`, bottom-right aligned per sequence.
    window: Option<Window>,
    seed: u64,
    /// The program: the interpreter's (`Target::Cpu`) or sm_90a's (`attn_paged_hopper`).
    target: Target,
    /// A GQA group's query heads packed into a block's rows (`seq_q` 1).
    pack_gqa: bool,
}

fn check(c: &Case) {
    let (b, d, hk, h, sq, page) = (
        c.lens.len(),
        c.dim as usize,
        c.heads_kv,
        c.heads,
        c.seq_q,
        c.page,
    );
    let max_blocks = c
        .lens
        .iter()
        .map(|l| l.div_ceil(page))
        .max()
        .unwrap()
        .max(1)
        + 1;
    // Pages of every sequence, then two spare pages, in a shuffled order.
    let needed: usize = c.lens.iter().map(|l| l.div_ceil(page)).sum();
    let num_blocks = needed + 2;
    let mut order: Vec<usize> = (0..num_blocks).collect();
    let mut s = c.seed;
    for i in (1..num_blocks).rev() {
        s = next(&s);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    let mut table = vec![0usize; b * max_blocks];
    let mut used = 0;
    for (bi, l) in c.lens.iter().enumerate() {
        for p in 0..max_blocks {
            // Entries past the sequence's pages point at a spare page (any in-range value is legal).
            table[bi * max_blocks + p] = if p < l.div_ceil(page) {
                used += 1;
                order[used - 1]
            } else {
                order[num_blocks - 1]
            };
        }
    }
    let row = page * hk * d;
    let mut kc = vec![STALE; num_blocks * row];
    let mut vc = vec![STALE; num_blocks * row];
    // The packed keys of each sequence (for the reference), written into the cache's pages.
    let total: usize = c.lens.iter().sum();
    let kp = random(&mut s, total * hk * d, 2.0);
    let vp = random(&mut s, total * hk * d, 1.0);
    let mut off = 0;
    for (bi, &l) in c.lens.iter().enumerate() {
        for j in 0..l {
            let blk = table[bi * max_blocks + j / page];
            let at = (blk * page + j % page) * hk * d;
            let src = (off + j) * hk * d;
            kc[at..at + hk * d].copy_from_slice(&kp[src..src + hk * d]);
            vc[at..at + hk * d].copy_from_slice(&vp[src..src + hk * d]);
        }
        off += l;
    }
    let q = random(&mut s, b * sq * h * d, 2.0);
    let mut cu_k = vec![0];
    for l in &c.lens {
        cu_k.push(cu_k.last().unwrap() + l);
    }
    let sh = VarlenShape {
        heads: h,
        heads_kv: hk,
        dim: d,
        cu_q: (0..=b).map(|i| i * sq).collect(),
        cu_k,
        causal: c.causal,
        scale: f64::from(Logits::scale(
            &Logits {
                scale: c.scale,
                softcap: None,
            },
            c.dim,
        )),
        softcap: c.softcap.map(f64::from),
        window: c.window,
    };
    // Slopes of either sign up to 0.5: a bias of tens to hundreds over a long sequence.
    let slopes = c.alibi.then(|| random(&mut s, b * h, 0.5));
    let (want_o, want_lse) = forward_alibi(&q, &kp, &vp, &sh, slopes.as_deref());
    let base = forward_bf16_baseline_alibi(&q, &kp, &vp, &sh, slopes.as_deref()).0;

    let kv_block = kv_block_for(page, c.dim, c.target).expect("a page size the kernel takes");
    let cfg = PagedConfig {
        dim: c.dim,
        causal: c.causal,
        logits: Logits {
            scale: c.scale,
            softcap: c.softcap,
        },
        kv_block,
        splits: c.splits,
        alibi: c.alibi,
        window: c.window,
        pack_gqa: c.pack_gqa,
    };
    let kernel = build_for(&cfg, c.target).expect("the paged kernel builds");
    let params = [b, h, hk, sq, num_blocks, page, max_blocks].map(|x| x as i64);
    let table_f: Vec<f32> = table.iter().map(|&x| x as f32).collect();
    let lens_f: Vec<f32> = c.lens.iter().map(|&x| x as f32).collect();
    let n_o = b * sq * h * d;
    let (o, lse) = if c.splits == 1 {
        let mut t = vec![q, kc, vc, table_f, lens_f];
        t.extend(slopes.clone());
        let at = t.len();
        t.extend([vec![0.0; n_o], vec![0.0; b * h * sq]]);
        interp::run(&kernel, &params, &mut t).expect("the interpreter runs it");
        (t[at].clone(), t[at + 1].clone())
    } else {
        let g = c.splits as usize;
        let mut t = vec![q, kc, vc, table_f, lens_f];
        t.extend(slopes.clone());
        let at = t.len();
        t.extend([vec![0.0; g * n_o], vec![0.0; g * b * h * sq]]);
        interp::run(&kernel, &params, &mut t).expect("the interpreter runs it");
        let merge = build_merge(&AttnConfig {
            dim: c.dim,
            layout: AttnLayout::Bshd,
            lse: true,
            kv_splits: c.splits,
            ..AttnConfig::default()
        })
        .expect("the merge builds");
        let mut m = vec![
            t[at].clone(),
            t[at + 1].clone(),
            vec![0.0; n_o],
            vec![0.0; b * h * sq],
        ];
        interp::run(&merge, &[b as i64, h as i64, sq as i64], &mut m).expect("the merge runs");
        (m[2].clone(), m[3].clone())
    };
    let what = format!(
        "{} lens {:?} seq_q {sq} H{h}/{hk} D{d} page {page} causal {} scale {:?} splits {} alibi {} \
         softcap {:?} window {:?}",
        kernel.name, c.lens, c.causal, c.scale, c.splits, c.alibi, c.softcap, c.window
    );
    let (ours, baseline) = (compare(&o, &want_o), compare(&base, &want_o));
    for (name, e, be) in [
        ("rel_err", ours.rel_err, baseline.rel_err),
        ("max_rel", ours.max_rel, baseline.max_rel),
    ] {
        let v = check_rule(e, be, RULE_FLOOR);
        assert!(
            v.passed,
            "{what}: output {name} {e:.3e} over the rule's bound {:.3e} (bf16 baseline {be:.3e})",
            v.bound
        );
    }
    // lse: ours [b, h, sq]; the reference's [h, total_q] with row bi·sq + i.
    for bi in 0..b {
        for hh in 0..h {
            for i in 0..sq {
                let got = f64::from(lse[(bi * h + hh) * sq + i]);
                let want = want_lse[hh * b * sq + bi * sq + i];
                let ok = if want.is_finite() {
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs())
                } else {
                    got == want
                };
                assert!(ok, "{what}: lse[{bi}, {hh}, {i}] = {got}, want {want}");
            }
        }
    }
    eprintln!(
        "{what}: rel_err {:.3e} (bf16 {:.3e}), max_rel {:.3e} (bf16 {:.3e})",
        ours.rel_err, baseline.rel_err, ours.max_rel, baseline.max_rel
    );
}

fn case(lens: &[usize], page: usize) -> Case {
    Case {
        lens: lens.to_vec(),
        seq_q: 1,
        heads: 4,
        heads_kv: 2,
        dim: 64,
        page,
        causal: false,
        scale: None,
        splits: 1,
        alibi: false,
        softcap: None,
        window: None,
        seed: 1,
        target: Target::Cpu,
        pack_gqa: false,
    }
}

/// GQA packing (one query per sequence, a group's query heads as a block's rows): groups of 4, 5 and
/// 20 (past the interpreter's 16-row block: two row blocks), 1; causal, a soft cap, scale, split and
/// merged; the interpreter's program and sm_90a's (64 rows, group rows past it zero-filled and
/// never stored).
#[test]
fn paged_decode_gqa_packed_matches_f64() {
    let packed = |c: Case| Case {
        pack_gqa: true,
        ..c
    };
    for target in [Target::Cpu, Target::Sm90a] {
        check(&packed(Case {
            heads: 8,
            heads_kv: 2,
            causal: true,
            seed: 41,
            target,
            ..case(&[300, 1, 37, 0], 16)
        }));
        check(&packed(Case {
            heads: 10,
            heads_kv: 2,
            splits: 3,
            softcap: Some(20.0),
            scale: Some(0.3),
            seed: 42,
            target,
            ..case(&[1000, 37, 2], 48)
        }));
        check(&packed(Case {
            heads: 40,
            heads_kv: 2,
            dim: 128,
            splits: 2,
            causal: true,
            seed: 43,
            target,
            ..case(&[1000, 37], 256)
        }));
        check(&packed(Case {
            heads: 2,
            heads_kv: 2,
            seed: 44,
            target,
            ..case(&[37, 300], 16)
        }));
    }
}

#[test]
fn paged_decode_page16_odd_lengths_gqa() {
    check(&case(&[1, 37, 300, 0], 16));
}

#[test]
fn paged_decode_page256_and_48() {
    check(&Case {
        seed: 2,
        ..case(&[1000, 37, 1], 256)
    });
    check(&Case {
        seed: 3,
        scale: Some(0.3),
        ..case(&[300, 1, 37], 48)
    });
}

#[test]
fn paged_decode_causal_bottom_right_several_queries() {
    // Four new queries per sequence: a sequence of 1 key leaves three rows keeping no key.
    check(&Case {
        seq_q: 4,
        causal: true,
        heads: 3,
        heads_kv: 1,
        seed: 4,
        ..case(&[37, 1, 300], 16)
    });
    check(&Case {
        seq_q: 19,
        causal: true,
        dim: 128,
        seed: 5,
        ..case(&[300, 20], 32)
    });
}

#[test]
fn paged_decode_split_kv_merged() {
    check(&Case {
        splits: 4,
        seed: 6,
        ..case(&[1000, 1, 37, 0], 16)
    });
    check(&Case {
        splits: 3,
        seq_q: 3,
        causal: true,
        seed: 7,
        ..case(&[300, 2], 64)
    });
}

/// ALiBi with the slopes read on the device: lengths no page size divides (page 16 and 48), GQA, the
/// bias aligned bottom-right with several queries (causal and not), a split walk merged, and the
/// sm_90a program on the interpreter.
#[test]
fn paged_decode_alibi_matches_f64() {
    let alibi = |c: Case| Case { alibi: true, ..c };
    check(&alibi(Case {
        seed: 21,
        ..case(&[300, 1, 37, 0], 16)
    }));
    check(&alibi(Case {
        seq_q: 5,
        causal: true,
        scale: Some(0.3),
        seed: 22,
        ..case(&[100, 37, 3], 48)
    }));
    check(&alibi(Case {
        seq_q: 3,
        splits: 3,
        seed: 23,
        ..case(&[1000, 2, 37], 16)
    }));
    check(&alibi(Case {
        seq_q: 4,
        causal: true,
        splits: 2,
        seed: 24,
        target: Target::Sm90a,
        ..case(&[300, 1, 37, 0], 48)
    }));
    check(&alibi(Case {
        seed: 25,
        dim: 128,
        target: Target::Sm90a,
        ..case(&[1000, 37], 256)
    }));
}

#[test]
fn paged_decode_refuses_what_it_does_not_take() {
    let e = kv_block_for(24, 64, Target::Cpu).unwrap_err().to_string();
    assert!(e.contains("page_size") && e.contains("24"), "{e}");
    // A soft cap must be finite and positive (0 is FlashAttention's "none": no cap at all here).
    let cfg = PagedConfig {
        dim: 64,
        causal: false,
        logits: Logits {
            scale: None,
            softcap: Some(0.0),
        },
        kv_block: 16,
        splits: 1,
        alibi: false,
        window: None,
        pack_gqa: false,
    };
    for target in [Target::Cpu, Target::Sm90a] {
        let e = build_for(&cfg, target).unwrap_err().to_string();
        assert!(e.contains("softcap") && e.contains('0'), "{e}");
        let e = build_for(
            &PagedConfig {
                logits: Logits::default(),
                window: Some(Window { left: -2, right: 0 }),
                ..cfg
            },
            target,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("window") && e.contains("-2"), "{e}");
        // Packed rows are heads: ALiBi's per-head slope and a window's per-row span are refused.
        for alibi in [true, false] {
            let e = build_for(
                &PagedConfig {
                    logits: Logits::default(),
                    pack_gqa: true,
                    alibi,
                    window: (!alibi).then(|| Window::new(64, 0).unwrap()),
                    ..cfg
                },
                target,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("pack_gqa"), "{e}");
        }
    }
    let e = build(&PagedConfig {
        logits: Logits::default(),
        splits: 17,
        ..cfg
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("num_splits") && e.contains("17"), "{e}");
}

/// The registry's problem: its random run (shuffled pages, the capacity, 1, 0 and random lengths)
/// through its stages on the interpreter (the split kernel and the merge with `num_splits` 3),
/// against its reference by the rule.
#[test]
fn registry_problem_runs_its_stages_on_the_interpreter() {
    use kittens_kernels::attn_paged_problem::{run_cpu, PagedProblem};
    use kittens_kernels::problem::{KernelProblem, NamedArgs};
    use rand::SeedableRng;
    for (splits, alibi) in [(1usize, false), (3, false), (1, true), (3, true)] {
        let args = NamedArgs::new()
            .with("batch", 5usize)
            .with("heads", 4usize)
            .with("heads_kv", 1usize)
            .with("seq", 2usize)
            .with("dim", 64usize)
            .with("causal", true)
            .with("page_size", 16usize)
            .with("max_blocks", 5usize)
            .with("num_splits", splits)
            .with("alibi", alibi);
        let p = PagedProblem::from_args(&args).expect("the problem parses");
        let plan = p.plan(kittens_hw::Target::Cpu).expect("the problem plans");
        let kernel = p.build(kittens_hw::Target::Cpu).expect("it builds");
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let inputs = p.draw(&kernel, &plan.launch, &mut rng);
        let r = p.reference(&inputs);
        let (o, lse) = run_cpu(&p, inputs).expect("the stages run");
        let n = o.len();
        let base = r.baseline.expect("a baseline");
        let (ours, b) = (
            compare(&o, &r.values[..n]),
            compare(&base[..n], &r.values[..n]),
        );
        let v = check_rule(ours.rel_err, b.rel_err, RULE_FLOOR);
        assert!(
            v.passed,
            "splits {splits} alibi {alibi}: rel_err {:.3e} (bf16 {:.3e})",
            ours.rel_err, b.rel_err
        );
        for (i, (&got, &want)) in lse.iter().zip(&r.values[n..]).enumerate() {
            let got = f64::from(got);
            let ok = if want.is_finite() {
                (got - want).abs() <= 1e-5 * (1.0 + want.abs())
            } else {
                got == want
            };
            assert!(
                ok,
                "splits {splits} alibi {alibi}: lse[{i}] = {got}, want {want}"
            );
        }
        eprintln!(
            "{}: rel_err {:.3e} (bf16 {:.3e})",
            plan.what, ours.rel_err, b.rel_err
        );
    }
}

/// The sm_90a program (`attn_paged_hopper`: 64-query blocks, one cp.async producer warpgroup, key
/// blocks of the largest of 128/64/32/16 dividing the page) on the interpreter: pages of 16 (16-key
/// blocks), 48 (16) and 256 (128, crossing no page), 64 at head dim 256 (64); lengths 0, 1, 37,
/// 300, 1000 that no page size divides; GQA; causal bottom-right with several queries; split-KV
/// with the merge. Stale cache rows are NaN: the per-step clip must keep them out of P·V.
#[test]
fn hopper_paged_decode_matches_f64() {
    let sm90 = |c: Case| Case {
        target: Target::Sm90a,
        ..c
    };
    check(&sm90(case(&[1, 37, 300, 0], 16)));
    check(&sm90(Case {
        seed: 12,
        dim: 128,
        heads: 8,
        heads_kv: 2,
        ..case(&[1000, 37, 1], 256)
    }));
    check(&sm90(Case {
        seed: 13,
        scale: Some(0.3),
        ..case(&[300, 1, 37], 48)
    }));
    check(&sm90(Case {
        seq_q: 19,
        causal: true,
        dim: 128,
        seed: 14,
        ..case(&[300, 20], 32)
    }));
    check(&sm90(Case {
        splits: 4,
        seed: 15,
        ..case(&[1000, 1, 37, 0], 16)
    }));
    check(&sm90(Case {
        splits: 3,
        seq_q: 3,
        causal: true,
        dim: 256,
        seed: 16,
        ..case(&[300, 2], 64)
    }));
}

/// The sm_90a lowering takes the Hopper program (cp.async fills, the table read on the device, no
/// tensor maps) and refuses the interpreter's one-wave program; gfx942 lowers the one-wave program
/// (the table read through its pointer; crates/kittens-runtime/tests/amd_index_reads.rs compiles and
/// emulates it; the soft cap and window forms lower too), gfx950 too (its 16-key P·V on the 16x16x16
/// bf16 MFMA CDNA4 keeps from CDNA3), and both refuse the Hopper program.
#[test]
fn sm90a_lowers_the_hopper_paged_program_cdna_the_plain_one() {
    let cfg = PagedConfig {
        dim: 128,
        causal: true,
        logits: Logits::default(),
        kv_block: 16,
        splits: 1,
        alibi: false,
        window: None,
        pack_gqa: false,
    };
    let hopper = build_for(&cfg, Target::Sm90a).unwrap();
    let l = kittens_codegen::lower(&hopper, Target::Sm90a).expect("sm_90a lowers it");
    assert!(!l
        .args
        .iter()
        .any(|a| matches!(a, kittens_codegen::KernelArg::TensorMap(_))));
    assert!(l.source.contains("g_block_table") && l.source.contains("cp.async"));
    let plain = build(&cfg).unwrap();
    assert!(kittens_codegen::lower(&plain, Target::Sm90a).is_err());
    // GQA packing, split and not: both programs lower (the schedule analysis samples parameters
    // where heads_kv does not divide heads).
    for splits in [1, 4] {
        let packed = PagedConfig {
            pack_gqa: true,
            splits,
            kv_block: 128,
            ..cfg
        };
        let hopper = build_for(&packed, Target::Sm90a).unwrap();
        kittens_codegen::lower(&hopper, Target::Sm90a).expect("sm_90a lowers the packed program");
        let plain = build(&PagedConfig {
            kv_block: 16,
            ..packed
        })
        .unwrap();
        for target in [Target::Gfx942, Target::Gfx950] {
            kittens_codegen::lower(&plain, target).expect("CDNA lowers the packed program");
        }
    }
    let alibi = build(&PagedConfig { alibi: true, ..cfg }).unwrap();
    for target in [Target::Gfx942, Target::Gfx950] {
        let l = kittens_codegen::lower(&plain, target).expect("CDNA lowers it");
        assert!(l.source.contains("((const int*)g_block_table)"));
        // The ALiBi form: the slopes read through their zero-stride view on CDNA too.
        let l = kittens_codegen::lower(&alibi, target).expect("CDNA lowers the ALiBi form");
        assert!(l.source.contains("g_alibi"), "the slopes are read");
    }
    // The soft cap and the window (the shared key masks) lower there too.
    let capped = build(&PagedConfig {
        logits: Logits {
            scale: None,
            softcap: Some(30.0),
        },
        window: Some(Window {
            left: 100,
            right: 0,
        }),
        ..cfg
    })
    .unwrap();
    kittens_codegen::lower(&capped, Target::Gfx942).expect("gfx942 lowers the soft cap and window");
    for target in [Target::Gfx942, Target::Gfx950] {
        let e = kittens_codegen::lower(&hopper, target).unwrap_err();
        eprintln!("hopper program on {target:?}: {e}");
    }
}

fn window(left: i64, right: i64) -> Option<Window> {
    Some(Window::new(left, right).expect("a window"))
}

/// A soft cap (`cap·tanh`, before ALiBi and the masks) against the f64 reference: small caps that
/// bend most logits (scores up to about ±8 scaled), GQA, page sizes no length divides, causal with
/// several queries, ALiBi after the cap, a split walk merged; the interpreter's and sm_90a's programs.
#[test]
fn paged_decode_softcap_matches_f64() {
    let cap = |c: Case| Case {
        softcap: Some(2.5),
        ..c
    };
    for target in [Target::Cpu, Target::Sm90a] {
        check(&cap(Case {
            seed: 31,
            target,
            ..case(&[300, 1, 37, 0], 16)
        }));
        check(&cap(Case {
            seq_q: 5,
            causal: true,
            alibi: true,
            scale: Some(0.3),
            seed: 32,
            target,
            ..case(&[100, 37, 3], 48)
        }));
        check(&cap(Case {
            seq_q: 3,
            splits: 3,
            softcap: Some(7.0),
            seed: 33,
            target,
            ..case(&[1000, 2, 37], 16)
        }));
    }
}

/// A sliding window aligned bottom-right per sequence (query `i` at key position `len − seq_q + i`,
/// FlashAttention's rule with a KV cache): windows whose edges cut inside pages and key steps and
/// at their edges, left only, right only, both, with causal, wider than the sequence, several
/// queries, GQA, ALiBi and a soft cap together, a split walk merged; the interpreter's and sm_90a's
/// programs (sm_90a's key steps of 128 at page 256 walk a window that starts mid-page).
#[test]
fn paged_decode_window_matches_f64() {
    for target in [Target::Cpu, Target::Sm90a] {
        let t = |c: Case| Case { target, ..c };
        // Left side only, cutting a page of 16 mid-way (21 keys: 1 page + 5).
        check(&t(Case {
            window: window(20, -1),
            seed: 41,
            ..case(&[300, 1, 37, 0], 16)
        }));
        // Both sides with several queries, at a page edge (left 47 at page 48) and not.
        check(&t(Case {
            seq_q: 5,
            window: window(47, 2),
            seed: 42,
            ..case(&[100, 37, 3, 48], 48)
        }));
        // Causal with a left side: the walk skips the steps before the window.
        check(&t(Case {
            seq_q: 7,
            causal: true,
            window: window(130, 0),
            seed: 43,
            ..case(&[1000, 129, 2], 256)
        }));
        // Right side only (no left bound: the whole cache walked), causal tighter than it.
        check(&t(Case {
            seq_q: 4,
            causal: true,
            window: window(-1, 3),
            seed: 44,
            ..case(&[300, 5], 16)
        }));
        // Everything together, split three ways, a window at a key step's edge (left 15 + the row).
        check(&t(Case {
            seq_q: 3,
            splits: 3,
            alibi: true,
            softcap: Some(5.0),
            window: window(15, 0),
            seed: 45,
            dim: 128,
            heads: 8,
            heads_kv: 2,
            ..case(&[1000, 17, 16, 1], 32)
        }));
        // A full block of queries (16 rows on the interpreter, 64 on sm_90a) whose windows span
        // `left + rows` keys from a first key inside a step: the most steps the walk's bound allows.
        let rows = if target == Target::Cpu { 16 } else { 64 };
        check(&t(Case {
            seq_q: rows,
            causal: true,
            window: window(rows as i64, 0),
            seed: 47,
            ..case(&[300, 101, 37], 64)
        }));
        // A window wider than every sequence: the unwindowed answer.
        check(&t(Case {
            seq_q: 2,
            window: window(5000, 5000),
            splits: 2,
            seed: 46,
            ..case(&[300, 1, 0], 64)
        }));
    }
}
