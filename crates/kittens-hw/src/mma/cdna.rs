//! AMD MFMA maps (CDNA3 `gfx942`, CDNA4 `gfx950`), one closed form for every shape.
//!
//! How AMD's Matrix Instruction Calculator describes a single-block MFMA on a wave of 64 lanes:
//! - A (M×K): lane `l` holds row `i = l mod M`; the `64 / M` lane groups (`l div M`) split K.
//! - B (K×N): the same with column `j = l mod N`.
//! - D (M×N): lane `l` holds column `j = l mod N`; its accumulator registers come in groups of
//!   four consecutive rows, and the `64 / N` lane groups take turns row-group by row-group.
//!
//! All three are one pattern, [`spread`]: a lane's elements form runs of `run` consecutive
//! indices along the reduced dimension; run `r` of lane group `g` starts at `(r·G + g)·run`
//! where `G` is the number of lane groups. For A and B the run is the `k_run` of the instruction
//! (the whole per-lane K on CDNA3, 8 bf16 = 128 bits on CDNA4 bf16, 16 fp8 = 128 bits for the
//! CDNA4 `f8f6f4` shapes); for D it is 4.
//!
//! Sources: CDNA3 entries are tested entry for entry against the calculator's output
//! (`tests/data/cdna3_mfma_layouts.json`, calculator commit 2ef91896). The CDNA4 fp8
//! 16×16×128 map is the one stated in FP8-tutorial step 6 (`k_chunk0 = 16·(lane>>4)`, `k_chunk1 =
//! k_chunk0 + 64`, 16 fp8 each); 32×32×64 applies the same two-half rule with two lane groups.
//! The CDNA4 bf16 maps equal IREE's `getSingleSubgroupLayout` for `MFMA_F32_16x16x32_BF16` /
//! `MFMA_F32_32x32x16_BF16` (IREEGPUAttrs.cpp: 8 consecutive K per lane, lane groups of M step K
//! by 8), and their register widths those of LLVM's `llvm/test/MC/AMDGPU/mai-gfx950.s`; see
//! `tests/mma_cdna4.rs`. IREE gives the f8f6f4 shapes one contiguous run of 32 K per lane
//! instead; that differs from FP8-tutorial by a K permutation shared by A and B, so both compute
//! the same unscaled product (the test checks exactly that).

use super::{Family, MmaInstr, Operand};
use crate::dtype::DType;
use crate::Arch;

/// Consecutive accumulator rows per register group (calculator: "D[4i..4i+3]" blocks).
const ACC_ROWS: u32 = 4;

/// Wave width on CDNA (HipKittens §2.1).
const WAVE: u32 = 64;

/// (index across lanes, index along the reduced / row dimension) of `slot` in `lane`.
fn spread(lane: u32, slot: u32, width: u32, lanes: u32, run: u32) -> (u32, u32) {
    let groups = lanes / width;
    let across = lane % width;
    let along = ((slot / run) * groups + lane / width) * run + slot % run;
    (across, along)
}

pub(super) fn element(
    instr: &MmaInstr,
    k_run: u32,
    op: Operand,
    lane: u32,
    slot: u32,
) -> (u32, u32) {
    match op {
        Operand::A => spread(lane, slot, instr.m, instr.lanes, k_run),
        Operand::B => {
            let (j, k) = spread(lane, slot, instr.n, instr.lanes, k_run);
            (k, j)
        }
        Operand::D => {
            let (j, i) = spread(lane, slot, instr.n, instr.lanes, ACC_ROWS);
            (i, j)
        }
    }
}

/// Builds one single-block MFMA entry; flops follow from the shape.
#[allow(clippy::too_many_arguments)]
const fn mfma(
    name: &'static str,
    arch: Arch,
    (m, n, k): (u32, u32, u32),
    ab: DType,
    k_run: u32,
    cycles: u32,
    source: &'static str,
    note: &'static str,
) -> MmaInstr {
    MmaInstr {
        name,
        arch,
        m,
        n,
        k,
        blocks: 1,
        a_dtype: ab,
        b_dtype: ab,
        acc_dtype: DType::F32,
        lanes: WAVE,
        flops: 2 * (m as u64) * (n as u64) * (k as u64),
        cycles: Some(cycles),
        family: Family::Mfma { k_run },
        source,
        note,
    }
}

/// Per-lane K of a CDNA3 shape: `M·K / 64`, all of it one run.
const fn whole(m: u32, k: u32) -> u32 {
    m * k / WAVE
}

const CDNA3_SRC: &str =
    "AMD Matrix Instruction Calculator, CDNA3 (layouts and 'Execution cycles'); \
     tested against tests/data/cdna3_mfma_layouts.json";
const FNUZ: &str = "CDNA3 fp8 is the FNUZ variant of E4M3 (bias 8, no -0, no inf)";

