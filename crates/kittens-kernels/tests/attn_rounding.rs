//! The attention output's rounding modes (RTNE, RTNA, RTZ; MI300X-attn §6) on the CPU interpreter:
//! the three kernels compute the same f32 output and differ only in its rounding to bf16, so on the
//! same inputs RTZ is never larger in magnitude than RTNE and at most one bf16 step away, RTNA equals
//! RTNE except at exact ties (where it is the larger magnitude), and each mode is what
//! `numerics::round` gives for the value between its two neighbours.

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{round, Rounding};
use kittens_kernels::attn::AttnArgs;
use kittens_kernels::attn::{AttnLayout, AttnShape};
use kittens_kernels::attn_fwd::{build, problem::AttnProblem, AttnConfig};
use kittens_kernels::exec::interpret;
use kittens_kernels::problem::{random, KernelProblem};
use rand::{rngs::SmallRng, SeedableRng};

/// One bf16 step at `x`'s magnitude.
fn ulp(x: f32) -> f32 {
    let b = x.abs().to_bits() & 0xffff_0000;
    f32::from_bits(b + 0x1_0000) - f32::from_bits(b)
}

fn outputs(cfg: AttnConfig, p: &AttnProblem, inputs: &[Vec<f32>]) -> Vec<f32> {
    let k = build(&cfg).unwrap();
    let launch = p.launch().unwrap();
    interpret(&k, &launch.params, inputs.to_vec(), &launch.outputs)
        .unwrap()
        .0
}

#[test]
fn rtz_and_rtna_round_the_same_values_as_rtne() {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    for (cfg, causal) in [
        (AttnProblem::default().attn_cfg, true),
        (
            AttnConfig {
                kv_block: 64,
                ..AttnConfig::for_gpu(h100)
            },
            false,
        ),
    ] {
        let p = AttnProblem {
            args: AttnArgs {
                attn: AttnShape {
                    batch: 1,
                    heads: 2,
                    heads_kv: 1,
                    seq: 93,
                    dim: 64,
                    layout: AttnLayout::Bshd,
                },
                causal,
                ..Default::default()
            },
            ..AttnProblem::default()
        };
        let launch = p.launch().unwrap();
        let mut rng = SmallRng::seed_from_u64(5);
        let inputs: Vec<Vec<f32>> = launch
            .inputs
            .iter()
            .map(|&n| random(&mut rng, n, DType::Bf16))
            .collect();
        let mode = |rounding| {
            let c = AttnConfig {
                dim: 64,
                causal,
                rounding,
                ..cfg
            };
            outputs(c, &p, &inputs)
        };
        let (ne, na, z) = (
            mode(Rounding::Rtne),
            mode(Rounding::Rtna),
            mode(Rounding::Rtz),
        );
        let (mut z_differs, mut a_differs) = (0, 0);
        for i in 0..ne.len() {
            let (e, a, t) = (ne[i], na[i], z[i]);
            assert!(
                e.is_finite() && a.is_finite() && t.is_finite(),
                "element {i}"
            );
            // RTZ: toward zero, at most one step below RTNE's magnitude, same sign.
            assert!(
                t.abs() <= e.abs() && e.abs() - t.abs() <= ulp(t),
                "{i}: {t} vs {e}"
            );
            assert!(t == 0.0 || e == 0.0 || t.signum() == e.signum(), "{i}");
            if t != e {
                z_differs += 1;
                // The value lay above RTZ's result by at least half a step: RTNE rounded up, and
                // the value's truncation is RTZ's, so rounding RTZ's neighbour toward zero gives it.
                assert_eq!(
                    round(e - e.signum() * ulp(t) / 4.0, DType::Bf16, Rounding::Rtz),
                    t
                );
            }
            if a != e {
                a_differs += 1;
                // Only at an exact tie, where RTNA takes the larger magnitude.
                assert!(
                    a.abs() > e.abs() && a.abs() - e.abs() <= ulp(e),
                    "{i}: {a} vs {e}"
                );
            }
        }
        let n = ne.len();
        // Truncation differs from rounding to nearest about half the time; ties are rare.
        assert!(
            z_differs > n / 4 && z_differs < 3 * n / 4,
            "{z_differs} of {n}"
        );
        assert!(a_differs < n / 50, "{a_differs} of {n}");
    }
}
