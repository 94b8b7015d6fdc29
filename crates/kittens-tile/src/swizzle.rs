//! Shared-memory swizzles as XOR maps on byte offsets.
//!
//! One family covers the swizzles this project uses: `Xor { bits: B, base: M, shift: S }` flips the `B` bits
//! starting at bit `M` of a byte offset with the `B` bits starting at bit `M + S` — the form of CuTe's
//! `Swizzle<B, M, S>`. NVIDIA's TMA/wgmma 128-, 64- and 32-byte modes are `(3,4,3)`, `(2,4,3)`, `(1,4,3)`;
//! HipKittens D.1's `offset ^= ((offset % 512) >> 7) << 3` is `(2,3,4)`; the Fig. 4 swizzle of the 16×32
//! bf16 tile, HipKittens' `st_16x32` (`offset ^= ((offset % 1024) >> 9) << 5`, HazyResearch/HipKittens
//! `include/types/shared/st_shape.cuh`), is `(1,5,4)`. HipKittens' 32×32 and 32×16 shapes XOR two such
//! terms, both computed from the unswizzled offset: [`Swizzle::Xor2`].
//!
//! Every member with `shift ≥ 1` is a bijection: bit `i` is flipped by a higher bit, so the map is
//! unitriangular over GF(2).

use serde::{Deserialize, Serialize};

/// One XOR term: flip the `bits` bits at `base` with the bits at `base + shift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct XorTerm {
    pub bits: u32,
    pub base: u32,
    pub shift: u32,
}

impl XorTerm {
    pub const fn new(bits: u32, base: u32, shift: u32) -> Self {
        XorTerm { bits, base, shift }
    }

    /// The bits this term flips in `offset`.
    fn flips(self, offset: u32) -> u32 {
        let mask = ((1u32 << self.bits) - 1) << self.base;
        (offset >> self.shift) & mask
    }

