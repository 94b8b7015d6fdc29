//! The Hopper `gemm_bf16`: C = A·Bᵀ (A M×K, B N×K, both row-major bf16; C M×N bf16; fp32
//! accumulation) with the Hopper schedule of seed 000 §3.3.1 — one TMA producer warpgroup, consumer
//! warpgroups on async wgmma, mbarrier-linked shared-memory stages, setmaxnreg, and a persistent grid in
//! grouped (L2-friendly) tile order.
//!
//! The kernel body is prelude-level CUDA (`gemm_sm90.cu`); this module checks a configuration against the
//! hardware's limits and assembles the source: prelude, the wgmma wrapper for the tile's N, the
//! configuration constants, and the body.

use super::{prelude_with, valid_wgmma_n, WgmmaInput};

/// A configuration of the Hopper GEMM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HopperGemm {
    /// Block tile rows; split evenly among the consumer warpgroups (64 rows each: wgmma's M).
    pub bm: u32,
    /// Block tile columns = the wgmma N (≤ 256).
    pub bn: u32,
    /// K per stage: 64 bf16 = one 128-byte swizzled row.
    pub bk: u32,
    pub stages: u32,
    pub consumers: u32,
    /// Tile-rows per group of the grouped tile order.
    pub group_m: u32,
    /// setmaxnreg targets (multiples of 8 in 24..=256).
    pub producer_regs: u32,
    pub consumer_regs: u32,
}

/// Why a configuration or a problem size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopperGemmError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("unsupported problem {m}x{n}x{k}: {why}")]
    Shape { m: usize, n: usize, k: usize, why: String },
}

/// Hopper's register file per SM (CUDA Programming Guide, compute capability 9.0 table).
const REGISTERS_PER_SM: u32 = 65_536;
/// The most shared memory one block may use on sm_90 (227 KB, same table).
pub const MAX_SHARED_PER_BLOCK: u32 = 232_448;

impl Default for HopperGemm {
    /// 128×256 block tile, two consumers of m64n256k16, K step 64, 4 stages: 4 × 48 KB of shared memory.
    fn default() -> Self {
        HopperGemm {
            bm: 128,
            bn: 256,
            bk: 64,
            stages: 4,
            consumers: 2,
            group_m: 16,
            producer_regs: 40,
            consumer_regs: 232,
        }
    }
}

impl HopperGemm {
    pub fn kernel_name(&self) -> String {
        format!("gemm_bf16_sm90_{}x{}x{}_s{}", self.bm, self.bn, self.bk, self.stages)
    }
    pub fn threads(&self) -> u32 {
        128 * (1 + self.consumers)
    }
    pub fn a_bytes(&self) -> u32 {
        self.bm * self.bk * 2
    }
    pub fn stage_bytes(&self) -> u32 {
        (self.bm + self.bn) * self.bk * 2
    }
    /// Dynamic shared memory: the stages, 1 KB of slack to align them to 1024 bytes, two mbarriers a stage.
    pub fn dynamic_shared_bytes(&self) -> u32 {
        self.stages * self.stage_bytes() + 1024 + 16 * self.stages
    }

    /// Checks the configuration against wgmma's shapes, the swizzle, registers and shared memory.
    pub fn validate(&self) -> Result<(), HopperGemmError> {
        let bad = |s: String| Err(HopperGemmError::Config(s));
        if self.consumers == 0 || self.bm != 64 * self.consumers {
            return bad(format!("bm {} must be 64 x consumers ({})", self.bm, self.consumers));
        }
        if !valid_wgmma_n(self.bn) {
            return bad(format!("bn {} is not a wgmma N (multiple of 8, at most 256)", self.bn));
        }
        if self.bk != 64 {
            return bad(format!("bk {} must be 64: one 128-byte swizzled row of bf16", self.bk));
        }
        if self.stages < 2 || self.group_m == 0 {
            return bad("at least 2 stages and a group of at least 1 tile-row".into());
        }
        for r in [self.producer_regs, self.consumer_regs] {
            if r % 8 != 0 || !(24..=256).contains(&r) {
                return bad(format!("setmaxnreg value {r} must be a multiple of 8 in 24..=256"));
            }
        }
        let regs = 128 * (self.producer_regs + self.consumers * self.consumer_regs);
        if regs > REGISTERS_PER_SM {
            return bad(format!(
                "{regs} registers after reallocation exceed the SM's {REGISTERS_PER_SM}"
            ));
        }
        if self.dynamic_shared_bytes() > MAX_SHARED_PER_BLOCK {
            return bad(format!(
                "{} bytes of shared memory exceed {MAX_SHARED_PER_BLOCK}",
                self.dynamic_shared_bytes()
            ));
        }
        Ok(())
    }

