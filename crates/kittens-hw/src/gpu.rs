//! The GPU catalog: one table of the figures every other layer reads.
//!
//! Each figure names its source. Abbreviations used below:
//! - **HipKittens** — the HipKittens paper (docs/references.md), with section / figure / table;
//! - **MI300X-attn** — the MI300X attention write-up (docs/references.md);
//! - **CDNA3-WP** — AMD, "AMD CDNA 3 Architecture" white paper (2023), and the MI300X / MI325X data sheets;
//! - **CDNA4-WP** — AMD, "AMD CDNA 4 Architecture" white paper (2025), and the MI350X / MI355X data sheets;
//! - **H100-WP** — NVIDIA, "NVIDIA H100 Tensor Core GPU Architecture" white paper (2022), H100 SXM5 column;
//! - **H200-DS** — NVIDIA H200 SXM data sheet (2024);
//! - **CUDA-CC** — NVIDIA CUDA C++ Programming Guide, "Compute Capabilities" table, compute capability 9.0.
//!
//! Peak rates are dense (no sparsity), for the matrix units, at the boost clock.

use serde::Serialize;
use thiserror::Error;

/// The instruction-set family of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// AMD CDNA3, LLVM target `gfx942` (MI300X, MI325X).
    Cdna3,
    /// AMD CDNA4, LLVM target `gfx950` (MI350X, MI355X).
    Cdna4,
    /// NVIDIA Hopper, PTX target `sm_90a` (H100, H200).
    Hopper,
}

impl Arch {
    /// The compiler target name of the family ([`crate::Target::name`]).
    pub fn target(self) -> &'static str {
        crate::Target::from(self).name()
    }

    /// True for the AMD CDNA families.
    pub fn is_amd(self) -> bool {
        matches!(self, Arch::Cdna3 | Arch::Cdna4)
    }
}

/// Which processors share one L2 cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum L2Scope {
    /// Each XCD (chiplet) has a private L2; all XCDs share the last-level cache (HipKittens §2.1, §3.4).
    PerXcd,
    /// One L2 for the whole GPU.
    PerGpu,
}

/// One GPU model. Field docs say what is counted; the catalog entries say where each number comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Short model name used on the command line (`mi300x`, `h100`, ...).
    pub name: &'static str,
    /// Vendor's product name.
    pub product: &'static str,
    pub arch: Arch,
    /// Compute units (AMD) or streaming multiprocessors (NVIDIA).
    pub compute_units: u32,
    /// Accelerator complex dies; 1 for a monolithic GPU.
    pub xcds: u32,
    /// Compute units per XCD (`compute_units / xcds`).
    pub cus_per_xcd: u32,
    /// SIMDs per CU (AMD) or SM sub-partitions (NVIDIA); each runs its own waves / warps.
    pub simds_per_cu: u32,
    /// Threads in a wave (AMD, 64) or warp (NVIDIA, 32).
    pub wave_width: u32,
    /// Shared memory (LDS) per CU / SM, bytes.
    pub shared_bytes_per_cu: u32,
    /// The most shared memory one thread block may allocate, bytes.
    pub shared_bytes_per_block: u32,
    /// 32-bit registers per lane available on one SIMD / sub-partition, shared by its resident waves.
    /// CDNA: 512 (VGPRs + AGPRs); Hopper: 64 K registers per SM / 4 sub-partitions / 32 lanes = 512.
    pub regs_per_lane_per_simd: u32,
    /// VGPR / AGPR split when one wave occupies a SIMD (CDNA only, HipKittens §3.2.1).
    pub vgpr_agpr_split: Option<(u32, u32)>,
    /// Most 32-bit registers one thread may address (CDNA: 512 arch VGPR+AGPR; Hopper: 255).
    pub max_regs_per_thread: u32,
    /// Most threads in one block / workgroup: 1024 on both (CUDA-CC 9.0; the AMDGPU backend's largest
    /// flat workgroup size, LLVM AMDGPUUsage "amdgpu-flat-work-group-size").
    pub max_threads_per_block: u32,
    /// L2 capacity of one L2 instance, bytes (per XCD when [`L2Scope::PerXcd`]).
    pub l2_bytes: u64,
    pub l2_scope: L2Scope,
    /// Last-level cache behind the L2s (AMD Infinity Cache), bytes; 0 when there is none.
    pub llc_bytes: u64,
    /// HBM capacity, bytes.
    pub hbm_bytes: u64,
    /// HBM peak bandwidth, TB/s (10^12 bytes per second).
    pub hbm_tbps: f64,
    /// Peak aggregate L2 read bandwidth over all L2 instances, TB/s.
    pub l2_tbps: f64,
    /// Peak last-level-cache bandwidth, TB/s; 0 when there is no LLC.
    pub llc_tbps: f64,
    /// Peak dense BF16 matrix rate, TFLOP/s.
    pub peak_bf16_tflops: f64,
    /// Peak dense FP8 matrix rate, TFLOP/s.
    pub peak_fp8_tflops: f64,
    /// Peak engine / boost clock, MHz.
    pub clock_mhz: u32,
}

