//! BF16 GEMM `C = A·Bᵀ` (A M×K, B N×K, C M×N bf16, fp32 accumulation), one kernel with a schedule per
//! target:
//!
//! - [`GemmSchedule::PingPong8`] ([`ping_pong`]): the 8-wave ping-pong of HipKittens E.1 (Fig. 21), the
//!   AMD schedule, with the next K step staged in LDS or in registers ([`Staging`]);
//! - [`GemmSchedule::Interleave4`] ([`interleave4`]): four waves, one per SIMD (HipKittens §3.3.2);
//! - [`GemmSchedule::ProducerConsumer`] ([`producer_consumer`]): warp-specialised for Hopper.
//!
//! This module holds what the three share: the configuration, the declarations of `m, n, k` and
//! `a, b, c`, the epilogue, and [`build`], which picks the schedule. Each schedule's module reads only
//! these.
//!
//! The FP8 GEMM is the same kernel: [`GemmTypes`] in the configuration names the element types (fp8
//! operands in the target's format, bf16 or f32 output) and the scales. The schedules take their operand
//! tiles' dtype and base shape from it and end in [`store_scaled`]; nothing else differs, so every
//! schedule, staging and grid order of the BF16 GEMM exists for FP8 too (`gemm_fp8` in the registry).

pub mod align;
mod interleave4;
pub mod ladder;
mod ping_pong;
pub mod problem;
mod producer_consumer;
pub mod shapes;
pub mod small_m;
pub mod split_k;

use crate::KernelError;
use kittens_hw::dtype::DType::{self, Bf16, F32};
use kittens_ir::{Access, Expr, GlobalId, GridOrder, Kernel, KernelBuilder, RegId, SlotFill};
use kittens_tile::BaseShape;

/// How the scales of an FP8 GEMM are laid out: `C = (sa ⊙ A)·(sb ⊙ B)ᵀ` computed as
/// `C[i][j] = sa[i]·sb[j]·Σ_k A[i][k]·B[j][k]` in fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scales {
    /// One f32 for A and one for B (tensors `scale_a`, `scale_b` of one element each).
    PerTensor,
    /// One f32 per row of A (`scale_a`, M elements) and per row of B, i.e. per column of C
    /// (`scale_b`, N elements).
    PerRowCol,
}

/// The element types of the GEMM: what makes the same tile program `gemm_bf16` or `gemm_fp8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmTypes {
    /// Operand dtype of A and B: bf16, or fp8 in the target's format (`Fp8E4m3`, OCP, on gfx950 and
    /// sm_90a; `Fp8E4m3Fnuz` on gfx942).
    pub input: DType,
    /// Dtype of C (bf16 or f32); the fp32 accumulators are rounded to it once, at the store.
    pub output: DType,
    /// Scales applied to the fp32 accumulators before the store; `None` for the plain BF16 GEMM.
    pub scales: Option<Scales>,
}

impl GemmTypes {
    pub const BF16: GemmTypes = GemmTypes {
        input: Bf16,
        output: Bf16,
        scales: None,
    };

    /// fp8 operands, per-tensor scales, bf16 output.
    pub fn fp8(input: DType) -> GemmTypes {
        GemmTypes {
            input,
            output: Bf16,
            scales: Some(Scales::PerTensor),
        }
    }

