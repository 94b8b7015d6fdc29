//! Shared-memory swizzles as XOR maps on byte offsets.
//!
//! One family covers the swizzles this project uses: `Xor { bits: B, base: M, shift: S }` flips the `B` bits
//! starting at bit `M` of a byte offset with the `B` bits starting at bit `M + S` — the form of CuTe's
//! `Swizzle<B, M, S>`. NVIDIA's TMA/wgmma 128-, 64- and 32-byte modes are `(3,4,3)`, `(2,4,3)`, `(1,4,3)`;
//! seed 000 D.1's `offset ^= ((offset % 512) >> 7) << 3` is `(2,3,4)`.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Swizzle {
    None,
    Xor { bits: u32, base: u32, shift: u32 },
}

impl Swizzle {
    /// NVIDIA's 128-byte swizzle mode (CUDA driver API `CU_TENSOR_MAP_SWIZZLE_128B`).
    pub const NV_128B: Swizzle = Swizzle::Xor { bits: 3, base: 4, shift: 3 };
    pub const NV_64B: Swizzle = Swizzle::Xor { bits: 2, base: 4, shift: 3 };
    pub const NV_32B: Swizzle = Swizzle::Xor { bits: 1, base: 4, shift: 3 };
    /// Seed 000 D.1: conflict-free 16×16 bf16 row-layout `ds_write_b64` stores.
    pub const DS_WRITE_B64_16X16: Swizzle = Swizzle::Xor { bits: 2, base: 3, shift: 4 };

    /// The physical byte offset of logical byte `offset`.
    pub fn apply(self, offset: u32) -> u32 {
        match self {
            Swizzle::None => offset,
            Swizzle::Xor { bits, base, shift } => {
                let mask = ((1u32 << bits) - 1) << base;
                offset ^ ((offset >> shift) & mask)
            }
        }
    }

    /// Bytes within which the swizzle permutes (offsets outside a period map inside the same period).
    pub fn period_bytes(self) -> u32 {
        match self {
            Swizzle::None => 1,
            Swizzle::Xor { bits, base, shift } => 1 << (base + shift + bits),
        }
    }

    pub fn name(self) -> String {
        match self {
            Swizzle::None => "none".into(),
            Swizzle::Xor { bits, base, shift } => format!("xor({bits},{base},{shift})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_d1_formula_is_the_xor_family_member() {
        for off in (0..4096).step_by(2) {
            let paper = off ^ (((off % 512) >> 7) << 3);
            assert_eq!(Swizzle::DS_WRITE_B64_16X16.apply(off), paper, "offset {off}");
        }
    }

    #[test]
    fn swizzles_are_permutations_of_their_period() {
        for s in [Swizzle::NV_128B, Swizzle::NV_64B, Swizzle::NV_32B, Swizzle::DS_WRITE_B64_16X16] {
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
}