const KIB: u32 = 1024;
const MIB: u64 = 1024 * 1024;
const GB: u64 = 1_000_000_000;

/// MI300X. CU/XCD counts, LDS, L2, Infinity Cache, clock and peaks: CDNA3-WP (304 CUs = 8 XCDs × 38,
/// HipKittens §3.4 "38 (CDNA3)"; 64 KiB LDS, MI300X-attn §"hardware"; 4 MB L2 per XCD, HipKittens §2.1; 256 MB Infinity
/// Cache, MI300X-attn). L2 bandwidth: 2 KB/clk per XCD (CDNA3-WP) × 8 × 2.1 GHz. Infinity Cache peak 17.2 TB/s
/// (CDNA3-WP). HBM3 192 GB at 5.3 TB/s; BF16 1307.4 and FP8 2614.9 TFLOP/s dense (MI300X data sheet).
pub const MI300X: Gpu = Gpu {
    name: "mi300x",
    product: "AMD Instinct MI300X",
    arch: Arch::Cdna3,
    compute_units: 304,
    xcds: 8,
    cus_per_xcd: 38,
    simds_per_cu: 4,
    wave_width: 64,
    shared_bytes_per_cu: 64 * KIB,
    shared_bytes_per_block: 64 * KIB,
    regs_per_lane_per_simd: 512,
    vgpr_agpr_split: Some((256, 256)),
    max_regs_per_thread: 512,
    max_threads_per_block: 1024,
    l2_bytes: 4 * MIB,
    l2_scope: L2Scope::PerXcd,
    llc_bytes: 256 * MIB,
    hbm_bytes: 192 * GB,
    hbm_tbps: 5.3,
    l2_tbps: 34.4,
    llc_tbps: 17.2,
    peak_bf16_tflops: 1307.4,
    peak_fp8_tflops: 2614.9,
    clock_mhz: 2100,
};

/// MI325X: the MI300X compute die with HBM3E — 256 GB at 6.0 TB/s (MI325X data sheet); every other figure
/// as MI300X (CDNA3-WP; HipKittens evaluates on it, §4).
pub const MI325X: Gpu = Gpu {
    name: "mi325x",
    product: "AMD Instinct MI325X",
    hbm_bytes: 256 * GB,
    hbm_tbps: 6.0,
    ..MI300X
};

/// MI350X. 256 CUs = 8 XCDs × 32 (HipKittens §2.1, §3.4); 160 KiB LDS per CU (CDNA4-WP); 4 MB L2 per XCD
/// (HipKittens §2.1); 256 MB Infinity Cache (CDNA4-WP); 288 GB HBM3E at 8.0 TB/s (HipKittens Fig. 2); 2.2 GHz;
/// BF16 2306.9 and FP8 4613.7 TFLOP/s dense (MI350X data sheet: 4096 bf16 flops/clk/CU × 256 × 2.2 GHz).
/// L2: 2 KB/clk per XCD (CDNA4-WP keeps CDNA3's L2 width) × 8 × 2.2 GHz; Infinity Cache 14.7 TB/s (CDNA4-WP).
pub const MI350X: Gpu = Gpu {
    name: "mi350x",
    product: "AMD Instinct MI350X",
    arch: Arch::Cdna4,
    compute_units: 256,
    xcds: 8,
    cus_per_xcd: 32,
    simds_per_cu: 4,
    wave_width: 64,
    shared_bytes_per_cu: 160 * KIB,
    shared_bytes_per_block: 160 * KIB,
    regs_per_lane_per_simd: 512,
    vgpr_agpr_split: Some((256, 256)),
    max_regs_per_thread: 512,
    max_threads_per_block: 1024,
    l2_bytes: 4 * MIB,
    l2_scope: L2Scope::PerXcd,
    llc_bytes: 256 * MIB,
    hbm_bytes: 288 * GB,
    hbm_tbps: 8.0,
    l2_tbps: 36.0,
    llc_tbps: 14.7,
    peak_bf16_tflops: 2306.9,
    peak_fp8_tflops: 4613.7,
    clock_mhz: 2200,
};