    /// The name the built kernel carries.
    pub fn kernel_name(&self) -> &'static str {
        if self.input.is_fp8() {
            "gemm_fp8"
        } else {
            "gemm_bf16"
        }
    }

    /// Base shape of the A and B register tiles: HipKittens' 16×32 bf16 (the CDNA4 16×16×32 MFMA's A,
    /// HipKittens E.1); for OCP fp8 the A operand of `v_mfma_f32_16x16x128_f8f6f4` (16×128, FP8-tutorial
    /// step 3); for FNUZ fp8 that of gfx942's `v_mfma_f32_16x16x32_fp8_fp8` (16×32).
    pub fn operand_base(&self) -> BaseShape {
        match self.input {
            DType::Fp8E4m3 | DType::Fp8E5m2 => BaseShape::new(16, 128),
            _ => BaseShape::S16X32,
        }
    }

    /// Checks the combination; the schedules call it first.
    fn check(&self, k_step: u32) -> Result<(), KernelError> {
        let bad = |why: String| {
            Err(KernelError::Config(format!(
                "{}: {why}",
                self.kernel_name()
            )))
        };
        if !matches!(self.input, Bf16) && !self.input.is_fp8() {
            return bad(format!("operands must be bf16 or fp8, got {}", self.input));
        }
        if !matches!(self.output, Bf16 | F32) {
            return bad(format!("output must be bf16 or f32, got {}", self.output));
        }
        let kb = self.operand_base().cols;
        if !k_step.is_multiple_of(kb) {
            return bad(format!(
                "k_step {k_step} must be a multiple of {kb}, the K of one {} base tile",
                self.input
            ));
        }
        Ok(())
    }
}

/// Which schedule the GEMM is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmSchedule {
    /// 8-wave ping-pong (HipKittens E.1), the AMD schedule.
    PingPong8,
    /// 4-wave interleave (HipKittens §3.3.2): one wave per SIMD mixing loads and matrix work.
    Interleave4,
    /// One producer warpgroup loading, two consumer warpgroups multiplying from shared memory
    /// (Hopper `wgmma` style; refused on AMD, whose MFMAs read registers only).
    ProducerConsumer,
}

/// Where the ping-pong GEMM keeps the next K step while the current one is multiplied (HipKittens E.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staging {
    /// Two LDS buffers per operand half, filled by async global→LDS loads two K steps ahead
    /// (MI355X, Fig. 21): 128 KiB at the seed's tiles.
    Lds,
    /// One LDS buffer per operand half; each wave loads its band of the next K step into registers
    /// and writes it to LDS once the buffer has been read (MI325X: "double buffer using the register
    /// file"): 64 KiB at the seed's tiles. Needs a block that is a multiple of 256.
    Registers,
}

/// How B is stored: the GEMM computes `C = A·Bᵀ` with B `N × K` (a linear layer's weight), or
/// `C = A·B` with B `K × N`, both row-major; each is read in place (no transposing pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BLayout {
    /// B is `N × K` (K contiguous): `C = A·Bᵀ`.
    #[default]
    Nk,
    /// B is `K × N` (N contiguous): `C = A·B`. The producer/consumer schedule only: its `wgmma` reads
    /// B N-major from shared memory (PTX ISA §9.7.15.5.1, transposed B); the AMD schedules' MFMAs take
    /// K-major register operands.
    Kn,
}

/// How A is stored: the GEMM reads A as `M × K` with K contiguous, or as the transpose of a row-major
/// `K × M` buffer (M contiguous: the backward's `dB = Aᵀ·dC` reads the forward's A so), in place either
/// way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ALayout {
    /// A is `M × K` (K contiguous).
    #[default]
    Mk,
    /// A is stored `K × M` (M contiguous). The producer/consumer schedule only, bf16 only: its `wgmma`
    /// reads A M-major from shared memory (the transpose-A immediate, PTX ISA §9.7.15.5.1), which fp8
    /// `wgmma` does not have; the AMD schedules' MFMAs take K-major register operands.
    Km,
}

/// Leading dimensions of a GEMM whose operands are slices of bigger row-major matrices: elements between
/// consecutive stored rows of A (`M × K`, or `K × M` with [`ALayout::Km`]), B (`N × K`, or `K × N`) and C.
/// Each is at least its stored row's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LeadingDims {
    pub a: usize,
    pub b: usize,
    pub c: usize,
}