/// CDNA3 (`gfx942`): the shapes HipKittens §3 and MI300X-attn use, plus the two f32-input shapes the
/// oracle also lists.
pub(super) const CDNA3: [MmaInstr; 8] = [
    mfma(
        "v_mfma_f32_16x16x16_bf16",
        Arch::Cdna3,
        (16, 16, 16),
        DType::Bf16,
        whole(16, 16),
        16,
        CDNA3_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_32x32x8_bf16",
        Arch::Cdna3,
        (32, 32, 8),
        DType::Bf16,
        whole(32, 8),
        32,
        CDNA3_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_16x16x16_f16",
        Arch::Cdna3,
        (16, 16, 16),
        DType::F16,
        whole(16, 16),
        16,
        CDNA3_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_32x32x8_f16",
        Arch::Cdna3,
        (32, 32, 8),
        DType::F16,
        whole(32, 8),
        32,
        CDNA3_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_16x16x32_fp8_fp8",
        Arch::Cdna3,
        (16, 16, 32),
        DType::Fp8E4m3Fnuz,
        whole(16, 32),
        16,
        CDNA3_SRC,
        FNUZ,
    ),
    mfma(
        "v_mfma_f32_32x32x16_fp8_fp8",
        Arch::Cdna3,
        (32, 32, 16),
        DType::Fp8E4m3Fnuz,
        whole(32, 16),
        32,
        CDNA3_SRC,
        FNUZ,
    ),
    mfma(
        "v_mfma_f32_16x16x4_f32",
        Arch::Cdna3,
        (16, 16, 4),
        DType::F32,
        whole(16, 4),
        32,
        CDNA3_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_16x16x8_xf32",
        Arch::Cdna3,
        (16, 16, 8),
        DType::F32,
        whole(16, 8),
        16,
        CDNA3_SRC,
        "xf32: f32 registers, multiplied at reduced (tf32-like) precision",
    ),
];

const CDNA4_BF16_SRC: &str = "IREE getSingleSubgroupLayout (IREEGPUAttrs.cpp) for MFMA_F32_16x16x32_BF16 / \
     32x32x16_BF16: 8 consecutive K per lane; register widths per LLVM test/MC/AMDGPU/mai-gfx950.s. \
     Cycles: flops / (MI355X bf16 peak per SIMD per clock), CDNA4 white paper";
const CDNA4_F8_SRC: &str = "FP8-tutorial step 6 (16x16x128: K chunks 16*(lane>>4) and +64, 16 fp8 each); \
     32x32x64 by the same two-half rule with 2 lane groups; register widths per LLVM \
     test/MC/AMDGPU/mai-gfx950.s. Cycles: flops / (MI355X fp8 peak per SIMD per clock), CDNA4 white paper";
const OCP: &str =
    "CDNA4 f8f6f4 with both operand formats fp8 E4M3 (OCP FN); scale operands left at 1";

const CDNA4_KEPT_SRC: &str =
    "CDNA3's instruction kept by CDNA4: the same encoding (VOP3P-MAI opcode 0x61; LLVM assembles \
     it for gfx950 and gfx942 to the same bytes) and so the same operation and operand layout, \
     the AMD Matrix Instruction Calculator's CDNA3 map (tests/data/cdna3_mfma_layouts.json). \
     Cycles: CDNA3's figure, taken as unchanged (no CDNA4 statement of it here)";

/// CDNA4 (`gfx950`): the double-rate bf16 shapes, the `f8f6f4` shapes with fp8 operands, and
/// CDNA3's 16×16×16 bf16 form, which CDNA4 keeps: the paged decode's 16-key steps multiply P·V
/// with K = 16. It comes after the 16×16×32 form so that a 16×32 tile's product finds that one
/// first (one instruction instead of two).
pub(super) const CDNA4: [MmaInstr; 5] = [
    mfma(
        "v_mfma_f32_16x16x32_bf16",
        Arch::Cdna4,
        (16, 16, 32),
        DType::Bf16,
        8,
        16,
        CDNA4_BF16_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_32x32x16_bf16",
        Arch::Cdna4,
        (32, 32, 16),
        DType::Bf16,
        8,
        32,
        CDNA4_BF16_SRC,
        "",
    ),
    mfma(
        "v_mfma_f32_16x16x128_f8f6f4",
        Arch::Cdna4,
        (16, 16, 128),
        DType::Fp8E4m3,
        16,
        32,
        CDNA4_F8_SRC,
        OCP,
    ),
    mfma(
        "v_mfma_f32_32x32x64_f8f6f4",
        Arch::Cdna4,
        (32, 32, 64),
        DType::Fp8E4m3,
        16,
        64,
        CDNA4_F8_SRC,
        OCP,
    ),
    mfma(
        "v_mfma_f32_16x16x16_bf16",
        Arch::Cdna4,
        (16, 16, 16),
        DType::Bf16,
        whole(16, 16),
        16,
        CDNA4_KEPT_SRC,
        "",
    ),
];