    /// One past the highest bit the term reads.
    fn top_bit(self) -> u32 {
        self.base + self.shift + self.bits
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Swizzle {
    None,
    Xor {
        bits: u32,
        base: u32,
        shift: u32,
    },
    /// Two XOR terms applied together, each computed from the unswizzled offset.
    Xor2 {
        first: XorTerm,
        second: XorTerm,
    },
}

impl Swizzle {
    /// NVIDIA's 128-byte swizzle mode (CUDA driver API `CU_TENSOR_MAP_SWIZZLE_128B`).
    pub const NV_128B: Swizzle = Swizzle::Xor {
        bits: 3,
        base: 4,
        shift: 3,
    };
    pub const NV_64B: Swizzle = Swizzle::Xor {
        bits: 2,
        base: 4,
        shift: 3,
    };
    pub const NV_32B: Swizzle = Swizzle::Xor {
        bits: 1,
        base: 4,
        shift: 3,
    };
    /// HipKittens D.1: conflict-free 16×16 bf16 row-layout `ds_write_b64` stores; HipKittens' `st_16x16`.
    pub const DS_WRITE_B64_16X16: Swizzle = Swizzle::Xor {
        bits: 2,
        base: 3,
        shift: 4,
    };
    /// HipKittens Fig. 4: rows 8-15 of a 16×32 bf16 tile swap their two 32-byte halves; HipKittens' `st_16x32`.
    pub const HK_16X32: Swizzle = Swizzle::Xor {
        bits: 1,
        base: 5,
        shift: 4,
    };
    /// HipKittens' `st_32x32` (16-bit): bit 5 ^= bit 9, bit 4 ^= bit 10.
    pub const HK_32X32: Swizzle = Swizzle::Xor2 {
        first: XorTerm::new(1, 5, 4),
        second: XorTerm::new(1, 4, 6),
    };
    /// HipKittens' `st_32x16` (16-bit): bits 3-4 ^= bits 7-8, then bit 4 ^= bit 9.
    pub const HK_32X16: Swizzle = Swizzle::Xor2 {
        first: XorTerm::new(2, 3, 4),
        second: XorTerm::new(1, 4, 5),
    };

    /// Named swizzles for the command line (`default` is resolved per tile by [`default_swizzle`]).
    pub const NAMED: [(&'static str, Swizzle); 8] = [
        ("none", Swizzle::None),
        ("hk16x32", Swizzle::HK_16X32),
        ("hk16x16", Swizzle::DS_WRITE_B64_16X16),
        ("hk32x32", Swizzle::HK_32X32),
        ("hk32x16", Swizzle::HK_32X16),
        ("nv128", Swizzle::NV_128B),
        ("nv64", Swizzle::NV_64B),
        ("nv32", Swizzle::NV_32B),
    ];

    /// The physical byte offset of logical byte `offset`.
    pub fn apply(self, offset: u32) -> u32 {
        match self {
            Swizzle::None => offset,
            Swizzle::Xor { bits, base, shift } => {
                offset ^ XorTerm { bits, base, shift }.flips(offset)
            }
            Swizzle::Xor2 { first, second } => offset ^ first.flips(offset) ^ second.flips(offset),
        }
    }

    /// Bytes within which the swizzle permutes (offsets outside a period map inside the same period).
    pub fn period_bytes(self) -> u32 {
        match self {
            Swizzle::None => 1,
            Swizzle::Xor { bits, base, shift } => 1 << XorTerm { bits, base, shift }.top_bit(),
            Swizzle::Xor2 { first, second } => 1 << first.top_bit().max(second.top_bit()),
        }
    }

    /// A name [`Swizzle::parse`] reads back: a [`Swizzle::NAMED`] alias where one exists, else `xor(b,m,s)`.
    pub fn name(self) -> String {
        if let Some((n, _)) = Swizzle::NAMED.iter().find(|(_, s)| *s == self) {
            return (*n).to_string();
        }
        let term = |t: XorTerm| format!("xor({},{},{})", t.bits, t.base, t.shift);
        match self {
            Swizzle::None => "none".into(),
            Swizzle::Xor { bits, base, shift } => term(XorTerm { bits, base, shift }),
            Swizzle::Xor2 { first, second } => format!("{}+{}", term(first), term(second)),
        }
    }

    /// Parse a [`Swizzle::NAMED`] name, `xor(b,m,s)` or `xor(b,m,s)+xor(b,m,s)`.
    pub fn parse(s: &str) -> Option<Swizzle> {
        let s = s.trim().to_ascii_lowercase();
        if let Some((_, sw)) = Swizzle::NAMED.iter().find(|(n, _)| *n == s) {
            return Some(*sw);
        }
        let term = |t: &str| -> Option<XorTerm> {
            let inner = t.trim().strip_prefix("xor(")?.strip_suffix(')')?;
            let v: Vec<u32> = inner
                .split(',')
                .map(|x| x.trim().parse().ok())
                .collect::<Option<_>>()?;
            match v[..] {
                // The sum in u64: in u32 `xor(1,4294967295,1)` would wrap to 1 and pass.
                [bits, base, shift]
                    if (1..=8).contains(&bits)
                        && shift >= 1
                        && u64::from(base) + u64::from(bits) + u64::from(shift) <= 31 =>
                {
                    Some(XorTerm { bits, base, shift })
                }
                _ => None,
            }
        };
        match s.split_once('+') {
            None => term(&s).map(|t| Swizzle::Xor {
                bits: t.bits,
                base: t.base,
                shift: t.shift,
            }),
            Some((a, b)) => Some(Swizzle::Xor2 {
                first: term(a)?,
                second: term(b)?,
            }),
        }
    }
}

/// The default swizzle of a shared tile, per shape (HipKittens D.1: "each shared memory tile shape is
/// equipped with a default swizzling pattern"): HipKittens' `st_16x16`, `st_16x32`, `st_32x16` and `st_32x32`
/// swizzles for 16-bit dtypes; no swizzle for other shapes and dtypes, for which HipKittens defines none.
pub fn default_swizzle(dtype: kittens_hw::dtype::DType, rows: u32, cols: u32) -> Swizzle {
    if dtype.bytes() != 2 {
        return Swizzle::None;
    }
    match (rows, cols) {
        (16, 16) => Swizzle::DS_WRITE_B64_16X16,
        (16, 32) => Swizzle::HK_16X32,
        (32, 16) => Swizzle::HK_32X16,
        (32, 32) => Swizzle::HK_32X32,
        _ => Swizzle::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_d1_formula_is_the_xor_family_member() {
        for off in (0..4096).step_by(2) {
            let paper = off ^ (((off % 512) >> 7) << 3);
            assert_eq!(
                Swizzle::DS_WRITE_B64_16X16.apply(off),
                paper,
                "offset {off}"
            );
        }
    }

    /// The HipKittens formulas (st_shape.cuh) written out, against the family members that encode them.
    #[test]
    fn hipkittens_shapes_match_their_formulas() {
        for off in (0..8192u32).step_by(2) {
            let s16x32 = off ^ (((off % 1024) >> 9) << 5);
            let s32x32 = off ^ (((off % 1024) >> 9) << 5) ^ (((off % 2048) >> 10) << 4);
            let s32x16 = off ^ (((off % 512) >> 7) << 3) ^ (((off % 1024) >> 9) << 4);
            assert_eq!(Swizzle::HK_16X32.apply(off), s16x32);
            assert_eq!(Swizzle::HK_32X32.apply(off), s32x32);
            assert_eq!(Swizzle::HK_32X16.apply(off), s32x16);
        }
    }

    #[test]
    fn swizzles_are_permutations_of_their_period() {
        for (_, s) in Swizzle::NAMED {
            let p = s.period_bytes();
            let mut seen = vec![false; p as usize];
            for off in 0..p {
                let y = s.apply(off);
                assert!(y < p);
                assert!(!seen[y as usize]);
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn names_round_trip() {
        let extra = [
            Swizzle::Xor {
                bits: 2,
                base: 5,
                shift: 3,
            },
            Swizzle::Xor2 {
                first: XorTerm::new(1, 4, 2),
                second: XorTerm::new(2, 6, 3),
            },
        ];
        for s in Swizzle::NAMED.iter().map(|(_, s)| *s).chain(extra) {
            assert_eq!(Swizzle::parse(&s.name()), Some(s), "{}", s.name());
        }
        assert_eq!(Swizzle::parse("xor(0,3,4)"), None);
        // Limits summed without wrapping: base near u32::MAX is refused, not taken as a small sum.
        assert_eq!(Swizzle::parse("xor(1,4294967295,1)"), None);
        assert_eq!(Swizzle::parse("xor(8,4294967295,4294967295)"), None);
        assert!(Swizzle::parse("xor(1,29,1)").is_some());
        assert_eq!(Swizzle::parse("xor(1,30,1)"), None);
        assert_eq!(Swizzle::parse("fancy"), None);
    }
}