/// Tile sizes; the defaults are HipKittens E.1's (256×256 block, K step 64).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmConfig {
    pub schedule: GemmSchedule,
    /// Rows and columns of C per block (the seed's `BLOCK_SIZE`); a multiple of 128. The
    /// producer/consumer schedule reads it as the block's columns only (a multiple of 16 up to 256; bf16 C
    /// stored through TMA needs 32 or a multiple of 64).
    pub block: u32,
    /// Rows of C per block in the producer/consumer schedule: 64, 128 or 256 (`producer_consumer`);
    /// the AMD schedules' blocks are square (`block`) and ignore it.
    pub block_rows: u32,
    /// Shared ring slots of the producer/consumer schedule (the AMD schedules' staging is `staging`).
    pub stages: u32,
    /// How B is stored.
    pub b_layout: BLayout,
    /// How A is stored.
    pub a_layout: ALayout,
    /// Whether the rows of A, B and C are `lda`, `ldb`, `ldc` elements apart (kernel parameters after
    /// `m, n, k`: operands that are slices of bigger matrices, read and written in place) rather than
    /// dense (the stored row's length).
    pub strided: bool,
    /// K per pipeline step (`K_STEP`); a multiple of 32.
    pub k_step: u32,
    pub remap: GridOrder,
    /// Where the next K step is staged; only the ping-pong schedule reads it.
    pub staging: Staging,
    /// Element types and scales (bf16 for `gemm_bf16`, fp8 for `gemm_fp8`).
    pub types: GemmTypes,
    /// Producer/consumer schedule: K steps each `wgmma` accumulator chain runs before its sum is
    /// added into a second fp32 accumulator and the chain restarts from zero (0: never, one chain over
    /// all of K). Hopper's fp8 `wgmma` does not keep full fp32 sums over a long chain (DeepGEMM's
    /// promotion, which cuBLASLt's default FP8 GEMM also does); the second accumulator costs as many
    /// registers as the first.
    pub promote: u32,
    /// Producer/consumer schedule: slices of K computed by separate blocks (1: none). Each writes its
    /// fp32 partial C to plane `s` of `c_partial[split_k, M, N]`; [`split_k::build_reduce`] sums the
    /// planes into C. Puts every SM to work where `M × N` has fewer blocks than SMs and K is long.
    pub split_k: u32,
    /// How the Hopper lowering fills the ring slots from A and B: TMA (the default), or the producer
    /// warpgroup's `cp.async` copies, for rows that start off 128-byte lines (K·2 bytes no multiple
    /// of 128), which TMA reads slowly and which would otherwise be copied into aligned rows first
    /// (`shapes::copies_misaligned`). The AMD schedules ignore it.
    pub loads: SlotFill,
    /// Producer/consumer schedule: consecutive row tiles run as thread-block clusters of this many
    /// (1: none, 2 or 4), which on Hopper fetch each B box once per cluster and multicast it
    /// (`kittens_ir::Grid::cluster`; cuBLAS's kernels run in pairs). The AMD schedules ignore it.
    pub cluster: u32,
    /// With split-K: the last block to finish each tile of C adds the slices' partials into C
    /// ([`split_k::Fixup`]: a hand-off, `kittens_ir::Stmt::LastArrival`) instead of a second
    /// launch ([`split_k::build_reduce`]): what a decode-sized GEMM pays for that launch is a few µs
    /// of 8-20 µs (docs/performance.md, "gemm_bf16").
    pub last_block_reduces: bool,
    /// Producer/consumer schedule, 64-row blocks: rows of A each block loads (8, 16 or 32; 0 or
    /// `block_rows`: the block's rows). The wgmma still reads the slot's 64 rows; the rows past `a_rows` are never
    /// loaded, so they feed only rows of C past M, which the store clips: valid where M ≤ `a_rows`
    /// (`GemmProblem` refuses a larger M). Why: a TMA box whose rows lie past M is filled with zeros
    /// row by row, and at a decode step's M that fill, not B, set the pace (docs/performance.md,
    /// "gemm_fp8": narrow blocks ran slower at 16 rows than at 64 with a 64-row box of A).
    pub a_rows: u32,
}

impl Default for GemmConfig {
    fn default() -> Self {
        // E.1: WGM = 8, chunk WGM·WGM, 8 XCDs.
        GemmConfig {
            schedule: GemmSchedule::PingPong8,
            block: 256,
            block_rows: 128,
            stages: 3,
            b_layout: BLayout::Nk,
            a_layout: ALayout::Mk,
            strided: false,
            k_step: 64,
            remap: GridOrder::XcdSwizzle {
                xcds: 8,
                window: 8,
                chunk: 64,
            },
            staging: Staging::Lds,
            types: GemmTypes::BF16,
            promote: 0,
            split_k: 1,
            loads: SlotFill::Tma,
            cluster: 1,
            last_block_reduces: false,
            a_rows: 0,
        }
    }
}

