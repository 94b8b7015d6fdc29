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
    pub epilogue: Epilogue,
    /// CTAs per thread-block cluster along M (1 or 2). With 2, the two CTAs compute vertically adjacent
    /// tiles and each loads half of their shared B tile, multicast to both (halving B's L2 reads).
    pub cluster: u32,
}

/// How consumers write C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// bf16 pairs straight from the accumulator registers to global memory, predicated on C's edges.
    Direct,
    /// Registers → a 128-byte-swizzled shared slab per consumer → TMA store (clipped at C's edges by
    /// TMA), overlapping the write-out with the next tile's main loop. Needs BN a multiple of 64.
    TmaStore,
}

/// Why a configuration or a problem size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopperGemmError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("unsupported problem {m}x{n}x{k}: {why}")]
    Shape {
        m: usize,
        n: usize,
        k: usize,
        why: String,
    },
}

/// Hopper's register file per SM (CUDA Programming Guide, compute capability 9.0 table).
const REGISTERS_PER_SM: u32 = 65_536;
/// The most shared memory one block may use on sm_90 (227 KB, same table).
pub const MAX_SHARED_PER_BLOCK: u32 = 232_448;

impl Default for HopperGemm {
    /// 128×256 block tile, two consumers of m64n256k16, K step 64, 3 stages of 48 KB and the TMA-store
    /// epilogue (2 × 32 KB of C slabs): the fastest configuration measured on the H100 (bench/results/
    /// h100-2026-11-22: 1.04× cuBLAS at 8192³ where 4 stages with direct stores gave 0.97×).
    fn default() -> Self {
        HopperGemm {
            bm: 128,
            bn: 256,
            bk: 64,
            stages: 3,
            consumers: 2,
            group_m: 16,
            producer_regs: 40,
            consumer_regs: 232,
            epilogue: Epilogue::TmaStore,
            cluster: 1,
        }
    }
}

