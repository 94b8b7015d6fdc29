//! Runs the *lowered HIP* of the ping-pong GEMM on the CPU: the generated source is compiled for the
//! host against the emulation header (`kittens_runtime::amd::emulate`: threads for lanes, static storage
//! for LDS, wave-collective MFMAs on the ISA lane maps) and its output compared with an f64 reference.
//! This checks the lowering's index math, swizzles, buffer placement, lane maps and MFMA plumbing on
//! both targets' code paths; it says nothing about timing, and waits are not modelled (the schedule
//! analysis checks those). No AMD GPU is involved.

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "amd_support/gemm.rs"]
mod gemm;

use kittens_codegen::hip::lower;
use kittens_hw::{Arch, Target};
use kittens_ir::Kernel;
use kittens_kernels::attn::AttnArgs;
use kittens_runtime::amd::emulate::{Emulator, HostTensor};
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

fn f32_of(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(b: &[u8]) -> Vec<u16> {
    b.chunks(2)
        .map(|p| u16::from_le_bytes([p[0], p[1]]))
        .collect()
}

/// Bf16 NaN everywhere: every element must be written.
fn nan_words(len: usize) -> Vec<u8> {
    bytes(&vec![0x7fc0; len])
}

/// Run the emulated kernel on random bf16 inputs and check every output against f64.
fn check(tag: &str, kernel: &Kernel, arch: Arch, shapes: &[(usize, usize, usize)]) {
    let emu = Emulator::build(kernel, arch).expect("lowers and compiles for the host");
    for &(m, n, k) in shapes {
        let mut rng = SmallRng::seed_from_u64((m * 131 + n * 17 + k) as u64);
        let mut gen = |len: usize| {
            (0..len)
                .map(|_| bf16_bits(rng.gen_range(-1.0f32..1.0)))
                .collect::<Vec<u16>>()
        };
        let (a, b) = (gen(m * k), gen(n * k));
        let mut t = vec![
            HostTensor::Data(bytes(&a)),
            HostTensor::Data(bytes(&b)),
            HostTensor::Data(nan_words(m * n)),
        ];
        emu.run(&[m as i64, n as i64, k as i64], &mut t, None)
            .unwrap_or_else(|e| panic!("{tag} {m}x{n}x{k}: {e}"));
        let HostTensor::Data(c) = &t[2] else {
            unreachable!()
        };
        let c = words(c);
        let mut worst = 0.0f64;
        for i in 0..m {
            for j in 0..n {
                let (mut r, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let x = f32_of(a[i * k + p]) as f64 * f32_of(b[j * k + p]) as f64;
                    r += x;
                    mag += x.abs();
                }
                let bound = r.abs() * 2f64.powi(-8) + mag * k as f64 * f32::EPSILON as f64 + 1e-30;
                let got = f32_of(c[i * n + j]) as f64;
                assert!(
                    (got - r).abs() <= bound,
                    "{} {m}x{n}x{k}: C[{i}][{j}] = {got}, reference {r}",
                    arch.target()
                );
                worst = worst.max((got - r).abs() / bound);
            }
        }
        eprintln!(
            "{} {} {m}x{n}x{k}: worst error {worst:.3} of the bound",
            kernel.name,
            arch.target()
        );
    }
}

#[test]
fn lowered_gemm_runs_right_gfx950_path() {
    check(
        "test",
        &gemm::gemm_bf16(Arch::Cdna4),
        Arch::Cdna4,
        &[(256, 256, 128), (264, 300, 72)],
    );
}

#[test]
fn lowered_gemm_runs_right_gfx942_path() {
    check(
        "test",
        &gemm::gemm_bf16(Arch::Cdna3),
        Arch::Cdna3,
        &[(256, 256, 128), (264, 300, 72)],
    );
}

/// The registry's gemm_bf16 (kittens-kernels) through the same path, configured as `kittens compile`
/// configures it per target (`GemmConfig::for_gpu`): MI355X double-buffers in LDS (gfx950), MI325X
/// stages the next K step in registers (gfx942, HipKittens E.1).
#[test]
fn registry_gemm_runs_right_both_paths() {
    use kittens_kernels::gemm::{build, GemmConfig, Staging};
    for (gpu, staging) in [("mi355x", Staging::Lds), ("mi325x", Staging::Registers)] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let cfg = GemmConfig::for_gpu(g);
        assert_eq!(cfg.staging, staging);
        let k = build(&cfg).unwrap();
        check("registry", &k, g.arch, &[(256, 256, 128), (300, 264, 72)]);
    }
}

