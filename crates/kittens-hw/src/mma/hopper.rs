//! NVIDIA Hopper (`sm_90a`) fragments: `mma.sync.aligned.m16n8k16` (bf16) and the `wgmma`
//! m64nNk16 accumulator.
//!
//! Sources: PTX ISA 8.x, §9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point
//! type" and §9.7.15.5.1 "Register Fragments" of `wgmma.mma_async` (figures "WGMMA .m64nNk16
//! register fragment layout for accumulator matrix D" and "... for matrix A").
//!
//! Both are built from one 8×8 "quad" tile: a warp's lane `l` is `groupID = l >> 2` (a row of the
//! quad) and `threadID_in_group = l mod 4` (a pair of adjacent columns). An m16×k16 fragment stacks
//! 2×2 of those tiles, row block first; a warpgroup gives warp `w` rows `16w..16w+15`.

use super::{Family, MmaError, MmaInstr, Operand};
use crate::dtype::DType;
use crate::Arch;

/// `(row, col)` inside a column-major arrangement of 8×8 quads: `slot` pairs `2q, 2q+1` share one
/// 32-bit register of quad `q`; quads go down `rows_of_quads` first, then across.
fn quads(lane: u32, slot: u32, rows_of_quads: u32) -> (u32, u32) {
    let (group, tig) = ((lane % 32) >> 2, lane % 4);
    let quad = slot / 2;
    let row = (quad % rows_of_quads) * 8 + group;
    let col = (quad / rows_of_quads) * 8 + 2 * tig + slot % 2;
    (row, col)
}

/// `mma.m16n8k16`: A (16×16) is 2×2 quads, a0..a7 (rows g, g+8, then columns +8); B (16×8) is
/// two quads along K with the pair along K (`row = 2t + (i&1) + 8·(i>>1)`, `col = g`); C/D
/// (16×8, f32) is two quads down the rows.
pub(super) fn mma_sync_element(op: Operand, lane: u32, slot: u32) -> (u32, u32) {
    match op {
        Operand::A => quads(lane, slot, 2),
        Operand::B => {
            // B is stored "col": the PTX figure is A's quad pattern on Bᵀ (N×K), one quad row.
            let (n, k) = quads(lane, slot, 1);
            (k, n)
        }
        Operand::D => quads(lane, slot, 2),
    }
}

/// `wgmma` m64nNk16 (128 threads): warp `w = lane / 32` owns rows `16w..16w+15`; within a warp
/// the accumulator repeats the m16n8 C/D pattern for each 8-column block (d0..d3 for columns
/// 0..7, d4..d7 for 8..15, ...). A, when it comes from registers, is the `mma.m16n8k16` A
/// fragment per warp. B has no register layout (shared memory only).
pub(super) fn wgmma_element(op: Operand, lane: u32, slot: u32) -> (u32, u32) {
    let (row, col) = quads(lane, slot, 2);
    debug_assert!(op != Operand::B, "wgmma B lives in shared memory");
    (16 * (lane / 32) + row, col)
}

/// The `wgmma.m64nNk16` accumulator map for any legal N (a multiple of 8 up to 256).
pub fn wgmma_accumulator(n: u32) -> Result<Vec<super::Entry>, MmaError> {
    if n == 0 || !n.is_multiple_of(8) || n > 256 {
        return Err(MmaError::BadWgmmaN(n));
    }
    let instr = wgmma("wgmma.m64nNk16", n);
    instr.try_map(Operand::D)
}

const fn wgmma(name: &'static str, n: u32) -> MmaInstr {
    MmaInstr {
        name,
        arch: Arch::Hopper,
        m: 64,
        n,
        k: 16,
        blocks: 1,
        a_dtype: DType::Bf16,
        b_dtype: DType::Bf16,
        acc_dtype: DType::F32,
        lanes: 128,
        flops: 2 * 64 * (n as u64) * 16,
        cycles: None,
        family: Family::Wgmma,
        source: "PTX ISA §9.7.15.5.1 wgmma register fragments (accumulator D; A from registers)",
        note: "B always comes from shared memory through a descriptor; A may too",
    }
}

pub(super) const HOPPER: [MmaInstr; 3] = [
    MmaInstr {
        name: "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        arch: Arch::Hopper,
        m: 16,
        n: 8,
        k: 16,
        blocks: 1,
        a_dtype: DType::Bf16,
        b_dtype: DType::Bf16,
        acc_dtype: DType::F32,
        lanes: 32,
        flops: 2 * 16 * 8 * 16,
        cycles: None,
        family: Family::MmaSync,
        source: "PTX ISA §9.7.14.5.8 matrix fragments for mma.m16n8k16 (floating point)",
        note: "",
    },
    wgmma("wgmma.m64n256k16.f32.bf16.bf16", 256),
    wgmma("wgmma.m64n128k16.f32.bf16.bf16", 128),
];
