//! Storage rounding checked exhaustively (every 16- and 8-bit pattern) and against an independent
//! reference that enumerates a format's representable values in f64 and picks by the rounding rule.

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{from_bits, from_bytes, round, to_bits, to_bytes, Rounding};
use rand::{rngs::SmallRng, Rng, SeedableRng};

const NARROW: [DType; 4] = [DType::Bf16, DType::F16, DType::Fp8E4m3, DType::Fp8E5m2];

/// The reference: all non-negative finite values of a format in increasing order, written from the
/// format's definition (OCP 8-bit FP spec 2023 Table 1; IEEE-754 binary16; bfloat16), plus the
/// first value past the largest finite one (what an unbounded exponent range would hold next).
struct Reference {
    values: Vec<f64>,
    beyond: f64,
    has_inf: bool,
}

impl Reference {
    fn new(dtype: DType) -> Reference {
        // (exponent bits, mantissa bits, bias, has infinities)
        let (eb, mb, bias, has_inf) = match dtype {
            DType::Bf16 => (8, 7, 127, true),
            DType::F16 => (5, 10, 15, true),
            DType::Fp8E4m3 => (4, 3, 7, false),
            DType::Fp8E5m2 => (5, 2, 15, true),
            // FNUZ is checked against ml_dtypes in tests/fp8_vectors.rs.
            DType::F32 | DType::Fp8E4m3Fnuz | DType::I32 => unreachable!(),
        };
        let mut values = vec![];
        let top_exp = if has_inf {
            (1 << eb) - 2
        } else {
            (1 << eb) - 1
        };
        for e in 0..=top_exp {
            for m in 0..(1u32 << mb) {
                if !has_inf && e == top_exp && m == (1 << mb) - 1 {
                    continue; // E4M3FN's NaN
                }
                let v = if e == 0 {
                    m as f64 * 2f64.powi(1 - bias - mb)
                } else {
                    (1.0 + m as f64 / (1u64 << mb) as f64) * 2f64.powi(e - bias)
                };
                values.push(v);
            }
        }
        let n = values.len();
        let beyond = values[n - 1] + (values[n - 1] - values[n - 2]);
        Reference {
            values,
            beyond,
            has_inf,
        }
    }