/// Swizzled shared tiles (HipKittens' 16×32 XOR on a 64×32 A tile, the two-term 32×32 XOR on B): the
/// async loads fetch each LDS byte's logical element through the inverse swizzle and the LDS reads
/// apply the swizzle, so the product is still right.
fn swizzled_gemm() -> Kernel {
    use kittens_hw::dtype::DType;
    use kittens_ir::{Expr, GridOrder, KernelBuilder, Schedule};
    use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};
    let mut b = KernelBuilder::new("swizzled_gemm", Schedule::Plain { waves: 4 });
    let gemm::AbtOperands {
        m,
        n,
        k,
        a: ga,
        b: gb,
        c: gc,
    } = gemm::abt_operands(&mut b, DType::Bf16);
    b.grid(vec![m.ceil_div(64), n.ceil_div(32)], GridOrder::RowMajor);
    let sa = b.shared("sa", DType::Bf16, 64, 32, Swizzle::HK_16X32, 1);
    let sb = b.shared_tile("sb", SharedTile::new(DType::Bf16, 32, 32), 1);
    let ra = b.tile("ra", DType::Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    let rb = b.tile("rb", DType::Bf16, 32, 32, Layout::Row, BaseShape::S16X32);
    let rc = b.tile("rc", DType::F32, 16, 32, Layout::Col, BaseShape::S16X16);
    b.zero(rc);
    let (row, col) = (b.block(0), b.block(1));
    b.for_range("t", 0, k.ceil_div(32), |b, t| {
        let (da, db) = (b.smem(sa, 0), b.smem(sb, 0));
        let (srca, srcb) = (
            b.gtile(ga, 64, 32, row.clone(), t.clone()),
            b.gtile(gb, 32, 32, col.clone(), t),
        );
        b.load_async(da, srca);
        b.load_async(db, srcb);
        b.wait_async(0);
        b.barrier();
        let (va, vb) = (b.smem(sa, 0).sub(16, 32, Expr::Wave, 0), b.smem(sb, 0));
        b.load(ra, va);
        b.load(rb, vb);
        b.wait_shared(0);
        b.barrier();
        b.mma_abt(rc, ra, rb, rc);
    });
    let dst = b.gtile(gc, 16, 32, &row * 4 + Expr::Wave, col);
    b.store(dst, rc);
    b.finish().expect("builds")
}

#[test]
fn swizzled_tiles_run_right_on_both_targets() {
    let k = swizzled_gemm();
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        // The lowering applies the bank solver's swizzles (the typed ones only break ties).
        let src = lower(&k, arch).unwrap().source;
        let plan = kittens_ir::banks::plan(&k, arch).unwrap();
        for t in &plan.tiles {
            let terms = match t.swizzle {
                kittens_tile::Swizzle::Xor { bits, base, shift } => vec![(bits, base, shift)],
                kittens_tile::Swizzle::Xor2 {
                    first: a,
                    second: b,
                } => {
                    vec![(a.bits, a.base, a.shift), (b.bits, b.base, b.shift)]
                }
                kittens_tile::Swizzle::None => {
                    panic!("{}: the solver left it unswizzled", t.buffer)
                }
            };
            for (b, m, s) in terms {
                assert!(
                    src.contains(&format!("xor_flips<{b}, {m}, {s}>")),
                    "{} applied",
                    t.chosen
                );
            }
        }
        check("swizzled", &k, arch, &[(64, 32, 64), (100, 70, 72)]);
    }
}

/// Run the registry's attention, lowered for `target` as the runner's `hip-emu` backend builds it (the
/// target GPU's tiles; head dim, causality and layout from the shape), on random bf16 inputs uniform in
/// [-8, 8) (`input_scale` 8: logits up to about ±90 at head dim 128) for each shape, and judge it as
/// every backend is judged (`kittens_kernels::reference::judge`: the test rule `check_rule`, at most 2x
/// the error of PyTorch-style bf16 attention against the same f64 reference plus a floor, on `rel_err`
/// and `max_rel`); returns the reports.
fn check_attention(
    target: kittens_hw::Target,
    causal: bool,
    shapes: &[kittens_kernels::attn::AttnShape],
) -> Vec<kittens_runtime::runner::RunReport> {
    use kittens_kernels::attn_fwd::problem::AttnProblem;
    use kittens_kernels::problem::RunSettings;
    use kittens_runtime::runner::{run, HipEmu};
    let entry = kittens_kernels::by_name("attn_fwd").unwrap();
    let emu = HipEmu::new(target).unwrap();
    let mut reports = Vec::new();
    for sh in shapes {
        let p = AttnProblem {
            args: AttnArgs {
                attn: *sh,
                causal,
                ..Default::default()
            },
            run: RunSettings {
                input_scale: 8.0,
                seed: (sh.seq * 7 + sh.heads) as u64,
                ..RunSettings::default()
            },
            ..AttnProblem::default()
        };
        let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("{target} {sh:?}: {e}"));
        eprintln!(
            "{} {target} {sh:?}: {:?}, baseline {:?}, max |logit| {:?}",
            r.kernel, r.error, r.baseline, r.max_abs_logit
        );
        let metrics: Vec<&str> = r.checks.iter().map(|c| c.metric).collect();
        assert_eq!(metrics, ["rel_err", "max_rel"], "{target} {sh:?}");
        for c in &r.checks {
            assert!(c.verdict.baseline.is_some(), "{target} {sh:?}: by the rule");
            assert!(c.verdict.passed, "{target} {sh:?}: {c:?}");
        }
        assert!(r.passed, "{target} {sh:?}: {r:?}");
        reports.push(r);
    }
    reports
}

