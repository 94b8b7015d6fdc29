//! The block and K split of the Hopper FP8 GEMM at a small M (at most [`MAX_ROWS`] rows), chosen
//! together by one cost model fitted on the H200.
//!
//! Why a model of its own: at 16-256 rows the FP8 GEMM moves B once in a few microseconds, so what
//! sets its time is how many SMs stream B, how long each block's K loop is, and what a split costs
//! (its partials and the reduction's launch). One block per M class and the BF16 GEMM's split rule
//! left it at 0.58-0.94 of cuBLASLt there, where the best block and split of each shape reached
//! 0.61-1.03 (docs/performance.md, "gemm_fp8"): blocks narrower than the large-M 192 columns (64 or
//! 128) keep more SMs streaming, and a split pays only where K is long.

use kittens_hw::Gpu;

/// Most rows of C this model chooses for; above it the large-M configuration holds.
pub const MAX_ROWS: u64 = 256;

/// The candidate blocks, rows × columns of C (128 rows only where M > 64: a smaller M computes
/// mostly padding in them). 64×32 and 64×48 double the blocks that stream B at a decode step's M
/// (128 at N = 4096 and 6144, as cuBLASLt's 128 CTAs of 64 columns by 8 rows at 16×4096×4096).
pub const BLOCKS: [(u32, u32); 8] = [
    (64, 32),
    (64, 48),
    (64, 64),
    (64, 128),
    (64, 192),
    (128, 64),
    (128, 128),
    (128, 192),
];

/// Most rows of C for which the blocks narrower than 64 columns are candidates: there A is loaded in
/// a box of M's rows (`GemmConfig::a_rows_for`); with a 64-row box of A they ran slower than 64×64
/// at every M measured (docs/performance.md, "gemm_fp8").
pub const NARROW_ROWS: u64 = 32;

/// K splits tried (the fit run measured 1, 2 and 4).
pub const SPLITS: [u32; 3] = [1, 2, 4];

/// Bytes per second one SM streams (A's and B's rows of its block), fitted.
const SM_BYTES_PER_S: f64 = 60e9;
/// The share of the HBM bandwidth all SMs together reach, fitted (4.0 of the H200's 4.8 TB/s).
const DRAM_SHARE: f64 = 0.83;
/// The share of an SM's dense peak one block computes at, fitted (8 of the H200's 15 fp8
/// TFLOP/s per SM).
const PEAK_SHARE: f64 = 0.53;
/// Fixed cost of a split's reduction beside its partials' bytes, µs, fitted.
const REDUCE_US: f64 = 6.0;
/// Fewest K steps per slice (a ring needs a few to fill).
const MIN_STEPS: u64 = 8;

/// The model's time of `m × n × k` (operands of `elem_bytes`) with blocks `rows × cols` and `s` K
/// slices on `sms` SMs of `gpu`, µs: the larger of
///
/// - the busiest SM's units (`⌈blocks·s / sms⌉`), each `K/s` long, at the slower of its operand
///   rows' bytes (`(rows + cols)·elem_bytes` per K) at [`SM_BYTES_PER_S`] and its FLOPs at
///   [`PEAK_SHARE`] of the SM's peak;
/// - A and B at the lesser of [`DRAM_SHARE`] of the HBM bandwidth and what the busy SMs stream;
///
/// plus, split, the partials written and read back and [`REDUCE_US`].
pub fn estimate_us(
    gpu: &Gpu,
    sms: u32,
    (m, n, k): (u64, u64, u64),
    (rows, cols): (u32, u32),
    s: u32,
    elem_bytes: u64,
) -> f64 {
    let (sms, s64) = (u64::from(sms.max(1)), u64::from(s.max(1)));
    let blocks = m.div_ceil(rows.max(1).into()) * n.div_ceil(cols.max(1).into());
    let units = blocks.saturating_mul(s64);
    let rounds = units.div_ceil(sms) as f64;
    let peak = if elem_bytes == 1 {
        gpu.peak_fp8_tflops
    } else {
        gpu.peak_bf16_tflops
    };
    let sm_flops = peak * 1e12 * PEAK_SHARE / f64::from(gpu.compute_units.max(1));
    let (r, c) = (f64::from(rows), f64::from(cols));
    let per_k = ((r + c) * elem_bytes as f64 / SM_BYTES_PER_S).max(2.0 * r * c / sm_flops);
    let unit = k as f64 / s64 as f64 * per_k;
    let dram = gpu.hbm_tbps * 1e12 * DRAM_SHARE;
    let bytes = ((m + n) * k * elem_bytes) as f64;
    let stream = bytes / dram.min(units.min(sms) as f64 * SM_BYTES_PER_S);
    let split = if s > 1 {
        (2 * s64 * m * n * 4) as f64 / dram + REDUCE_US * 1e-6
    } else {
        0.0
    };
    ((rounds * unit).max(stream) + split) * 1e6
}

