//! Element types the kernels store and compute in.
//!
//! Formats: bf16 and fp16 as IEEE-754 style half-width floats; fp8 e4m3 (OCP "FN" variant: no infinities,
//! max 448, used by CDNA4 `f8f6f4` MFMAs and Hopper `wgmma` e4m3) and e5m2 (max 57344), per the OCP 8-bit
//! floating point specification (2023); and fp8 e4m3 FNUZ (bias 8, no infinities, no negative zero: the one
//! NaN is the pattern 0x80), the format CDNA3's `fp8` MFMAs read (CDNA3 ISA guide, "FP8" data format; the
//! name is `ml_dtypes`' `float8_e4m3fnuz`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    Bf16,
    F16,
    /// fp8 with 4 exponent and 3 mantissa bits (OCP E4M3FN).
    Fp8E4m3,
    /// fp8 with 5 exponent and 2 mantissa bits (OCP E5M2).
    Fp8E5m2,
    /// fp8 with 4 exponent and 3 mantissa bits, bias 8, no infinities and no negative zero (E4M3FNUZ,
    /// gfx942's fp8).
    Fp8E4m3Fnuz,
    /// 32-bit signed integer: index tensors (a packed batch's `cu_seqlens`) read by
    /// `kittens_ir::Expr::Elem`, never a tile's element type. Not in [`DType::ALL`] (the float types).
    I32,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown dtype `{0}`; known: f32, bf16, f16, fp8e4m3 (or fp8), fp8e5m2, fp8e4m3fnuz, i32")]
pub struct UnknownDType(pub String);

impl DType {
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::Bf16,
        DType::F16,
        DType::Fp8E4m3,
        DType::Fp8E5m2,
        DType::Fp8E4m3Fnuz,
    ];

    /// Storage size of one element in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::Bf16 | DType::F16 => 2,
            DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz => 1,
        }
    }

    /// Storage size in bits.
    pub fn bits(self) -> u32 {
        self.bytes() * 8
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::Fp8E4m3 => "fp8e4m3",
            DType::Fp8E5m2 => "fp8e5m2",
            DType::Fp8E4m3Fnuz => "fp8e4m3fnuz",
            DType::I32 => "i32",
        }
    }

    /// Explicit mantissa bits (precision minus one).
    pub fn mantissa_bits(self) -> u32 {
        match self {
            DType::F32 => 23,
            DType::Bf16 => 7,
            DType::F16 => 10,
            DType::Fp8E4m3 | DType::Fp8E4m3Fnuz => 3,
            DType::Fp8E5m2 => 2,
            DType::I32 => 31,
        }
    }

    /// Largest finite value.
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F32 => f32::MAX as f64,
            DType::Bf16 => 3.3895313892515355e38,
            DType::F16 => 65504.0,
            DType::Fp8E4m3 => 448.0,
            DType::Fp8E5m2 => 57344.0,
            DType::Fp8E4m3Fnuz => 240.0,
            DType::I32 => i32::MAX as f64,
        }
    }

    pub fn is_fp8(self) -> bool {
        matches!(self, DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Fp8E4m3Fnuz)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float" => Ok(DType::F32),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "fp16" | "half" => Ok(DType::F16),
            "fp8" | "fp8e4m3" | "e4m3" | "f8e4m3" => Ok(DType::Fp8E4m3),
            "fp8e5m2" | "e5m2" | "f8e5m2" => Ok(DType::Fp8E5m2),
            "fp8e4m3fnuz" | "e4m3fnuz" | "f8e4m3fnuz" => Ok(DType::Fp8E4m3Fnuz),
            "i32" | "int32" => Ok(DType::I32),
            _ => Err(UnknownDType(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
        }
        assert!("int4".parse::<DType>().is_err());
    }

    #[test]
    fn max_finite_follows_from_format() {
        // e4m3fn: exponent bias 7, max = 1.75 * 2^8; e5m2: bias 15, max = 1.75 * 2^15; bf16: (2 - 2^-7) * 2^127.
        assert_eq!(DType::Fp8E4m3.max_finite(), 1.75 * 256.0);
        assert_eq!(DType::Fp8E5m2.max_finite(), 1.75 * 32768.0);
        assert_eq!(
            DType::Bf16.max_finite(),
            (2.0 - 2f64.powi(-7)) * 2f64.powi(127)
        );
    }
}
