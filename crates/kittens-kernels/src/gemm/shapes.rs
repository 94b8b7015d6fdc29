//! Shape-aware configuration of the Hopper GEMM: which block of C (rows × columns) the producer/consumer
//! program ([`super::producer_consumer`]) is built with for a given `M × N × K`, and how many ring
//! stages fit beside it. Every configuration is the one tile program with other parameters.
//!
//! Why the block must depend on the shape: the lowered kernel runs a persistent grid of one block per
//! SM, each taking every `SMs`-th tile, so the slowest SM does `⌈tiles / SMs⌉` tiles. With 128×256
//! tiles, 3000³ has 24 × 12 = 288 tiles: three rounds on 132 SMs for 2.18 rounds of work (73% of the
//! SMs busy in the last), and a 16-row M wastes 112 of every 128 rows computed. A smaller block
//! quantises more finely but moves more operand bytes per FLOP (docs/performance.md: 128×128 ran at 0.81×
//! where 128×256 ran at 0.97× at 8192³), so the choice is a trade, made by the cost model of
//! [`estimate_us`].

use super::GemmConfig;
use kittens_hw::Gpu;

/// One block shape of the Hopper GEMM: `rows × cols` of C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct HopperTile {
    pub rows: u32,
    pub cols: u32,
}

impl std::fmt::Display for HopperTile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

impl std::str::FromStr for HopperTile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let bad = || {
            format!(
                "tile `{t}`: expected ROWSxCOLS, one of {} or {}",
                TILES.map(|t| t.to_string()).join(", "),
                NARROW
            )
        };
        let (r, c) = t.split_once('x').ok_or_else(bad)?;
        let tile = HopperTile {
            rows: r.parse().map_err(|_| bad())?,
            cols: c.parse().map_err(|_| bad())?,
        };
        if TILES.contains(&tile) || tile == NARROW {
            Ok(tile)
        } else {
            Err(bad())
        }
    }
}

/// The blocks the producer/consumer program is built with. 256×256 is missing: 256 fp32 accumulators
/// per consumer thread do not fit its registers. 64×64 (last) splits a small M's B among twice the
/// SMs of 64×128 without split-K, with the deepest ring of all.
pub const TILES: [HopperTile; 7] = [
    HopperTile {
        rows: 128,
        cols: 256,
    },
    HopperTile {
        rows: 256,
        cols: 128,
    },
    HopperTile {
        rows: 128,
        cols: 128,
    },
    HopperTile {
        rows: 64,
        cols: 256,
    },
    HopperTile {
        rows: 64,
        cols: 128,
    },
    HopperTile {
        rows: 128,
        cols: 192,
    },
    HopperTile { rows: 64, cols: 64 },
];

/// A block of 32 columns: twice the blocks of 64×64 streaming B at a decode step's M (the FP8 GEMM's
/// small-M model, `small_m::BLOCKS`, chooses it; cuBLASLt runs 128 CTAs of 64 columns by 8 rows at
/// 16×4096×4096, docs/performance.md "gemm_fp8"). Measurable for the BF16 GEMM (`--tiles 64x32`), not
/// in [`TILES`]: its model does not choose it, and B stored `K × N` needs 64-column blocks.
pub const NARROW: HopperTile = HopperTile { rows: 64, cols: 32 };

/// K per pipeline step (64 bf16 = one 128-byte swizzled row).
const K_STEP: u32 = 64;
/// Most ring stages. Stages fill the shared memory left beside the C slabs: at 128×256 (three fit)
/// 3 and 4 measured the same (docs/performance.md), but a 64-row block streams B from DRAM with the tensor
/// cores mostly idle, and the bytes in flight per SM (stages × stage bytes) bound its rate. Only
/// 64×64 blocks (16 KiB stages) fit more than 8 (13 on the H100).
pub const MAX_STAGES: u32 = 16;
/// Shared bytes the lowering keeps for mbarriers beside the ring and the C slabs.
const BARRIER_BYTES: u32 = 1024;