/// MI355X: MI350X at 2.4 GHz — BF16 2516.6 and FP8 5033.2 TFLOP/s dense (HipKittens Fig. 2: 2.5 / 5.0 PFLOPs;
/// MI355X data sheet), L2 2 KB/clk × 8 × 2.4 GHz.
pub const MI355X: Gpu = Gpu {
    name: "mi355x",
    product: "AMD Instinct MI355X",
    peak_bf16_tflops: 2516.6,
    peak_fp8_tflops: 5033.2,
    l2_tbps: 39.3,
    clock_mhz: 2400,
    ..MI350X
};

/// H100 SXM5. 132 SMs, 228 KiB shared memory per SM of which 227 KiB per block, 64 K 32-bit registers
/// per SM, 255 per thread (CUDA-CC 9.0); 50 MB L2 (H100-WP); HBM3 80 GB at 3.35 TB/s, BF16 989.4 and FP8
/// 1978.9 TFLOP/s dense at 1830 MHz (H100-WP, SXM5). L2 read bandwidth about 5.5 TB/s (H100-WP gives no
/// figure; microbenchmarks of the H100 SXM report 5.5–7 TB/s — used only by the cache model's Eq. 1).
pub const H100: Gpu = Gpu {
    name: "h100",
    product: "NVIDIA H100 SXM5",
    arch: Arch::Hopper,
    compute_units: 132,
    xcds: 1,
    cus_per_xcd: 132,
    simds_per_cu: 4,
    wave_width: 32,
    shared_bytes_per_cu: 228 * KIB,
    shared_bytes_per_block: 227 * KIB,
    regs_per_lane_per_simd: 512,
    vgpr_agpr_split: None,
    max_regs_per_thread: 255,
    max_threads_per_block: 1024,
    l2_bytes: 50 * MIB,
    l2_scope: L2Scope::PerGpu,
    llc_bytes: 0,
    hbm_bytes: 80 * GB,
    hbm_tbps: 3.35,
    l2_tbps: 5.5,
    llc_tbps: 0.0,
    peak_bf16_tflops: 989.4,
    peak_fp8_tflops: 1978.9,
    clock_mhz: 1830,
};

/// H200 SXM: the H100 SXM5 die with 141 GB HBM3E at 4.8 TB/s (H200-DS); compute figures as H100.
pub const H200: Gpu = Gpu {
    name: "h200",
    product: "NVIDIA H200 SXM",
    hbm_bytes: 141 * GB,
    hbm_tbps: 4.8,
    ..H100
};

/// Every GPU in the catalog, AMD first.
pub const ALL: [&Gpu; 6] = [&MI300X, &MI325X, &MI350X, &MI355X, &H100, &H200];

#[derive(Debug, Error, PartialEq, Eq)]
#[error("unknown GPU `{0}`; known: {known}", known = ALL.map(|g| g.name).join(", "))]
pub struct UnknownGpu(pub String);

/// Look a GPU up by its short name (case-insensitive).
pub fn gpu(name: &str) -> Result<&'static Gpu, UnknownGpu> {
    let lower = name.to_ascii_lowercase();
    ALL.iter()
        .copied()
        .find(|g| g.name == lower)
        .ok_or(UnknownGpu(name.to_string()))
}

/// The catalog GPU a device reports itself as, by the product name its driver gives
/// (`CU_DEVICE_ATTRIBUTE`'s name: "NVIDIA H200", "NVIDIA H100 80GB HBM3"): the catalog entry whose
/// short name is a word of it, case-insensitively; `None` for a device the catalog lacks.
pub fn for_device(name: &str) -> Option<&'static Gpu> {
    let words: Vec<String> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .collect();
    ALL.iter()
        .copied()
        .find(|g| words.iter().any(|w| w == g.name))
}

