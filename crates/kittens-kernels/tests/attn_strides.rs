//! Attention forward and backward with every tensor in its own strides (`kittens_kernels::attn::strides`),
//! read and written in place by the strided programs on the CPU interpreter, against the f64
//! reference on the same values gathered dense, judged by FlashAttention's rule (at most 2x the plain
//! bf16 computation's error + 2^-12), at lengths that are not multiples of any tile:
//!
//! - Q, K, V sliced out of one fused `(B, N, H + 2·H_kv, D)` projection (row stride `(H + 2·H_kv)·D`);
//! - a Hugging Face-style call: Q a transposed `(B, N, H, D)` buffer, K and V dense `(B, H_kv, N_kv, D)`,
//!   O (and the gradients) in padded buffers whose gaps must stay untouched.
//!
//! The backward also takes the log-sum-exp's gradient (`BwdConfig::dlse`), against the f64 backward
//! with the lse term (`reference_bwd::backward_dlse`), both as one launch (the CPU's) and as the two
//! launches CDNA runs strided tensors in (query blocks, then key blocks; gfx942's key loop the 4-wave
//! interleave by default, and the 8-wave ping-pong as its `pingpong8` variant), the latter the very
//! kernels the AMD lowering gets, here on the interpreter.

use kittens_hw::dtype::DType::Bf16;
use kittens_hw::Target;
use kittens_ir::interp;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::attn::score::AttnOptions;
use kittens_kernels::attn::strides::{gather, offset, span, AttnStrides};
use kittens_kernels::attn::{AttnArgs, AttnLayout, BwdShape, Causal};
use kittens_kernels::attn_bwd::problem::BwdProblem;
use kittens_kernels::attn_fwd::problem::AttnProblem;
use kittens_kernels::problem::{KernelProblem, RunSettings};
use kittens_kernels::reference::{check_rule, compare, RULE_FLOOR};
use kittens_kernels::{reference_bwd, reference_fwd};

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

// Exactly representable in bf16: what the gaps of a written tensor hold before and after.
const SENTINEL: f32 = 12288.0;

struct Case {
    name: &'static str,
    sh: BwdShape,
    st: AttnStrides,
    causal: Causal,
}

/// The forward's problem of `c` (with the log-sum-exp output).
fn problem(c: &Case) -> AttnProblem {
    let sh = BwdShape {
        layout: AttnLayout::Bhsd,
        ..c.sh
    };
    AttnProblem {
        args: AttnArgs::of(&sh, c.causal, &Default::default()),
        lse: true,
        attn_strides: Some(c.st),
        ..AttnProblem::default()
    }
}

/// The backward's problem of `c` (with the log-sum-exp's gradient folded in).
fn bwd_problem(c: &Case) -> BwdProblem {
    let f = problem(c);
    BwdProblem {
        attn_strides: f.attn_strides,
        dlse: true,
        ..BwdProblem::with(f.args)
    }
}

fn shapes(sh: &BwdShape) -> ([usize; 4], [usize; 4]) {
    (
        [sh.batch, sh.heads, sh.seq_q, sh.dim],
        [sh.batch, sh.heads_kv, sh.seq_kv, sh.dim],
    )
}

/// A buffer of `span` sentinels with `dense` (`[b, h, s, d]` order) written at strides `st`.
fn scatter(dense: &[f32], shape: [usize; 4], st: [usize; 3]) -> Vec<f32> {
    let mut out = vec![SENTINEL; span(shape, st).unwrap()];
    let [_, nh, ns, nd] = shape;
    for (i, &x) in dense.iter().enumerate() {
        out[offset(
            st,
            [i / (nd * ns * nh), i / (nd * ns) % nh, i / nd % ns, i % nd],
        )] = x;
    }
    out
}

/// Every element of `buf` that is not one of the tensor's own still holds the sentinel.
fn gaps_untouched(buf: &[f32], shape: [usize; 4], st: [usize; 3]) -> bool {
    let mine = scatter(&vec![0.0; shape.iter().product()], shape, st);
    buf.iter()
        .zip(&mine)
        .all(|(&b, &m)| m == 0.0 || b == SENTINEL)
}

fn judge(what: &str, ours: &[f32], want: &[f64], base: &[f32]) {
    let (o, b) = (compare(ours, want), compare(base, want));
    for (name, e, eb) in [
        ("rel_err", o.rel_err, b.rel_err),
        ("max_rel", o.max_rel, b.max_rel),
    ] {
        let v = check_rule(e, eb, RULE_FLOOR);
        eprintln!(
            "{what}: {name} {e:.3e} (bf16 {eb:.3e}, bound {:.3e})",
            v.bound
        );
        assert!(
            v.passed,
            "{what}: {name} {e:.3e} over the rule's bound {:.3e} (bf16 baseline {eb:.3e})",
            v.bound
        );
    }
}