impl HopperGemm {
    pub fn kernel_name(&self) -> String {
        let epi = match self.epilogue {
            Epilogue::Direct => "",
            Epilogue::TmaStore => "_tmastore",
        };
        let cl = if self.cluster > 1 {
            format!("_c{}", self.cluster)
        } else {
            String::new()
        };
        format!(
            "gemm_bf16_sm90_{}x{}x{}_s{}{epi}{cl}",
            self.bm, self.bn, self.bk, self.stages
        )
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
    /// Bytes of one consumer's C slab (TMA-store epilogue only).
    pub fn c_slab_bytes(&self) -> u32 {
        match self.epilogue {
            Epilogue::Direct => 0,
            Epilogue::TmaStore => 64 * self.bn * 2,
        }
    }
    /// Dynamic shared memory: the stages, the C slabs, 1 KB of slack to align to 1024 bytes, and two
    /// mbarriers a stage.
    pub fn dynamic_shared_bytes(&self) -> u32 {
        self.stages * self.stage_bytes()
            + self.consumers * self.c_slab_bytes()
            + 1024
            + 16 * self.stages
    }

    /// Checks the configuration against wgmma's shapes, the swizzle, registers and shared memory.
    pub fn validate(&self) -> Result<(), HopperGemmError> {
        let bad = |s: String| Err(HopperGemmError::Config(s));
        if self.consumers == 0 || self.bm != 64 * self.consumers {
            return bad(format!(
                "bm {} must be 64 x consumers ({})",
                self.bm, self.consumers
            ));
        }
        if !valid_wgmma_n(self.bn) {
            return bad(format!(
                "bn {} is not a wgmma N (multiple of 8, at most 256)",
                self.bn
            ));
        }
        if self.bk != 64 {
            return bad(format!(
                "bk {} must be 64: one 128-byte swizzled row of bf16",
                self.bk
            ));
        }
        if self.epilogue == Epilogue::TmaStore && !self.bn.is_multiple_of(64) {
            return bad(format!(
                "the TMA-store epilogue writes 64-column boxes; bn {} is not a multiple",
                self.bn
            ));
        }
        if !(1..=2).contains(&self.cluster) || !(self.bn / self.cluster).is_multiple_of(8) {
            return bad(format!(
                "cluster {} must be 1 or 2, splitting bn {} into 8-row parts",
                self.cluster, self.bn
            ));
        }
        if self.stages < 2 || self.group_m == 0 {
            return bad("at least 2 stages and a group of at least 1 tile-row".into());
        }
        for r in [self.producer_regs, self.consumer_regs] {
            if r % 8 != 0 || !(24..=256).contains(&r) {
                return bad(format!(
                    "setmaxnreg value {r} must be a multiple of 8 in 24..=256"
                ));
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
        } else if !n.is_multiple_of(8) || !k.is_multiple_of(8) {
            Some("N and K must be multiples of 8 (16-byte TMA row pitch)")
        } else if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
            Some("dimensions must fit TMA's 32-bit coordinates")
        } else {
            None
        };
        match why {
            Some(w) => Err(HopperGemmError::Shape {
                m,
                n,
                k,
                why: w.into(),
            }),
            None => Ok(()),
        }
    }

    /// Blocks to launch for a persistent grid: `slots` clusters can be resident at once (the SM count
    /// when `cluster` is 1); never more clusters than units of work.
    pub fn grid(&self, m: usize, n: usize, slots: u32) -> u32 {
        let units = m.div_ceil(self.bm as usize).div_ceil(self.cluster as usize)
            * n.div_ceil(self.bn as usize);
        self.cluster * (units.min(slots as usize) as u32).max(1)
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
             constexpr u32 PRODUCER_REGS = {pr}, CONSUMER_REGS = {cr}, WG_C_BYTES = {slab};\n\
             constexpr u32 CLUSTER = {cluster}, EMPTY_ARRIVALS = {empty};\n\
             }}\n#define KERNEL_NAME {name}\n#define WGMMA kt::{wgmma}\n#define KT_TMA_EPILOGUE {tma}\n\
             #define KT_CLUSTER_ATTR {attr}\n",
            bm = self.bm,
            bn = self.bn,
            bk = self.bk,
            stages = self.stages,
            consumers = self.consumers,
            group_m = self.group_m,
            threads = self.threads(),
            pr = self.producer_regs,
            cr = self.consumer_regs,
            slab = self.c_slab_bytes(),
            cluster = self.cluster,
            // Alone: every consumer thread arrives. In a cluster: one lane per consumer warp, per CTA.
            empty = if self.cluster == 1 { self.consumers * 128 } else { self.cluster * self.consumers * 4 },
            attr = if self.cluster > 1 { format!("__cluster_dims__({}, 1, 1)", self.cluster) } else { String::new() },
            tma = u32::from(self.epilogue == Epilogue::TmaStore),
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
        // 3 stages of (128 + 256) x 64 bf16 = 3 x 48 KB, two 64 x 256 bf16 C slabs, alignment slack and
        // barriers.
        assert_eq!(g.stage_bytes(), 49_152);
        assert_eq!(
            g.dynamic_shared_bytes(),
            3 * 49_152 + 2 * 32_768 + 1024 + 48
        );
        let direct4 = HopperGemm {
            stages: 4,
            epilogue: Epilogue::Direct,
            ..HopperGemm::default()
        };
        assert_eq!(direct4.dynamic_shared_bytes(), 4 * 49_152 + 1024 + 64);
        assert_eq!(128 * (g.producer_regs + 2 * g.consumer_regs), 64_512);
        assert_eq!(g.grid(8192, 8192, 132), 132);
        assert_eq!(g.grid(128, 256, 132), 1);
        // Pairs of tile-rows per cluster: 8192 has 64 x 32 tiles = 1024 units, 66 clusters resident.
        let c2 = HopperGemm {
            cluster: 2,
            ..HopperGemm::default()
        };
        c2.validate().expect("cluster of 2 is valid");
        assert_eq!(c2.grid(8192, 8192, 66), 132);
        assert_eq!(c2.grid(384, 256, 66), 4, "3 tile-rows make 2 units");
    }

    #[test]
    fn refuses_what_cannot_run() {
        let five = HopperGemm {
            stages: 5,
            ..HopperGemm::default()
        };
        assert!(five.validate().is_err(), "5 x 48 KB exceeds 227 KB");
        let tma4 = HopperGemm {
            stages: 4,
            epilogue: Epilogue::TmaStore,
            ..HopperGemm::default()
        };
        assert!(
            tma4.validate().is_err(),
            "4 x 48 KB + 2 x 32 KB C slabs exceed 227 KB"
        );
        let regs = HopperGemm {
            consumer_regs: 256,
            producer_regs: 24,
            ..HopperGemm::default()
        };
        assert!(
            regs.validate().is_err(),
            "128 x (24 + 512) registers exceed 65536"
        );
        let g = HopperGemm::default();
        assert!(g.check_shape(100, 4096, 4096).is_ok());
        assert!(g.check_shape(4096, 4100, 4096).is_err());
        assert!(g.check_shape(4096, 4096, 0).is_err());
    }
}