impl Gpu {
    /// Number of L2 cache instances.
    pub fn l2_instances(&self) -> u32 {
        match self.l2_scope {
            L2Scope::PerXcd => self.xcds,
            L2Scope::PerGpu => 1,
        }
    }

    /// 32-bit registers of one CU / SM: lanes × registers per lane × SIMDs (CDNA: 64 × 512 × 4 = 128 K,
    /// the 512 KiB register file per CU; Hopper: 32 × 512 × 4 = 64 K per SM, CUDA-CC 9.0).
    pub fn registers_per_cu(&self) -> u32 {
        self.wave_width * self.regs_per_lane_per_simd * self.simds_per_cu
    }

    /// Dense BF16 flops per clock per CU / SM, derived from the peak rate.
    pub fn bf16_flops_per_clk_per_cu(&self) -> f64 {
        self.peak_bf16_tflops * 1e12 / (self.compute_units as f64 * self.clock_mhz as f64 * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Driver product names find their catalog entry; a device the catalog lacks finds none.
    #[test]
    fn devices_find_their_catalog_entry() {
        let name = |d| for_device(d).map(|g| g.name);
        assert_eq!(name("NVIDIA H200"), Some("h200"));
        assert_eq!(name("NVIDIA H100 80GB HBM3"), Some("h100"));
        assert_eq!(name("AMD Instinct MI300X"), Some("mi300x"));
        assert_eq!(name("NVIDIA A100-SXM4-80GB"), None);
    }

    #[test]
    fn xcd_geometry_is_consistent() {
        for g in ALL {
            assert_eq!(g.compute_units, g.xcds * g.cus_per_xcd, "{}", g.name);
        }
    }

    /// HipKittens §3.4: 32 CUs per XCD on CDNA4, 38 on CDNA3, 8 XCDs each; §2.1: 4 MB L2 per XCD.
    #[test]
    fn matches_seed_000_section_3_4() {
        for g in [&MI300X, &MI325X] {
            assert_eq!((g.xcds, g.cus_per_xcd), (8, 38));
        }
        for g in [&MI350X, &MI355X] {
            assert_eq!((g.xcds, g.cus_per_xcd), (8, 32));
        }
        for g in ALL.iter().filter(|g| g.arch.is_amd()) {
            assert_eq!(g.l2_bytes, 4 * MIB);
            assert_eq!(g.vgpr_agpr_split, Some((256, 256)));
            assert_eq!(g.regs_per_lane_per_simd, 512);
        }
    }

    /// The peak rates are the per-clock rate of the matrix units times CUs times clock; the per-clock rate
    /// must come out as the architecture's (CDNA3 2048, CDNA4 4096 bf16 flops/clk/CU, Hopper 4096 per SM).
    #[test]
    fn peaks_follow_from_per_clock_rates() {
        for g in ALL {
            let per_clk = g.bf16_flops_per_clk_per_cu();
            let expect = match g.arch {
                Arch::Cdna3 => 2048.0,
                Arch::Cdna4 | Arch::Hopper => 4096.0,
            };
            assert!(
                (per_clk / expect - 1.0).abs() < 0.002,
                "{}: {per_clk}",
                g.name
            );
            assert!(
                (g.peak_fp8_tflops / g.peak_bf16_tflops - 2.0).abs() < 0.01,
                "{}",
                g.name
            );
        }
    }

    /// CUDA-CC 9.0: 64 K 32-bit registers per SM; CDNA3-WP / CDNA4-WP: 512 KiB of VGPRs per CU.
    #[test]
    fn register_files() {
        assert_eq!(H100.registers_per_cu(), 64 * 1024);
        for g in [&MI300X, &MI355X] {
            assert_eq!(g.registers_per_cu() * 4, 512 * 1024);
        }
    }

    #[test]
    fn lookup_by_name() {
        assert_eq!(gpu("MI355X").unwrap().compute_units, 256);
        let msg = gpu("a100").unwrap_err().to_string();
        assert!(msg.contains("`a100`"), "{msg}");
        for g in ALL {
            assert!(msg.contains(g.name), "{msg}");
        }
    }
}