/// The dense `[b, h, s, d]` view of the strided problem (the references' layout).
fn dense(sh: &BwdShape) -> BwdShape {
    BwdShape {
        layout: AttnLayout::Bhsd,
        ..*sh
    }
}

fn check(c: &Case, seed: u64) {
    let (sh, opts) = (dense(&c.sh), AttnOptions::default());
    let (q_shape, kv_shape) = shapes(&sh);
    let mut s = seed;
    let (nq, nkv) = (sh.q_len(), sh.kv_len());
    let (q, k, v, d_o) = (
        random(&mut s, nq, 2.0),
        random(&mut s, nkv, 2.0),
        random(&mut s, nkv, 1.0),
        random(&mut s, nq, 1.0),
    );
    // The log-sum-exp's gradient (the problem's `lse` on the backward): folded into D.
    let dlse = random(&mut s, sh.lse_len(), 1.0);
    let p = problem(c);

    // Forward: q, k, v in their strides (sentinels between their rows: read, never used), o written.
    let kernel = p.build(Target::Cpu).expect("the strided forward builds");
    let launch = p.launch().expect("its launch");
    let mut t = vec![
        scatter(&q, q_shape, c.st.q),
        scatter(&k, kv_shape, c.st.k),
        scatter(&v, kv_shape, c.st.v),
        vec![SENTINEL; span(q_shape, c.st.o).unwrap()],
        vec![SENTINEL; sh.lse_len()],
    ];
    interp::run(&kernel, &launch.params, &mut t).expect("the interpreter runs the forward");
    let what = format!("{} ({:?})", c.name, c.causal);
    assert!(
        gaps_untouched(&t[3], q_shape, c.st.o),
        "{what}: o written outside its elements"
    );
    let (want_o, _, _) = reference_fwd::forward_with(&q, &k, &v, &sh, c.causal, &opts);
    let (base_o, _) =
        reference_fwd::forward_bf16_baseline_with(&q, &k, &v, &sh, c.causal, Rounding::Rtne, &opts);
    judge(
        &format!("{what} forward o"),
        &gather(&t[3], q_shape, c.st.o),
        &want_o,
        &base_o,
    );

    // Backward from the exact forward's O (bf16) and log-sum-exp, as a forward hands them over.
    let f = reference_bwd::forward_with(&q, &k, &v, &sh, c.causal, &opts);
    let o: Vec<f32> =
        f.o.iter()
            .map(|&x| round(x as f32, Bf16, Rounding::Rtne))
            .collect();
    let lse: Vec<f32> = f.lse.iter().map(|&x| x as f32).collect();
    let pb = bwd_problem(c);
    let kernel = pb.build(Target::Cpu).expect("the strided backward builds");
    let launch = pb.launch().expect("its launch");
    let mut t = vec![
        scatter(&q, q_shape, c.st.q),
        scatter(&k, kv_shape, c.st.k),
        scatter(&v, kv_shape, c.st.v),
        scatter(&o, q_shape, c.st.o),
        scatter(&d_o, q_shape, c.st.d_o),
        lse,
        dlse.clone(),
        vec![SENTINEL; span(q_shape, c.st.dq).unwrap()],
        vec![SENTINEL; span(kv_shape, c.st.dk).unwrap()],
        vec![SENTINEL; span(kv_shape, c.st.dv).unwrap()],
    ];
    interp::run(&kernel, &launch.params, &mut t).expect("the interpreter runs the backward");
    let one_launch = t.split_off(7);
    // The CDNA form: the query blocks and the key blocks as two launches (gfx942's with the 4-wave
    // interleave's key loop), each reading the inputs and writing its own outputs, by name.
    let mut forms = vec![("one launch".to_string(), one_launch)];
    let pingpong8 = BwdProblem {
        run: RunSettings {
            variant: Some("pingpong8"),
            ..pb.run
        },
        ..pb
    };
    for (target, pb) in [
        (Target::Gfx950, &pb),
        (Target::Gfx942, &pb),
        (Target::Gfx942, &pingpong8),
    ] {
        let plan = pb
            .plan(target)
            .expect("the strided backward plans for CDNA");
        let stages = pb.stages(target, &plan).expect("its launches");
        assert_eq!(stages.len(), 2, "{target}: query and key blocks");
        let mut out = [c.st.dq, c.st.dk, c.st.dv]
            .iter()
            .zip([q_shape, kv_shape, kv_shape])
            .map(|(&st, shape)| vec![SENTINEL; span(shape, st).unwrap()])
            .collect::<Vec<_>>();
        for st in &stages {
            let names = ["dq", "dk", "dv"];
            let written: Vec<usize> = st
                .kernel
                .globals
                .iter()
                .filter_map(|g| names.iter().position(|n| *n == g.name))
                .collect();
            let mut bufs = t.clone();
            bufs.extend(written.iter().map(|&i| out[i].clone()));
            interp::run(&st.kernel, &st.launch.params, &mut bufs)
                .unwrap_or_else(|e| panic!("{target} {}: {e}", st.kernel.name));
            for (j, &i) in written.iter().enumerate() {
                out[i] = bufs[7 + j].clone();
            }
        }
        let schedule = pb.run.variant.unwrap_or("default");
        forms.push((format!("{target} {schedule} two launches"), out));
    }
    let dl = Some(dlse.as_slice());
    let g = reference_bwd::backward_dlse(&q, &k, &v, &d_o, dl, &sh, c.causal, &opts);
    let base =
        reference_bwd::backward_bf16_baseline_dlse(&q, &k, &v, &d_o, dl, &sh, c.causal, &opts);
    for (form, t) in &forms {
        for (i, (name, shape, st, want)) in [
            ("dq", q_shape, c.st.dq, &g.dq),
            ("dk", kv_shape, c.st.dk, &g.dk),
            ("dv", kv_shape, c.st.dv, &g.dv),
        ]
        .into_iter()
        .enumerate()
        {
            assert!(
                gaps_untouched(&t[i], shape, st),
                "{what} {form}: {name} written outside its elements"
            );
            judge(
                &format!("{what} {form} backward {name}"),
                &gather(&t[i], shape, st),
                want,
                &base[i],
            );
        }
    }
}