impl GemmConfig {
    /// The configuration for one target: the warp-specialised schedule on Hopper, the ping-pong on CDNA
    /// with E.1's 256×256 block and K step 64, staged in LDS where a double buffer of A and B fits the
    /// GPU's shared memory per block (gfx950's 160 KiB) and in registers where only one does (gfx942's
    /// 64 KiB, as HipKittens does on MI325X, HipKittens E.1); a K step of 32 in registers if even that
    /// does not fit.
    pub fn for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        if !gpu.arch.is_amd() {
            return GemmConfig {
                schedule: GemmSchedule::ProducerConsumer,
                ..Self::default()
            };
        }
        let d = Self::default();
        let fits = |&(staging, k_step): &(Staging, u32)| {
            let c = GemmConfig {
                staging,
                k_step,
                ..d
            };
            c.shared_bytes() <= gpu.shared_bytes_per_block
        };
        let (staging, k_step) = [(Staging::Lds, 64), (Staging::Registers, 64)]
            .into_iter()
            .find(fits)
            .unwrap_or((Staging::Registers, 32));
        GemmConfig {
            k_step,
            staging,
            remap: GridOrder::XcdSwizzle {
                xcds: gpu.xcds,
                window: 8,
                chunk: 64,
            },
            ..d
        }
    }

    /// Shared memory of the ping-pong kernel: A and B, two halves each of `block/2 × k_step` operands,
    /// in two ring slots with LDS staging and one with register staging.
    pub fn shared_bytes(&self) -> u32 {
        let slots = match self.staging {
            Staging::Lds => 2,
            Staging::Registers => 1,
        };
        2 * 2 * slots * (self.block / 2) * self.k_step * self.types.input.bytes()
    }

    /// The FP8 GEMM for one target: the BF16 GEMM's schedule ([`Self::for_gpu`]) with fp8 operands in
    /// the target's format, per-tensor scales, bf16 output. On Hopper: K step 128 (128-byte rows, as
    /// the BF16 GEMM's 64) and a grid order in groups of 16 tile-rows. On AMD: a K step of 128 with the LDS double
    /// buffer where it fits (gfx950: 128 KiB, FP8-tutorial step 3's K = 128 per MFMA); else, as the BF16
    /// GEMM on MI325X (HipKittens E.1), the next K step staged in registers with a K step of 64 (gfx942:
    /// 32 of 64 KiB). On gfx942 the LDS double buffer at K step 64 also fits, but its direct-to-LDS loads
    /// (one buffer descriptor and M0 base per load) need 106 SGPRs and spill 4 with both clangs, where
    /// register staging needs 74 and spills none; register staging at K step 128 spills VGPRs.
    pub fn fp8_for_gpu(gpu: &kittens_hw::Gpu) -> Self {
        let input = if gpu.arch == kittens_hw::Arch::Cdna3 {
            DType::Fp8E4m3Fnuz
        } else {
            DType::Fp8E4m3
        };
        let base = Self::for_gpu(gpu);
        let with = |k_step, staging| GemmConfig {
            k_step,
            staging,
            types: GemmTypes::fp8(input),
            ..base
        };
        if !gpu.arch.is_amd() {
            // Groups of 16 tile-rows: on the H100 at or above the 8 of the BF16 GEMM by the ratio to
            // cuBLASLt in every paired run at 8192 and 16384 (docs/performance.md, "gemm_fp8").
            // Promotion after every K step of 128 (four k32 wgmmas), as DeepGEMM does: one chain
            // over all of K lost accuracy past cuBLASLt's at 16384³ (docs/performance.md). Its second
            // accumulator leaves room for 192 columns per consumer warpgroup (2 × 96 floats at 240
            // registers), not 256; four 40 KiB stages fit beside the 48 KiB of C slabs.
            return GemmConfig {
                remap: GridOrder::GroupM { window: 16 },
                block: 192,
                stages: 4,
                promote: 1,
                ..with(128, base.staging)
            };
        }
        [(128, Staging::Lds), (64, Staging::Registers)]
            .into_iter()
            .map(|(ks, st)| with(ks, st))
            .find(|c| {
                c.shared_bytes() <= gpu.shared_bytes_per_block
                    && c.k_step % c.types.operand_base().cols == 0
            })
            .unwrap_or_else(|| with(128, Staging::Registers))
    }

    /// The Hopper FP8 GEMM for a problem of `m` rows: `base` ([`Self::fp8_for_gpu`], perhaps with
    /// another width) with 64-row blocks where `m ≤ 64` (one consumer warpgroup: a decode step's
    /// 16 rows computed in 64, not 128, A loaded in a box of M's rows, [`Self::a_rows_for`], and
    /// the ring deepened to the stages that fit, which is what streams B faster), else `base`'s rows; the ring stages that fit beside the C slabs either way
    /// (an fp8 stage of K step 128 has the bytes of a bf16 one of K step 64).
    pub fn fp8_for_shape(base: GemmConfig, gpu: &kittens_hw::Gpu, m: u64) -> GemmConfig {
        let rows = if m <= 64 { 64 } else { base.block_rows };
        let tile = shapes::HopperTile {
            rows,
            cols: base.block,
        };
        GemmConfig {
            block_rows: rows,
            stages: tile.stages(gpu),
            a_rows: Self::a_rows_for(rows, m),
            ..base
        }
    }

    /// Rows of A a 64-row block loads for a problem of `m` rows ([`GemmConfig::a_rows`]): the fewest
    /// of 8, 16 and 32 that hold M, or 0 (all 64) above 32 rows or for taller blocks.
    pub fn a_rows_for(block_rows: u32, m: u64) -> u32 {
        match m {
            _ if block_rows != 64 => 0,
            0..=8 => 8,
            9..=16 => 16,
            17..=32 => 32,
            _ => 0,
        }
    }

    /// `base` (a GPU's configuration, [`Self::for_gpu`] or [`Self::fp8_for_gpu`]) with the 4-wave
    /// interleave: its tiles, LDS double buffer (the interleave stages in LDS only) and the largest K step
    /// of `base.k_step` and its halves that fits the GPU's shared memory per block in whole operand base
    /// tiles (gfx950: bf16 64, fp8 128; gfx942's 64 KiB: bf16 32, fp8 64).
    pub fn interleave4(base: GemmConfig, gpu: &kittens_hw::Gpu) -> Result<Self, KernelError> {
        let kb = base.types.operand_base().cols;
        let with = |k_step| GemmConfig {
            schedule: GemmSchedule::Interleave4,
            staging: Staging::Lds,
            k_step,
            ..base
        };
        std::iter::successors(Some(base.k_step), |k| Some(k / 2))
            .take_while(|&k| k >= kb && k.is_multiple_of(kb))
            .map(with)
            .find(|c| c.shared_bytes() <= gpu.shared_bytes_per_block)
            .ok_or_else(|| {
                KernelError::Config(format!(
                    "{} (interleave): no K step of {} or its halves fits {} B of shared memory on {}",
                    base.types.kernel_name(),
                    base.k_step,
                    gpu.shared_bytes_per_block,
                    gpu.name
                ))
            })
    }

    /// The default FP8 configuration (the CPU interpreter's): gfx950's, OCP e4m3.
    pub fn fp8_default() -> Self {
        GemmConfig {
            k_step: 128,
            types: GemmTypes::fp8(DType::Fp8E4m3),
            ..Self::default()
        }
    }

    /// The smallest instance of the same schedule, for fast tests.
    pub fn small() -> Self {
        GemmConfig {
            block: 128,
            k_step: 32,
            ..Self::default()
        }
    }
}