    /// Problem sizes this kernel handles: any M; N and K multiples of 8, because TMA needs 16-byte row
    /// pitches and the epilogue stores bf16 pairs. Partial tiles read zeros past the edges (TMA
    /// out-of-bounds fill) and store only inside C.
    pub fn check_shape(&self, m: usize, n: usize, k: usize) -> Result<(), HopperGemmError> {
        let why = if m == 0 || n == 0 || k == 0 {
            Some("every dimension must be positive")
        } else if n % 8 != 0 || k % 8 != 0 {
            Some("N and K must be multiples of 8 (16-byte TMA row pitch)")
        } else if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
            Some("dimensions must fit TMA's 32-bit coordinates")
        } else {
            None
        };
        match why {
            Some(w) => Err(HopperGemmError::Shape { m, n, k, why: w.into() }),
            None => Ok(()),
        }
    }

    /// Blocks to launch: one per SM, or fewer when there are fewer tiles.
    pub fn grid(&self, m: usize, n: usize, multiprocessors: u32) -> u32 {
        let tiles = m.div_ceil(self.bm as usize) * n.div_ceil(self.bn as usize);
        (tiles.min(multiprocessors as usize) as u32).max(1)
    }

    /// The whole CUDA source: prelude, wgmma wrapper, constants and kernel.
    pub fn source(&self) -> Result<String, HopperGemmError> {
        self.validate()?;
        let mut s = prelude_with(&[(WgmmaInput::Bf16, self.bn)]);
        s.push_str(&format!(
            "\nnamespace cfg {{\n\
             constexpr u32 BM = {bm}, BN = {bn}, BK = {bk}, STAGES = {stages}, CONSUMERS = {consumers};\n\
             constexpr u32 GROUP_M = {group_m}, THREADS = {threads};\n\
             constexpr u32 A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2;\n\
             constexpr u32 WG_M = BM / CONSUMERS, WG_A_BYTES = WG_M * BK * 2;\n\
             constexpr u32 PRODUCER_REGS = {pr}, CONSUMER_REGS = {cr};\n\
             }}\n#define KERNEL_NAME {name}\n#define WGMMA kt::{wgmma}\n",
            bm = self.bm,
            bn = self.bn,
            bk = self.bk,
            stages = self.stages,
            consumers = self.consumers,
            group_m = self.group_m,
            threads = self.threads(),
            pr = self.producer_regs,
            cr = self.consumer_regs,
            name = self.kernel_name(),
            wgmma = WgmmaInput::Bf16.wrapper_name(self.bn),
        ));
        s.push_str(include_str!("gemm_sm90.cu"));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fits_hopper() {
        let g = HopperGemm::default();
        g.validate().expect("default is valid");
        // 4 stages of (128 + 256) x 64 bf16 = 4 x 48 KB, plus alignment slack and barriers.
        assert_eq!(g.stage_bytes(), 49_152);
        assert_eq!(g.dynamic_shared_bytes(), 4 * 49_152 + 1024 + 64);
        assert_eq!(128 * (g.producer_regs + 2 * g.consumer_regs), 64_512);
        assert_eq!(g.grid(8192, 8192, 132), 132);
        assert_eq!(g.grid(128, 256, 132), 1);
    }

    #[test]
    fn refuses_what_cannot_run() {
        let five = HopperGemm {
            stages: 5,
            ..HopperGemm::default()
        };
        assert!(five.validate().is_err(), "5 x 48 KB exceeds 227 KB");
        let regs = HopperGemm {
            consumer_regs: 256,
            producer_regs: 24,
            ..HopperGemm::default()
        };
        assert!(regs.validate().is_err(), "128 x (24 + 512) registers exceed 65536");
        let g = HopperGemm::default();
        assert!(g.check_shape(100, 4096, 4096).is_ok());
        assert!(g.check_shape(4096, 4100, 4096).is_err());
        assert!(g.check_shape(4096, 4096, 0).is_err());
    }
}