impl HopperTile {
    /// Consumer warpgroups: one for 64 rows, two otherwise.
    pub fn consumers(self) -> u32 {
        if self.rows == 64 {
            1
        } else {
            2
        }
    }

    /// Shared bytes of one ring stage (A and B, bf16) and of the lowering's C slabs (64 rows × cols
    /// bf16 per consumer warpgroup).
    fn bytes(self) -> (u32, u32) {
        (
            (self.rows + self.cols) * K_STEP * 2,
            self.consumers() * 64 * self.cols * 2,
        )
    }

    /// Ring stages that fit `gpu`'s shared memory per block beside the slabs, at most [`MAX_STAGES`]
    /// and at least 2.
    pub fn stages(self, gpu: &Gpu) -> u32 {
        let (stage, slab) = self.bytes();
        let free = gpu
            .shared_bytes_per_block
            .saturating_sub(slab + BARRIER_BYTES);
        (free / stage).clamp(2, MAX_STAGES)
    }

    /// The Hopper GEMM configuration with this block.
    pub fn config(self, gpu: &Gpu) -> GemmConfig {
        GemmConfig {
            block: self.cols,
            block_rows: self.rows,
            stages: self.stages(gpu),
            k_step: K_STEP,
            ..GemmConfig::for_gpu(gpu)
        }
    }

    /// Relative throughput of one SM running this block on a long K loop, against 128×256 (1.0):
    /// the median over the compute-bound shapes (M ≥ 4096) of the LLM sweep on the H100, every block
    /// in the same run (docs/performance.md, "gemm_bf16"): 256×128 0.99, 128×128 0.93,
    /// 64×256 0.89 (one consumer warpgroup: half the wgmma issue), 64×128 0.59. Operand bytes per FLOP
    /// grow as `1/rows + 1/cols` (0.0117 B/FLOP for 128×256, 0.0156 for 128×128 and 64×256, 0.0234 for
    /// 64×128), which orders them the same way.
    pub fn efficiency(self) -> f64 {
        match (self.rows, self.cols) {
            (128, 256) => 1.0,
            // Not in the fit run: between 128×256 and 128×128 by bytes per FLOP (0.0130).
            (128, 192) => 0.965,
            (256, 128) => 0.99,
            (128, 128) => 0.93,
            (64, 256) => 0.89,
            (64, 128) => 0.59,
            // Not in the fit run: below 64×128 by bytes per FLOP (0.0313 against 0.0234).
            _ => 0.44,
        }
    }

    /// The same when A's and B's rows start off 128-byte lines (K·2 bytes no multiple of 128): each
    /// 128-byte TMA box row then spans two lines and the loads, not the tensor cores, set the pace, so
    /// throughput follows operand bytes per FLOP (0.0117 / that of the block). Fit run at 3000³, every
    /// block in one run: 128×256 0.523 of cuBLAS, 256×128 0.506, 128×128 0.439, 64×256 0.360, 64×128
    /// 0.328 — the order of bytes per FLOP, where [`HopperTile::efficiency`] would have picked 128×128.
    pub fn efficiency_unaligned(self) -> f64 {
        let bytes_per_flop = |r: u32, c: u32| (f64::from(r) + f64::from(c)) / f64::from(r * c);
        bytes_per_flop(128, 256) / bytes_per_flop(self.rows, self.cols)
    }

    /// Multiply-adds of C computed, counting the padding of partial blocks: the tie-break of
    /// [`choose`].
    fn padded_work(self, m: u64, n: u64) -> u64 {
        m.div_ceil(self.rows.into())
            * n.div_ceil(self.cols.into())
            * u64::from(self.rows * self.cols)
    }
}

/// Least `m·n / (m + n)` (outputs per operand row, roughly) at which the launchers copy operands whose
/// rows start off 128-byte lines into aligned rows ([`copies_misaligned`]).
pub const ALIGN_REUSE: u64 = 256;

