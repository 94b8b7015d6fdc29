//! Storage rounding of f32 values to bf16, f16, fp8 e4m3 and fp8 e5m2, and the bit-level codecs the
//! interpreter and the GPU runtime use to build and read buffers.
//!
//! Why three modes: the attention kernel of MI300X-attn packs its fp32 accumulators to bf16 with a selectable
//! rule (MI300X-attn §6: "RTNE rounds to nearest even, RTNA rounds to nearest with ties away from zero, AITER's
//! default, and RTZ truncates toward zero"), and the CPU interpreter must reproduce whichever rule a kernel
//! asks for bit-exactly.
//!
//! Every conversion is exact in the IEEE-754 sense: the f32 input is rounded once, directly to the target
//! format (never through an intermediate format), subnormals of the target are produced and decoded, and
//! ties are decided on the exact f32 value.
//!
//! # Overflow, infinities and NaN (the decisions)
//!
//! * **RTNE, RTNA** — a finite input whose rounded magnitude exceeds the largest finite value overflows the
//!   way IEEE-754 round-to-nearest does: to ±inf for bf16, f16 and e5m2. fp8 e4m3 is the OCP "FN" variant,
//!   which has no infinity (OCP 8-bit Floating Point Specification, 2023: the all-ones exponent encodes normals except
//!   S.1111.111, the NaN), so there overflow produces NaN — the OCP "non-saturating" conversion. Note the
//!   consequence of rounding first: 464 (the midpoint of 448 and the next, unrepresentable step 480) rounds
//!   to 448 under RTNE (448 = 1.110b·2^8 has an even mantissa) but to NaN under RTNA.
//! * **RTZ** — round toward zero never increases magnitude, so a finite input saturates to ±max finite in
//!   every format (IEEE-754 §7.4: directed rounding toward zero overflows to the largest finite number).
//! * **Infinite inputs** keep their sign as ±inf where the format has infinities (an infinity is exact, no
//!   rounding happens, in every mode). e4m3 has none, so ±inf becomes NaN in every mode.
//! * **NaN inputs** become the format's canonical quiet NaN with the input's sign (bf16 `0x7fc0`, f16
//!   `0x7e00`, e4m3 `0x7f`, e5m2 `0x7e`, plus the sign bit). Payloads are not preserved.
//!
//! * **E4M3FNUZ** (gfx942's fp8, `DType::Fp8E4m3Fnuz`): bias 8, every exponent encodes numbers, no
//!   infinities and no negative zero; the one NaN is 0x80, the pattern that would be −0. A value that
//!   rounds to zero is +0 whatever its sign; NaN, ±inf and overflow under RTNE/RTNA become 0x80.
//!
//! All fp8 behaviour above is checked against `ml_dtypes` (an independent implementation) on every
//! pattern and on boundary and random inputs: `tests/data/fp8_vectors.txt`.

use kittens_hw::dtype::DType;
use thiserror::Error;

/// How an f32 value is rounded to a narrower storage format (MI300X-attn §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rounding {
    /// Round to nearest, ties to even (IEEE-754 default).
    Rtne,
    /// Round to nearest, ties away from zero.
    Rtna,
    /// Round toward zero (truncation).
    Rtz,
}

impl Rounding {
    pub const ALL: [Rounding; 3] = [Rounding::Rtne, Rounding::Rtna, Rounding::Rtz];

    pub fn name(self) -> &'static str {
        match self {
            Rounding::Rtne => "rtne",
            Rounding::Rtna => "rtna",
            Rounding::Rtz => "rtz",
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum NumericsError {
    #[error("unknown rounding mode `{0}`; known: rtne, rtna, rtz")]
    UnknownRounding(String),
    #[error("a {dtype} buffer needs a multiple of {elem} bytes, got {len}")]
    RaggedBuffer {
        dtype: DType,
        elem: usize,
        len: usize,
    },
}

impl std::str::FromStr for Rounding {
    type Err = NumericsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "rtne" | "rne" | "nearest-even" => Ok(Rounding::Rtne),
            "rtna" | "rna" | "nearest-away" => Ok(Rounding::Rtna),
            "rtz" | "rz" | "truncate" => Ok(Rounding::Rtz),
            _ => Err(NumericsError::UnknownRounding(s.to_string())),
        }
    }
}

/// The layout of a narrow binary floating-point format.
#[derive(Debug, Clone, Copy)]
struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    /// What the special patterns are.
    special: Special,
    /// Canonical quiet NaN without the sign bit (FNUZ: the whole NaN pattern).
    qnan: u32,
}

/// Where a narrow format keeps its infinities and NaNs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    /// IEEE-style: the all-ones exponent encodes ±inf (mantissa 0) and NaNs.
    Ieee,
    /// OCP "FN": no infinities; S.1111.111 are the NaNs, every other pattern a number.
    Fn,
    /// "FNUZ": no infinities, no negative zero; the sign-only pattern is the one NaN.
    Fnuz,
}