/// Attention shapes: GQA (4 query heads on 2 KV heads), a sequence that is not a multiple of the
/// 32-key block nor of the 256-query block, and two query blocks.
fn attn_shapes(layout: kittens_kernels::attn::AttnLayout) -> Vec<kittens_kernels::attn::AttnShape> {
    let sh = |batch, heads, heads_kv, seq| kittens_kernels::attn::AttnShape {
        batch,
        heads,
        heads_kv,
        seq,
        dim: 128,
        layout,
    };
    vec![sh(1, 4, 2, 77), sh(2, 2, 1, 300)]
}

/// The registry's attn_fwd (HipKittens E.3: K·Qᵀ scores in the accumulator layout, column softmax through
/// lane butterflies, P through the LDS remap into the second MFMA's operand) as configured for each
/// target, causal and not, BSHD and BHSD.
#[test]
fn lowered_attention_matches_f64_both_paths() {
    use kittens_kernels::attn::AttnLayout;
    for target in [Target::Gfx950, Target::Gfx942] {
        for (causal, layout) in [(false, AttnLayout::Bshd), (true, AttnLayout::Bhsd)] {
            for r in check_attention(target, causal, &attn_shapes(layout)) {
                // The inputs' scale reaches the emulated kernel: logits past ±64.
                let l = r.max_abs_logit.unwrap();
                assert!(l >= 64.0, "{target} causal={causal}: logits reach only {l}");
            }
        }
    }
}

/// Ragged edges at element granularity on both targets' registry GEMM: K not a multiple of the 8-element
/// (16-byte) chunk a lane loads, and M, N, K down to 1. Before, a chunk crossing the last column was
/// masked whole: 64x64x68 gave C[0][0] = 1.0703 for 1.7300, 64x64x3 gave C = 0.
#[test]
fn registry_gemm_ragged_shapes_both_targets() {
    use kittens_kernels::gemm::{build, GemmConfig};
    for gpu in ["mi355x", "mi325x"] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let k = build(&GemmConfig::for_gpu(g)).unwrap();
        check(
            "ragged",
            &k,
            g.arch,
            &[
                (64, 64, 68),
                (64, 64, 3),
                (1, 1, 1),
                (77, 33, 5),
                (3, 300, 9),
                (130, 260, 131),
            ],
        );
    }
}

/// Attention at odd sequence lengths (rows masked at the last key block and query block) and a head dim
/// other than the default, on both targets, causal and not.
#[test]
fn lowered_attention_odd_sequences_both_paths() {
    use kittens_kernels::attn::AttnLayout;
    for target in [Target::Gfx950, Target::Gfx942] {
        for (causal, layout) in [(false, AttnLayout::Bshd), (true, AttnLayout::Bhsd)] {
            let sh = |seq| kittens_kernels::attn::AttnShape {
                batch: 1,
                heads: 2,
                heads_kv: 1,
                seq,
                dim: 64,
                layout,
            };
            check_attention(target, causal, &[sh(1), sh(3), sh(33)]);
        }
    }
}

/// The same ragged GEMM shapes through the runner's `hip-emu` backend, as `kittens run --backend hip-emu`
/// runs them: the registry kernel as configured for each target's GPU, judged by the kernel's tolerance.
#[test]
fn registry_gemm_ragged_shapes_on_the_runner() {
    use kittens_kernels::gemm::problem::GemmProblem;
    use kittens_kernels::problem::RunSettings;
    use kittens_runtime::runner::{run, HipEmu};
    let entry = kittens_kernels::by_name("gemm_bf16").unwrap();
    for target in [Target::Gfx950, Target::Gfx942] {
        let emu = HipEmu::new(target).unwrap();
        for (m, n, k) in [(64, 64, 68), (64, 64, 3), (1, 1, 1), (77, 33, 5)] {
            let p = GemmProblem {
                m,
                n,
                k,
                run: RunSettings {
                    seed: (m + n + k) as u64,
                    ..RunSettings::default()
                },
                ..GemmProblem::default()
            };
            let r = run(entry, &p, &emu).unwrap_or_else(|e| panic!("{target} {m}x{n}x{k}: {e}"));
            assert!(r.passed, "{target} {m}x{n}x{k}: {r:?}");
            assert_eq!(r.configured_for, target.gpu().map(|g| g.name));
            // bf16 output of an fp32 accumulation: about 2^-9 relative at most.
            assert!(r.error.rel_err < 5e-3, "{target} {m}x{n}x{k}: {r:?}");
        }
    }
}