/// Q, K, V sliced out of one fused `(B, N, H + 2·H_kv, D)` projection; O and the gradients dense
/// `(B, N, H, D)` and `(B, N, H_kv, D)` buffers seen transposed.
#[test]
fn fused_qkv_slices_at_odd_lengths() {
    let (b, h, hk, n, d) = (2, 4, 2, 67, 64);
    let w = (h + 2 * hk) * d; // the fused row
    let fused = [n * w, d, w];
    let bshd = |heads: usize| [n * heads * d, d, heads * d];
    let st = AttnStrides {
        q: fused,
        k: fused,
        v: fused,
        o: bshd(h),
        d_o: bshd(h),
        dq: bshd(h),
        dk: bshd(hk),
        dv: bshd(hk),
    };
    for causal in [Causal::No, Causal::TopLeft] {
        let sh = BwdShape {
            batch: b,
            heads: h,
            heads_kv: hk,
            seq_q: n,
            seq_kv: n,
            dim: d,
            layout: AttnLayout::Bhsd,
        };
        check(
            &Case {
                name: "fused qkv",
                sh,
                st,
                causal,
            },
            7,
        );
    }
}

/// A Hugging Face Llama's call: Q transposed, K and V dense, queries and keys of different odd
/// lengths; O, dO and the gradients in row-padded buffers (a row stride past the head dim).
#[test]
fn hf_mixed_layouts_and_padded_outputs() {
    let (b, h, hk, n, nk, d) = (2, 4, 1, 45, 83, 64);
    let pad = d + 16;
    let st = AttnStrides {
        q: [n * h * d, d, h * d],
        k: [hk * nk * d, nk * d, d],
        v: [hk * nk * d, nk * d, d],
        o: [h * n * pad, n * pad, pad],
        d_o: [n * h * d, d, h * d],
        dq: [n * h * pad, pad, h * pad],
        dk: [hk * nk * pad, nk * pad, pad],
        dv: [nk * hk * d, d, hk * d],
    };
    for causal in [Causal::No, Causal::BottomRight] {
        let sh = BwdShape {
            batch: b,
            heads: h,
            heads_kv: hk,
            seq_q: n,
            seq_kv: nk,
            dim: d,
            layout: AttnLayout::Bhsd,
        };
        check(
            &Case {
                name: "hf mixed",
                sh,
                st,
                causal,
            },
            11,
        );
    }
}