/// The declared interface: `k` (the K extent), tensors `a, b, c`, the scales if any, and the K slice
/// of a split-K block.
pub(crate) struct Decl {
    pub kd: Expr,
    pub g: [GlobalId; 3],
    pub scales: Option<[GlobalId; 2]>,
    /// With split-K: the block's slice of K (grid coordinate 2), which is also its plane of
    /// `c_partial`.
    pub split: Option<Expr>,
    /// With [`GemmConfig::last_block_reduces`]: C and the tiles' arrival counters.
    pub fixup: Option<split_k::Fixup>,
}

/// Declares `m, n, k` (and `lda, ldb, ldc` with [`GemmConfig::strided`]), the tensors `a` (M×K, or
/// K×M with [`ALayout::Km`]), `b` (N×K, or K×N with [`BLayout::Kn`]), the f32 scales `scale_a`,
/// `scale_b` when the types have them, and `c` (M×N), in that order and in the configured dtypes, and
/// a grid of `bm × bn` tiles. Each operand's rows are its leading dimension apart, or dense.
///
/// Each scale is declared with C's logical shape (M×N) and strides that make it broadcast: `(0, 0)` for
/// a per-tensor scale (one element serves every position), `(1, 0)` for one per row of A, `(0, 1)` for
/// one per row of B. The epilogue then reads it as an ordinary tile shaped like the accumulator.
///
/// With `split_k > 1` the output is `c_partial[split_k, M, N]` in f32 instead of C (each K slice's
/// scaled partial sums, added by [`split_k::build_reduce`]) and the grid gains a third extent, the K
/// slice, fastest in the launch order (the slices of one block of C run side by side).
pub(crate) fn declare(k: &mut KernelBuilder, cfg: &GemmConfig, bm: u32, bn: u32) -> Decl {
    let (types, split_k) = (&cfg.types, cfg.split_k);
    let (m, n, kd) = (k.param("m"), k.param("n"), k.param("k"));
    // Leading dimensions: parameters when strided, else each stored row's length.
    let lds = cfg
        .strided
        .then(|| ["lda", "ldb", "ldc"].map(|name| k.param(name)));
    let ld = |i: usize, dense: &Expr| lds.as_ref().map_or_else(|| dense.clone(), |l| l[i].clone());
    let mut mat = |name, dt, (r, c): (&Expr, &Expr), ld: Expr, acc| {
        let dims = [("r", r.clone()), ("c", c.clone())];
        k.global_strided(name, dt, &dims, vec![ld, Expr::c(1)], acc)
    };
    let a = match cfg.a_layout {
        ALayout::Mk => mat("a", types.input, (&m, &kd), ld(0, &kd), Access::Read),
        ALayout::Km => mat("a", types.input, (&kd, &m), ld(0, &m), Access::Read),
    };
    let b = match cfg.b_layout {
        BLayout::Nk => mat("b", types.input, (&n, &kd), ld(1, &kd), Access::Read),
        BLayout::Kn => mat("b", types.input, (&kd, &n), ld(1, &n), Access::Read),
    };
    let ldc = ld(2, &n);
    let scales = types.scales.map(|mode| {
        let (sa, sb) = match mode {
            Scales::PerTensor => ([0, 0], [0, 0]),
            Scales::PerRowCol => ([1, 0], [0, 1]),
        };
        let dims = [("r", m.clone()), ("c", n.clone())];
        let mut scale = |name, st: [i64; 2]| {
            let strides = st.iter().map(|&s| Expr::c(s)).collect();
            k.global_strided(name, F32, &dims, strides, Access::Read)
        };
        [scale("scale_a", sa), scale("scale_b", sb)]
    });
    // The output last: inputs first, in the order a caller passes them.
    let mut extents = vec![m.ceil_div(bm as i64), n.ceil_div(bn as i64)];
    // Reduced by its last blocks, the split GEMM writes C itself: C first (the caller's output), then
    // the partials and the counters (scratch).
    let fixed = (split_k > 1 && cfg.last_block_reduces).then(|| {
        let dims = [("r", m.clone()), ("c", n.clone())];
        k.global_strided(
            "c",
            types.output,
            &dims,
            vec![ldc.clone(), Expr::c(1)],
            Access::Write,
        )
    });
    let (c, split, remap) = if split_k > 1 {
        let dims = [
            ("s", Expr::c(i64::from(split_k))),
            ("r", m.clone()),
            ("c", n.clone()),
        ];
        let access = if cfg.last_block_reduces {
            Access::ReadWrite
        } else {
            Access::Write
        };
        let c = k.global(split_k::PARTIAL, F32, &dims, access);
        extents.push(Expr::c(i64::from(split_k)));
        (c, Some(k.block(2)), GridOrder::RowMajor)
    } else {
        let dims = [("r", m.clone()), ("c", n.clone())];
        let strides = vec![ldc.clone(), Expr::c(1)];
        (
            k.global_strided("c", types.output, &dims, strides, Access::Write),
            None,
            cfg.remap,
        )
    };
    let fixup = fixed.map(|c| split_k::Fixup::declare(k, c, (&m, &n), (bm, bn)));
    let g = [a, b, c];
    k.grid(extents, remap);
    Decl {
        kd,
        g,
        scales,
        split,
        fixup,
    }
}