impl Format {
    /// `None` for f32, which is stored as is.
    fn of(dtype: DType) -> Option<Format> {
        let f = |exp_bits, man_bits, bias, special, qnan| Format {
            exp_bits,
            man_bits,
            bias,
            special,
            qnan,
        };
        use Special::{Fn, Fnuz, Ieee};
        match dtype {
            DType::F32 | DType::I32 => None,
            DType::Bf16 => Some(f(8, 7, 127, Ieee, 0x7fc0)),
            DType::F16 => Some(f(5, 10, 15, Ieee, 0x7e00)),
            // OCP 8-bit Floating Point Specification (2023): E4M3 bias 7, NaN S.1111.111; E5M2 bias 15, IEEE-like.
            DType::Fp8E4m3 => Some(f(4, 3, 7, Fn, 0x7f)),
            DType::Fp8E5m2 => Some(f(5, 2, 15, Ieee, 0x7e)),
            // CDNA3 ISA guide ("FP8" format): bias 8, NaN 0x80, no infinities, no −0.
            DType::Fp8E4m3Fnuz => Some(f(4, 3, 8, Fnuz, 0x80)),
        }
    }

    fn sign_bit(self) -> u32 {
        1 << (self.exp_bits + self.man_bits)
    }

    fn exp_all_ones(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    /// Smallest normal exponent (unbiased).
    fn emin(self) -> i32 {
        1 - self.bias
    }

    /// Bits of the largest finite magnitude.
    fn max_finite_bits(self) -> u32 {
        let man_ones = (1 << self.man_bits) - 1;
        match self.special {
            Special::Ieee => ((self.exp_all_ones() - 1) << self.man_bits) | man_ones,
            // E4M3FN: all-ones exponent is used for normals, except the all-ones mantissa (NaN).
            Special::Fn => (self.exp_all_ones() << self.man_bits) | (man_ones - 1),
            Special::Fnuz => (self.exp_all_ones() << self.man_bits) | man_ones,
        }
    }

    fn has_inf(self) -> bool {
        self.special == Special::Ieee
    }

    /// The sign bit an encoded result carries: FNUZ has no signed NaN and no −0, so only its numbers
    /// other than zero keep the sign.
    fn signed(self, sign: u32, magnitude: u32) -> u32 {
        match self.special {
            Special::Fnuz if magnitude == 0 || magnitude == self.qnan => magnitude,
            _ => sign | magnitude,
        }
    }

    fn inf_bits(self) -> u32 {
        self.exp_all_ones() << self.man_bits
    }

    fn decode(self, bits: u32) -> f32 {
        if self.special == Special::Fnuz && bits == self.qnan {
            return f32::NAN;
        }
        let sign = if bits & self.sign_bit() != 0 {
            -1.0f64
        } else {
            1.0
        };
        let exp = (bits >> self.man_bits) & self.exp_all_ones();
        let man = bits & ((1 << self.man_bits) - 1);
        if exp == self.exp_all_ones() && self.special != Special::Fnuz {
            if self.has_inf() {
                return if man == 0 {
                    (sign * f64::INFINITY) as f32
                } else {
                    f32::NAN.copysign(sign as f32)
                };
            }
            if man == (1 << self.man_bits) - 1 {
                return f32::NAN.copysign(sign as f32);
            }
        }
        let (significand, e) = if exp == 0 {
            (man as f64, self.emin())
        } else {
            ((man | (1 << self.man_bits)) as f64, exp as i32 - self.bias)
        };
        // Exact in f64 (≤ 11 significant bits) and exactly representable in f32: every target value is.
        (sign * significand * pow2(e - self.man_bits as i32)) as f32
    }

    fn encode(self, x: f32, mode: Rounding) -> u32 {
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        if x.is_nan() {
            return self.signed(sign, self.qnan);
        }
        if x.is_infinite() {
            let bits = if self.has_inf() {
                self.inf_bits()
            } else {
                self.qnan
            };
            return self.signed(sign, bits);
        }
        let Some((n, qe)) = self.round_magnitude(x.abs(), mode) else {
            return self.signed(sign, 0); // signed zero where the format has one
        };
        match self.pack(n, qe) {
            Some(bits) => self.signed(sign, bits),
            None => self.signed(sign, self.overflow(mode)),
        }
    }

    /// What a finite input that rounds past the largest finite value becomes (see the module docs).
    fn overflow(self, mode: Rounding) -> u32 {
        match (mode, self.has_inf()) {
            (Rounding::Rtz, _) => self.max_finite_bits(),
            (_, true) => self.inf_bits(),
            (_, false) => self.qnan,
        }
    }

    /// Rounds a finite positive magnitude to `n · 2^qe` with `n` an integer of at most `man_bits + 1`
    /// significant bits (or exactly `2^(man_bits+1)` after a carry), in an unbounded exponent range above
    /// `emin`. `None` when the result is zero.
    fn round_magnitude(self, a: f32, mode: Rounding) -> Option<(u64, i32)> {
        if a == 0.0 {
            return None;
        }
        // a = m · 2^e exactly, m < 2^24.
        let bits = a.to_bits();
        let (mut m, mut e) = match bits >> 23 {
            0 => ((bits & 0x7f_ffff) as u64, -149),
            be => (((bits & 0x7f_ffff) | 0x80_0000) as u64, be as i32 - 150),
        };
        // Normalise so that m has exactly 24 significant bits; floor(log2 a) = e + 23.
        let lz = m.leading_zeros() - 40;
        m <<= lz;
        e -= lz as i32;
        let qe = (e + 23).max(self.emin()) - self.man_bits as i32;
        let shift = qe - e;
        if shift <= 0 {
            return Some((m << (-shift) as u32, qe));
        }
        let (n, rem, half) = if shift >= 64 {
            (0, m, u64::MAX) // m < 2^24 is far below half a quantum
        } else {
            (m >> shift, m & ((1u64 << shift) - 1), 1u64 << (shift - 1))
        };
        let up = match mode {
            Rounding::Rtz => false,
            Rounding::Rtna => rem >= half,
            Rounding::Rtne => rem > half || (rem == half && n & 1 == 1),
        };
        let n = n + up as u64;
        (n != 0).then_some((n, qe))
    }

    /// Packs `n · 2^qe` (from `round_magnitude`) into exponent and mantissa fields; `None` on overflow.
    fn pack(self, mut n: u64, mut qe: i32) -> Option<u32> {
        if n == 1 << (self.man_bits + 1) {
            n >>= 1;
            qe += 1;
        }
        let biased = if n >= 1 << self.man_bits {
            qe + self.man_bits as i32 + self.bias
        } else {
            0
        };
        let man = (n & ((1 << self.man_bits) - 1)) as u32;
        if biased > self.max_finite_bits() as i32 >> self.man_bits {
            return None;
        }
        let bits = ((biased as u32) << self.man_bits) | man;
        (bits <= self.max_finite_bits()).then_some(bits)
    }
}

/// `2^k` for the exponents narrow formats reach (|k| < 1023), built from its bits (exact, and cheaper
/// than `powi` on the interpreter's hot path).
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Rounds `x` to the nearest value of `dtype` under `mode` and returns that value as f32 (every value of
/// the narrow formats is exactly representable in f32). `F32` is returned unchanged.
pub fn round(x: f32, dtype: DType, mode: Rounding) -> f32 {
    if dtype == DType::I32 {
        // Index tensors hold integers; the interpreter keeps them as f32, exact below 2^24.
        return x.round();
    }
    match Format::of(dtype) {
        None => x,
        Some(f) => f.decode(f.encode(x, mode)),
    }
}

/// The storage bits of `x` rounded to `dtype` under `mode`, in the low `dtype.bits()` bits.
pub fn to_bits(x: f32, dtype: DType, mode: Rounding) -> u32 {
    if dtype == DType::I32 {
        return (x.round() as i32) as u32;
    }
    match Format::of(dtype) {
        None => x.to_bits(),
        Some(f) => f.encode(x, mode),
    }
}

/// The value of the storage pattern `bits` of `dtype`; bits above `dtype.bits()` are ignored.
pub fn from_bits(bits: u32, dtype: DType) -> f32 {
    if dtype == DType::I32 {
        return bits as i32 as f32;
    }
    match Format::of(dtype) {
        None => f32::from_bits(bits),
        Some(f) => f.decode(bits & ((1 << dtype.bits()) - 1)),
    }
}

/// Encodes `values` as a little-endian buffer of `dtype` elements (the byte order of both GPU targets).
pub fn to_bytes(values: &[f32], dtype: DType, mode: Rounding) -> Vec<u8> {
    let width = dtype.bytes() as usize;
    let mut out = Vec::with_capacity(values.len() * width);
    for &v in values {
        out.extend_from_slice(&to_bits(v, dtype, mode).to_le_bytes()[..width]);
    }
    out
}

/// Decodes a little-endian buffer of `dtype` elements.
pub fn from_bytes(bytes: &[u8], dtype: DType) -> Result<Vec<f32>, NumericsError> {
    let width = dtype.bytes() as usize;
    if !bytes.len().is_multiple_of(width) {
        return Err(NumericsError::RaggedBuffer {
            dtype,
            elem: width,
            len: bytes.len(),
        });
    }
    Ok(bytes
        .chunks_exact(width)
        .map(|c| {
            let mut word = [0u8; 4];
            word[..width].copy_from_slice(c);
            from_bits(u32::from_le_bytes(word), dtype)
        })
        .collect())
}