/// Whether the launchers treat the operand rows of an `m × n` GEMM that are no whole number of
/// 128-byte lines as the kernel's cost (each row serves enough outputs that the loads, not the
/// bytes, bound it): they then read B in place in thread-block clusters of two that multicast it
/// (`gemm_pad::PadPlan::auto` in the runtime; `tma-copy` copies it into aligned rows instead) and A in
/// place with 128-byte L2 promotion. H100: 3000³ ran at 0.42 of cuBLAS with misaligned rows where 3008³
/// ran at 0.82; copying B costs 13-15 µs there (docs/performance.md). Both M and N of about 512 or more
/// qualify; a decode-sized M (memory-bound, each B row read once) does not.
pub fn copies_misaligned(m: u64, n: u64) -> bool {
    m.saturating_mul(n) / m.saturating_add(n).max(1) >= ALIGN_REUSE
}

/// Shape-dependent figures of one candidate block for `m × n × k` on `gpu`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub tile: HopperTile,
    pub tiles: u64,
    /// Tiles of the busiest SM: `⌈tiles / SMs⌉`.
    pub rounds: u64,
    /// The model's time, µs ([`estimate_us`]).
    pub us: f64,
}

/// The cost model behind [`choose`], in µs: the larger of
///
/// - **compute**: the busiest SM's tiles, each `2·rows·cols·⌈K/64⌉·64` FLOP at the SM's share of the
///   dense bf16 peak times 0.75 (what the 128×256 kernel reached at 8192³: about 730 of 989 TFLOP/s)
///   times the block's [`HopperTile::efficiency`] ([`HopperTile::efficiency_unaligned`] when K is no
///   multiple of 64 and the operands are not copied into aligned rows, [`copies_misaligned`]) —
///   partial tiles cost as much as full ones;
/// - **memory**: A and B read once, C written once, at the HBM bandwidth.
///
/// On the 50 shapes of the fit run this choice reached a geometric mean of 0.931 of cuBLAS where the
/// best block of every shape reached 0.936 (docs/performance.md).
pub fn estimate_us(gpu: &Gpu, sms: u32, m: u64, n: u64, k: u64, tile: HopperTile) -> Estimate {
    let tiles = m.div_ceil(tile.rows.into()) * n.div_ceil(tile.cols.into());
    let rounds = tiles.div_ceil(u64::from(sms.max(1)));
    let k_pad = k.div_ceil(K_STEP.into()) * u64::from(K_STEP);
    let tile_flop = 2.0 * f64::from(tile.rows) * f64::from(tile.cols) * k_pad as f64;
    let sm_flops = gpu.peak_bf16_tflops * 1e12 * 0.75 / f64::from(gpu.compute_units);
    // K rows of whole 128-byte lines (64 bf16) keep TMA's loads aligned; so do the aligned copies
    // the launchers make where they pay ([`copies_misaligned`]).
    let eff = if k.is_multiple_of(64) || copies_misaligned(m, n) {
        tile.efficiency()
    } else {
        tile.efficiency_unaligned()
    };
    let compute = rounds as f64 * tile_flop / (sm_flops * eff);
    let bytes = 2.0 * (m * k + n * k + m * n) as f64;
    let memory = bytes / (gpu.hbm_tbps * 1e12);
    Estimate {
        tile,
        tiles,
        rounds,
        us: compute.max(memory) * 1e6,
    }
}

/// The block for `m × n × k` on `gpu` with `sms` SMs (the device's count, or the catalog's), by the
/// cost model of [`estimate_us`]. Blocks within 1% of the best tie (a memory-bound small M ties every
/// block that finishes in one round); a tie goes to the fewest rounds, then to the block that keeps
/// the most SMs streaming (each SM streams B at a bounded rate: on the H200 16×14336×4096 ran at 0.99
/// of cuBLAS in 112 blocks of 64×128 and 0.95 in 56 of 64×256), then to the least padding computed
/// (a 16-row M takes 64-row blocks), then to the earlier in [`TILES`]. 64×64 is measured, not chosen:
/// 64×128 split matched or beat it at every 16-32-row shape of the fit run.
pub fn choose(gpu: &Gpu, sms: u32, m: u64, n: u64, k: u64) -> HopperTile {
    let est: Vec<Estimate> = TILES[..6]
        .iter()
        .map(|&t| estimate_us(gpu, sms, m, n, k, t))
        .collect();
    let best = est.iter().map(|e| e.us).fold(f64::INFINITY, f64::min);
    let sms = u64::from(sms.max(1));
    est.iter()
        .enumerate()
        .filter(|(_, e)| e.us <= best * 1.01)
        .min_by_key(|(i, e)| {
            (
                e.rounds,
                std::cmp::Reverse(e.tiles.min(sms)),
                e.tile.padded_work(m, n),
                *i,
            )
        })
        .map_or(TILES[0], |(_, e)| e.tile)
}