/// A written tensor whose elements overlap is refused, naming it and its strides.
#[test]
fn overlapping_output_is_refused() {
    let (b, h, n, d) = (1, 2, 33, 64);
    let dense = AttnStrides::dense(AttnLayout::Bhsd, h, h, n, n, d);
    let st = AttnStrides {
        o: [h * n * d, 0, d],
        ..dense
    };
    let sh = BwdShape {
        batch: b,
        heads: h,
        heads_kv: h,
        seq_q: n,
        seq_kv: n,
        dim: d,
        layout: AttnLayout::Bhsd,
    };
    let p = problem(&Case {
        name: "overlap",
        sh,
        st,
        causal: Causal::No,
    });
    let e = p
        .launch()
        .expect_err("an o whose heads share rows")
        .to_string();
    assert!(
        e.contains("o: strides [4224, 0, 64]") && e.contains("overlap"),
        "{e}"
    );
    let st = AttnStrides {
        dk: [h * n * d, d, d],
        ..dense
    };
    let p = bwd_problem(&Case {
        name: "overlap",
        sh,
        st,
        causal: Causal::No,
    });
    let e = p
        .launch()
        .expect_err("a dk whose rows overlap its heads")
        .to_string();
    assert!(e.contains("dk: strides") && e.contains("overlap"), "{e}");
    // MI300X-attn's kernel reads V pre-transposed: it takes no caller strides, and says so.
    let p = AttnProblem {
        run: RunSettings {
            variant: Some("seed001"),
            ..RunSettings::default()
        },
        ..problem(&Case {
            name: "mi300x",
            sh,
            st: dense,
            causal: Causal::No,
        })
    };
    let e = p
        .build(Target::Cpu)
        .expect_err("seed001 with strides")
        .to_string();
    assert!(e.contains("mi300x") && e.contains("strides"), "{e}");
}

/// gfx942 builds the strided backward's 8-wave ping-pong (it refused it while its key launch
/// spilled SGPRs): the key launch runs the ping-pong's 8 waves, the query launch the ping-pong's 8 at
/// head dim 64 and the 4-wave interleave's at 128 (`attn_bwd::problem::query_launch`); gfx950 and
/// the CPU build it as before. kittens-runtime's tests/attn_strides.rs compiles every launch without
/// spills and runs it on the ISA emulator; `check` above runs it on the interpreter against f64.
#[test]
fn strided_pingpong8_on_gfx942_builds() {
    use kittens_kernels::attn_bwd::problem::PINGPONG8;
    for dim in [64, 128] {
        let (h, n) = (2, 45);
        let sh = BwdShape {
            batch: 1,
            heads: h,
            heads_kv: h,
            seq_q: n,
            seq_kv: n,
            dim,
            layout: AttnLayout::Bhsd,
        };
        let c = Case {
            name: "pingpong8",
            sh,
            st: AttnStrides::dense(AttnLayout::Bshd, h, h, n, n, dim),
            causal: Causal::No,
        };
        let with = |variant| BwdProblem {
            run: RunSettings {
                variant,
                ..RunSettings::default()
            },
            ..bwd_problem(&c)
        };
        let p = with(Some(PINGPONG8));
        let t = Target::Gfx942;
        let stages = p
            .stages(t, &p.plan(t).unwrap())
            .unwrap_or_else(|e| panic!("strided pingpong8 on gfx942 D{dim}: {e}"));
        let waves: Vec<(String, u32)> = stages
            .iter()
            .map(|s| (s.kernel.name.clone(), s.kernel.waves))
            .collect();
        let query_waves = if dim == 64 { 8 } else { 4 };
        assert_eq!(
            waves,
            [
                ("attn_bwd_queries".to_string(), query_waves),
                ("attn_bwd_keys".to_string(), 8)
            ],
            "D{dim}"
        );
        assert_eq!(
            stages[1].kernel.schedule,
            kittens_ir::Schedule::PingPong8,
            "D{dim}"
        );
        // The key launch's dK and dV, written only after its loop, read their pointers and strides
        // at the stores (`kittens_codegen::hip`'s late_args.rs); Q, read in the loop, does not.
        let src = kittens_codegen::hip::lower(&stages[1].kernel, kittens_hw::Arch::Cdna3)
            .unwrap()
            .source;
        for (name, late) in [("dk", true), ("dv", true), ("q", false)] {
            let read = format!("g_{name} = kernarg_late<");
            assert_eq!(src.contains(&read), late, "D{dim}: {read}");
        }
        for (t, q) in [
            (Target::Gfx942, with(None)),
            (Target::Gfx950, with(Some(PINGPONG8))),
            (Target::Cpu, with(Some(PINGPONG8))),
        ] {
            let stages = q.stages(t, &q.plan(t).unwrap()).unwrap();
            assert!(!stages.is_empty(), "{t} D{dim}");
        }
    }
}