/// The block and K slices for `m × n × k` (`m` ≤ [`MAX_ROWS`], operands of `elem_bytes`, K step
/// `k_step`) on `sms` SMs of `gpu`: the least [`estimate_us`] among [`BLOCKS`] × [`SPLITS`]
/// (slices of at least [`MIN_STEPS`] K steps), ties to the larger block, then the taller, then the
/// fewer slices.
pub fn choose(
    gpu: &Gpu,
    sms: u32,
    (m, n, k): (u64, u64, u64),
    k_step: u32,
    elem_bytes: u64,
) -> ((u32, u32), u32) {
    let steps = k.div_ceil(k_step.max(1).into());
    let mut best: Option<(f64, (u32, u32), u32)> = None;
    for &(rows, cols) in BLOCKS
        .iter()
        .filter(|b| (m > 64 || b.0 == 64) && (b.1 >= 64 || m <= NARROW_ROWS))
    {
        for s in SPLITS
            .into_iter()
            .filter(|&s| s == 1 || steps / u64::from(s) >= MIN_STEPS)
        {
            let t = estimate_us(gpu, sms, (m, n, k), (rows, cols), s, elem_bytes);
            let better = match best {
                None => true,
                Some((bt, (br, bc), bs)) => {
                    let key = |r: u32, c: u32, s: u32| {
                        (std::cmp::Reverse(r * c), std::cmp::Reverse(r), s)
                    };
                    t < bt || (t == bt && key(rows, cols, s) < key(br, bc, bs))
                }
            };
            if better {
                best = Some((t, (rows, cols), s));
            }
        }
    }
    best.map_or(((64, 128), 1), |(_, b, s)| (b, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fit run's best settings on the H200 (docs/performance.md, "gemm_fp8"): narrow blocks
    /// where B has few columns, a split only where K is long, 128-row blocks at 256 rows.
    #[test]
    fn picks_follow_the_fit_run() {
        let g = kittens_hw::gpu("h200").expect("catalog");
        let pick = |m, n, k| choose(g, 132, (m, n, k), 128, 1);
        // At M <= 32 (A in a box of M's rows) 64x32 and 64x48: 128 blocks stream B at N = 4096
        // and 6144 (cuBLASLt runs 128 CTAs at 16x4096x4096); at 64 rows 64x64.
        assert_eq!(pick(16, 4096, 4096), ((64, 32), 1));
        assert_eq!(pick(16, 6144, 4096), ((64, 48), 1));
        assert_eq!(pick(64, 4096, 4096), ((64, 64), 1));
        assert_eq!(pick(16, 28672, 4096), ((64, 128), 1));
        assert_eq!(pick(64, 4096, 14336), ((64, 64), 2));
        assert_eq!(pick(128, 14336, 4096), ((128, 128), 1));
        assert_eq!(pick(256, 8192, 8192), ((128, 128), 1));
        for (m, n, k) in [(16, 4096, 512), (1, 8, 128)] {
            let (_, s) = pick(m, n, k);
            assert_eq!(s, 1, "{m}x{n}x{k}: too few K steps to split");
        }
    }
}