/// [`choose`] as a configuration.
pub fn config_for(gpu: &Gpu, sms: u32, m: u64, n: u64, k: u64) -> GemmConfig {
    choose(gpu, sms, m, n, k).config(gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kittens_hw::Target;

    fn h100() -> &'static Gpu {
        Target::Sm90a.gpu().expect("sm_90a has a GPU")
    }

    #[test]
    fn tiles_parse_and_print() {
        for t in TILES {
            assert_eq!(t.to_string().parse::<HopperTile>(), Ok(t));
        }
        let e = "256x256".parse::<HopperTile>().unwrap_err();
        assert!(e.contains("128x256"), "{e}");
        assert!("x".parse::<HopperTile>().is_err() && "64".parse::<HopperTile>().is_err());
    }

    /// Stages fill the H100's 227 KiB: 3 × 48 KiB + 64 KiB of slabs for 128×256 (the measured
    /// configuration), up to 8 where they fit.
    #[test]
    fn stages_fit_shared_memory() {
        let g = h100();
        for t in TILES {
            let (stage, slab) = t.bytes();
            let s = t.stages(g);
            assert!(
                s * stage + slab + BARRIER_BYTES <= g.shared_bytes_per_block,
                "{t}"
            );
        }
        assert_eq!(
            HopperTile {
                rows: 128,
                cols: 256
            }
            .stages(g),
            3
        );
        let stages = |rows, cols| HopperTile { rows, cols }.stages(g);
        assert_eq!(
            (stages(128, 128), stages(64, 128), stages(256, 128)),
            (6, 8, 4)
        );
    }

    /// Large squares keep the measured 128×256 block; 3000³ is three rounds of 288 tiles on 132 SMs;
    /// a 16-row M takes 64-row blocks, 256 columns wide where N fills the SMs with them (N = 28672:
    /// 112 blocks) and 128 wide where it does not (N = 4096: 32 blocks).
    #[test]
    fn the_model_picks_by_quantisation() {
        let (g, sms) = (h100(), 132);
        let pick = |m, n, k| choose(g, sms, m, n, k);
        for s in [4096, 8192, 16384] {
            assert_eq!(pick(s, s, s).to_string(), "128x256", "{s}");
        }
        let e = estimate_us(g, sms, 3000, 3000, 3000, TILES[0]);
        assert_eq!((e.tiles, e.rounds), (288, 3));
        // K = 3000 rows straddle 128-byte lines, but B is copied into aligned rows there (A read
        // in place costs the kernel little with 128-byte L2 promotion), so 3000³ ranks the blocks as
        // 3072³ does: 128x192 makes 24 × 16 = 384 tiles, 2.9 rounds of
        // work in 3 (128x256: 2.2 in 3; 128x128: 4.4 in 5). Misaligned rows left in place (a small
        // M) rank by bytes per FLOP.
        assert!(copies_misaligned(3000, 3000) && !copies_misaligned(16, 4096));
        let e = estimate_us(g, sms, 3000, 3000, 3000, TILES[5]);
        assert_eq!((e.tiles, e.rounds), (384, 3));
        assert_eq!(pick(3000, 3000, 3000).to_string(), "128x192");
        assert_eq!(pick(3072, 3072, 3072).to_string(), "128x192");
        assert_eq!(pick(16, 4096, 4096).to_string(), "64x128");
        assert_eq!(pick(16, 28672, 4096).to_string(), "64x256");
        assert_eq!(pick(64, 57344, 8192).to_string(), "64x256");
    }
}
