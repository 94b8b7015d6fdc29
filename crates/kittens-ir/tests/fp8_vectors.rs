//! The fp8 codecs against `ml_dtypes`, an implementation independent of this repository: every one of
//! the 256 patterns of e4m3fn (OCP, gfx950 and sm_90a), e4m3fnuz (gfx942) and e5m2 decoded, and f32 →
//! fp8 round-to-nearest-even on the formats' boundary values (every finite value, every midpoint and one
//! f32 ulp either side of it, overflow, underflow, zeros, infinities, NaNs) and on random values.
//! The vectors and how they were made: `tests/data/fp8_vectors.txt`, `tests/data/PROVENANCE.md`.

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{from_bits, to_bits, Rounding};

const VECTORS: &str = include_str!("data/fp8_vectors.txt");

fn dtype(name: &str) -> DType {
    match name {
        "e4m3fn" => DType::Fp8E4m3,
        "e4m3fnuz" => DType::Fp8E4m3Fnuz,
        "e5m2" => DType::Fp8E5m2,
        other => panic!("unknown format `{other}` in the vectors"),
    }
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s, 16).unwrap_or_else(|e| panic!("`{s}`: {e}"))
}

/// `(kind, dtype, input, expected)` for every vector line.
fn vectors() -> Vec<(&'static str, DType, u32, u32)> {
    VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "malformed vector line `{l}`");
            (f[0], dtype(f[1]), hex(f[2]), hex(f[3]))
        })
        .collect()
}

#[test]
fn every_pattern_decodes_as_ml_dtypes_does() {
    let mut seen = [0usize; 3];
    for (kind, dt, bits, want) in vectors() {
        if kind != "decode" {
            continue;
        }
        let got = from_bits(bits, dt);
        let want = f32::from_bits(want);
        if want.is_nan() {
            assert!(got.is_nan(), "{dt} {bits:#04x}: want NaN, got {got}");
        } else {
            // Bit equality: distinguishes −0 from +0.
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{dt} {bits:#04x}: want {want}, got {got}"
            );
        }
        seen[[DType::Fp8E4m3, DType::Fp8E4m3Fnuz, DType::Fp8E5m2]
            .iter()
            .position(|&d| d == dt)
            .unwrap()] += 1;
    }
    assert_eq!(seen, [256; 3], "every pattern of every format, once");
}

#[test]
fn rounding_from_f32_matches_ml_dtypes() {
    let mut n = 0;
    for (kind, dt, input, want) in vectors() {
        if kind != "encode" {
            continue;
        }
        let x = f32::from_bits(input);
        let got = to_bits(x, dt, Rounding::Rtne);
        // NaN patterns: ml_dtypes keeps an f32 NaN's sign on the OCP formats and so do we; every NaN of
        // a format is accepted as long as both are NaN with the same sign (payloads are not a contract).
        let (g, w) = (from_bits(got, dt), from_bits(want, dt));
        if w.is_nan() {
            assert!(
                g.is_nan() && got & 0x80 == want & 0x80,
                "{dt} from {x:e} ({input:#010x}): want NaN {want:#04x}, got {got:#04x}"
            );
        } else {
            assert_eq!(
                got, want,
                "{dt} from {x:e} ({input:#010x}): want {w}, got {g}"
            );
        }
        n += 1;
    }
    // Three formats, each with its boundary set and 3500 random inputs.
    assert!(n > 3 * 3500, "only {n} encode vectors");
}

/// The facts that make FNUZ a different format, spelled out (and covered by the vectors above).
#[test]
fn fnuz_is_not_ocp() {
    let fnuz = DType::Fp8E4m3Fnuz;
    assert_eq!(
        to_bits(-0.0, fnuz, Rounding::Rtne),
        0x00,
        "no negative zero"
    );
    assert!(
        from_bits(0x80, fnuz).is_nan(),
        "the sign-only pattern is the NaN"
    );
    assert_eq!(from_bits(0x7f, fnuz), 240.0, "largest finite");
    assert!(
        from_bits(0x7f, DType::Fp8E4m3).is_nan(),
        "OCP: 0x7f is a NaN"
    );
    assert_eq!(to_bits(f32::INFINITY, fnuz, Rounding::Rtne), 0x80);
    assert_eq!(
        to_bits(-1000.0, fnuz, Rounding::Rtz),
        0xff,
        "RTZ saturates to −240"
    );
    // One bias apart: the same pattern is half the OCP value.
    assert_eq!(from_bits(0x38, fnuz) * 2.0, from_bits(0x38, DType::Fp8E4m3));
}