/// Stores accumulator `acc` as the `(ti, tj)`-th `rows × cols` tile of C (of the block's plane of
/// `c_partial` with split-K), multiplied first by the scales of that tile when the GEMM has them.
/// `scratch` is an f32 tile shaped like `acc` (dead operand registers serve: the scales are read once,
/// after the K loop).
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_scaled(
    k: &mut KernelBuilder,
    decl: &Decl,
    scratch: Option<RegId>,
    acc: RegId,
    rows: u32,
    cols: u32,
    ti: Expr,
    tj: Expr,
) {
    if let (Some(scales), Some(s)) = (decl.scales, scratch) {
        for g in scales {
            k.load_global(s, k.gtile(g, rows, cols, ti.clone(), tj.clone()));
            k.mul(acc, acc, s);
        }
    }
    let dst = match &decl.split {
        Some(s) => {
            let origin = vec![s.clone(), ti * i64::from(rows), tj * i64::from(cols)];
            k.gview(decl.g[2], origin, 1, 2, rows, cols)
        }
        None => k.gtile(decl.g[2], rows, cols, ti, tj),
    };
    k.store(dst, acc);
}

/// Parameter order of the built kernel: `m, n, k`; tensors `a, b, c`.
pub fn build(cfg: &GemmConfig) -> Result<Kernel, KernelError> {
    cfg.types.check(cfg.k_step)?;
    if cfg.b_layout == BLayout::Kn && cfg.schedule != GemmSchedule::ProducerConsumer {
        return Err(KernelError::Config(format!(
            "gemm_bf16: B as K x N is built for the producer/consumer schedule, not {:?}",
            cfg.schedule
        )));
    }
    if cfg.a_layout == ALayout::Km && cfg.schedule != GemmSchedule::ProducerConsumer {
        return Err(KernelError::Config(format!(
            "{}: A stored K x M (transposed) is built for the producer/consumer schedule, not {:?} \
             (its MFMAs read K-major register operands)",
            cfg.types.kernel_name(),
            cfg.schedule
        )));
    }
    if cfg.staging == Staging::Registers && cfg.schedule != GemmSchedule::PingPong8 {
        return Err(KernelError::Config(format!(
            "gemm_bf16: register staging is built for the ping-pong schedule, not {:?}",
            cfg.schedule
        )));
    }
    if cfg.last_block_reduces && cfg.split_k < 2 {
        return Err(KernelError::Config(format!(
            "{}: last_block_reduces needs split_k of at least 2, got {}",
            cfg.types.kernel_name(),
            cfg.split_k
        )));
    }
    if cfg.schedule != GemmSchedule::ProducerConsumer && (cfg.split_k != 1 || cfg.promote != 0) {
        return Err(KernelError::Config(format!(
            "{}: split-K and accumulator promotion are built for the producer/consumer schedule, not {:?}",
            cfg.types.kernel_name(),
            cfg.schedule
        )));
    }
    match cfg.schedule {
        GemmSchedule::PingPong8 => ping_pong::build(cfg),
        GemmSchedule::Interleave4 => interleave4::build(cfg),
        GemmSchedule::ProducerConsumer => producer_consumer::build(cfg),
    }
}