    /// Rounds a finite x by the rule; the index of a value in `values` equals its bit pattern, so the
    /// "even" neighbour is the one with an even index.
    fn round(&self, x: f32, mode: Rounding) -> f32 {
        let a = (x as f64).abs();
        let max = *self.values.last().unwrap();
        let sign = if x.is_sign_negative() { -1.0 } else { 1.0 };
        let overflow = |s: f64| match (mode, self.has_inf) {
            (Rounding::Rtz, _) => s * max,
            (_, true) => s * f64::INFINITY,
            (_, false) => f64::NAN,
        };
        if a >= self.beyond {
            return overflow(sign) as f32;
        }
        let i = self.values.partition_point(|&v| v <= a) - 1; // values[0] = 0 <= a
        let lo = self.values[i];
        if lo == a {
            return (sign * lo) as f32;
        }
        let (hi, hi_is_beyond) = match self.values.get(i + 1) {
            Some(&h) => (h, false),
            None => (self.beyond, true),
        };
        // Exact comparison: 2a and lo + hi are both exact in f64.
        let up = match mode {
            Rounding::Rtz => false,
            Rounding::Rtna => 2.0 * a >= lo + hi,
            Rounding::Rtne => 2.0 * a > lo + hi || (2.0 * a == lo + hi && i % 2 == 1),
        };
        if up && hi_is_beyond {
            return overflow(sign) as f32;
        }
        (sign * if up { hi } else { lo }) as f32
    }
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn every_pattern_decodes_to_the_reference_and_reencodes_exactly() {
    for dtype in NARROW {
        let r = Reference::new(dtype);
        let sign = 1u32 << (dtype.bits() - 1);
        let mut nans = 0;
        for bits in 0..(1u32 << dtype.bits()) {
            let v = from_bits(bits, dtype);
            let mag = bits & !sign;
            match r.values.get(mag as usize) {
                Some(&want) => {
                    let want = if bits & sign != 0 { -want } else { want };
                    assert_eq!(v.to_bits(), (want as f32).to_bits(), "{dtype} {bits:#x}");
                }
                None => {
                    let is_inf = r.has_inf && mag as usize == r.values.len();
                    assert!(
                        if is_inf { v.is_infinite() } else { v.is_nan() },
                        "{dtype} {bits:#x} -> {v}"
                    );
                    nans += v.is_nan() as u32;
                }
            }
            for mode in Rounding::ALL {
                let back = to_bits(v, dtype, mode);
                if v.is_nan() {
                    assert!(from_bits(back, dtype).is_nan());
                    assert_eq!(back & sign, bits & sign, "{dtype} NaN keeps its sign");
                } else {
                    assert_eq!(back, bits, "{dtype} {bits:#x} {mode:?}");
                }
            }
        }
        // OCP: E4M3FN has 2 NaN patterns, E5M2 6; f16 2·1023, bf16 2·127.
        let want_nans = match dtype {
            DType::Fp8E4m3 => 2,
            DType::Fp8E5m2 => 6,
            DType::F16 => 2046,
            _ => 254,
        };
        assert_eq!(nans, want_nans, "{dtype}");
    }
}

/// Random f32 inputs of three kinds: any bit pattern; uniform between two neighbours of the format;
/// exact midpoints between neighbours and their f32 neighbours.
fn inputs(dtype: DType, r: &Reference, rng: &mut SmallRng, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(3 * n);
    for _ in 0..n {
        let x = f32::from_bits(rng.gen());
        if x.is_finite() {
            out.push(x);
        }
        let i = rng.gen_range(0..r.values.len());
        let lo = r.values[i];
        let hi = r.values.get(i + 1).copied().unwrap_or(r.beyond);
        let s = if rng.gen() { 1.0f32 } else { -1.0 };
        out.push(s * (lo + (hi - lo) * rng.gen::<f64>()) as f32);
        let mid = ((lo + hi) / 2.0) as f32;
        assert_eq!(
            mid as f64,
            (lo + hi) / 2.0,
            "{dtype}: midpoint exact in f32"
        );
        out.extend([
            s * mid,
            s * f32::from_bits(mid.to_bits() + 1),
            s * f32::from_bits(mid.to_bits() - 1),
        ]);
    }
    out.retain(|x| x.is_finite());
    out
}

#[test]
fn random_inputs_match_the_enumerating_reference() {
    let mut rng = SmallRng::seed_from_u64(0x4b17);
    for dtype in NARROW {
        let r = Reference::new(dtype);
        for x in inputs(dtype, &r, &mut rng, 100_000) {
            for mode in Rounding::ALL {
                let (got, want) = (round(x, dtype, mode), r.round(x, mode));
                assert!(
                    same(got, want),
                    "{dtype} {mode:?} x={x:e} ({:#x}): got {got:e} want {want:e}",
                    x.to_bits()
                );
                assert!(same(from_bits(to_bits(x, dtype, mode), dtype), got));
            }
        }
    }
}

#[test]
fn rtna_and_rtne_differ_exactly_on_ties_with_an_even_lower_neighbour() {
    let mut rng = SmallRng::seed_from_u64(7);
    for dtype in NARROW {
        let r = Reference::new(dtype);
        let mut differing_ties = 0;
        for x in inputs(dtype, &r, &mut rng, 20_000) {
            let (ne, na) = (
                round(x, dtype, Rounding::Rtne),
                round(x, dtype, Rounding::Rtna),
            );
            let a = (x as f64).abs();
            let i = r.values.partition_point(|&v| v <= a).saturating_sub(1);
            let hi = r.values.get(i + 1).copied().unwrap_or(r.beyond);
            let tie = a < r.beyond && 2.0 * a == r.values[i] + hi;
            if !tie {
                assert!(
                    same(ne, na),
                    "{dtype} x={x:e}: not a tie yet {ne:e} != {na:e}"
                );
            } else {
                assert_eq!(
                    same(ne, na),
                    i % 2 == 1,
                    "{dtype} tie x={x:e}: {ne:e} vs {na:e}"
                );
                differing_ties += !same(ne, na) as u32;
                // RTNA goes away from zero on a tie.
                assert!(na.is_nan() || na.abs() as f64 > a);
            }
        }
        assert!(
            differing_ties > 1000,
            "{dtype}: the inputs exercise ties ({differing_ties})"
        );
    }
}

#[test]
fn rtz_never_increases_magnitude_and_is_the_largest_value_below() {
    let mut rng = SmallRng::seed_from_u64(11);
    for dtype in NARROW {
        let r = Reference::new(dtype);
        for x in inputs(dtype, &r, &mut rng, 20_000) {
            let z = round(x, dtype, Rounding::Rtz);
            assert!(z.abs() <= x.abs(), "{dtype} {x:e} -> {z:e}");
            assert!(z == 0.0 || z.is_sign_negative() == x.is_sign_negative());
            let j = r.values.partition_point(|&v| v <= z.abs() as f64);
            let next = r.values.get(j).copied().unwrap_or(f64::INFINITY);
            assert!(
                (x.abs() as f64) < next,
                "{dtype} {x:e}: {next:e} also fits below"
            );
        }
    }
}

#[test]
fn overflow_infinities_and_nan_follow_the_documented_rules() {
    let e4 = DType::Fp8E4m3;
    // 464 is the midpoint between 448 (mantissa 110, even) and the missing step 480.
    assert_eq!(round(464.0, e4, Rounding::Rtne), 448.0);
    assert!(round(464.0, e4, Rounding::Rtna).is_nan());
    assert_eq!(round(-1e30, e4, Rounding::Rtz), -448.0);
    for mode in Rounding::ALL {
        assert!(
            round(f32::INFINITY, e4, mode).is_nan(),
            "e4m3 has no infinity"
        );
        assert_eq!(
            round(f32::NEG_INFINITY, DType::Fp8E5m2, mode),
            f32::NEG_INFINITY
        );
        assert_eq!(to_bits(-f32::NAN, DType::Bf16, mode), 0xffc0);
        assert_eq!(round(-0.0, DType::F16, mode).to_bits(), (-0.0f32).to_bits());
    }
    for dtype in [DType::Bf16, DType::F16, DType::Fp8E5m2] {
        let max = dtype.max_finite() as f32;
        assert_eq!(
            round(f32::MAX, dtype, Rounding::Rtne),
            f32::INFINITY,
            "{dtype}"
        );
        assert_eq!(round(f32::MAX, dtype, Rounding::Rtz), max, "{dtype}");
        assert_eq!(round(-max, dtype, Rounding::Rtna), -max, "{dtype}");
    }
}

#[test]
fn byte_buffers_round_trip_little_endian() {
    let mut rng = SmallRng::seed_from_u64(3);
    for dtype in DType::ALL {
        let xs: Vec<f32> = (0..257).map(|_| rng.gen_range(-300.0f32..300.0)).collect();
        let bytes = to_bytes(&xs, dtype, Rounding::Rtne);
        assert_eq!(bytes.len(), xs.len() * dtype.bytes() as usize);
        let back = from_bytes(&bytes, dtype).expect("whole elements");
        for (x, y) in xs.iter().zip(&back) {
            assert_eq!(y.to_bits(), round(*x, dtype, Rounding::Rtne).to_bits());
        }
        if dtype.bytes() > 1 {
            assert!(from_bytes(&bytes[1..], dtype).is_err());
        }
    }
    // Byte order: bf16 1.0 is 0x3f80, stored low byte first.
    assert_eq!(
        to_bytes(&[1.0], DType::Bf16, Rounding::Rtz),
        vec![0x80, 0x3f]
    );
}
