//! Decoding gfx9 machine code (CDNA3 ISA guide and CDNA4 ISA guide, "Microcode Formats")
//! into [`Instr`]: one flat record per instruction, operands kept as the ISA's 9-bit source codes
//! (0-101 SGPRs, 106/107 VCC, 124 M0, 126/127 EXEC, 128-208 integer constants, 240-248 float
//! constants, 249 SDWA, 255 literal, 256-511 VGPRs) so the executor reads them the way the hardware
//! does. The text form ([`Instr::text`]) follows LLVM's printer so it can be compared with the
//! compiler's own listing.

mod memory;
mod ops;
mod print;
mod scalar;
mod vector;

pub use ops::{Fam, Op};

use crate::SimError;
use kittens_hw::Arch;

/// Source-operand code of the literal constant that follows the instruction.
pub const LITERAL: u16 = 255;
/// Source-operand code announcing an SDWA dword.
pub const SDWA: u16 = 249;
/// First VGPR in the 9-bit operand space.
pub const VGPR0: u16 = 256;
/// Operand codes of named scalar registers.
pub const VCC_LO: u16 = 106;
pub const M0: u16 = 124;
pub const EXEC_LO: u16 = 126;
pub const SCC: u16 = 253;
/// "No operand" (an absent `saddr`, an unused source).
pub const NONE: u16 = 0xffff;

/// Which encoding an instruction used (a VOP2 operation may come as VOP2, VOP3 or SDWA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Enc {
    Sop2,
    Sopk,
    Sop1,
    Sopc,
    Sopp,
    Smem,
    Vop1,
    Vop2,
    Vopc,
    Vop3,
    Vop3p,
    Sdwa,
    Ds,
    Mubuf,
    Global,
}

/// The SDWA dword (CDNA3 ISA guide, "Microcode Formats": SDWA): sub-dword selects of the sources and destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sdwa {
    pub dst_sel: u8,
    pub dst_unused: u8,
    pub src0_sel: u8,
    pub src1_sel: u8,
    pub src0_sext: bool,
    pub src1_sext: bool,
    pub src0_neg: bool,
    pub src1_neg: bool,
    pub src0_abs: bool,
    pub src1_abs: bool,
    pub clamp: bool,
}

/// One decoded instruction.
#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    /// Byte offset in the kernel's code.
    pub offset: u32,
    /// Length in bytes (4, 8 or 12 with a literal).
    pub size: u8,
    pub op: Op,
    pub enc: Enc,
    /// Destination: an operand code (scalar or `VGPR0 + n`), or [`NONE`].
    pub dst: u16,
    /// Second destination: VOP3b carry/scale SGPRs, a VOPC's e64 mask destination.
    pub sdst: u16,
    /// Sources 0-2 as operand codes (memory: see the family decoders for the roles).
    pub src: [u16; 3],
    pub literal: u32,
    /// Immediate: SOPK/SOPP simm16, SMEM/DS/MUBUF/GLOBAL offset, bitop3 table.
    pub imm: i32,
    /// Input modifiers, one bit per source.
    pub neg: u8,
    pub abs: u8,
    pub neg_hi: u8,
    pub op_sel: u8,
    pub op_sel_hi: u8,
    pub clamp: bool,
    pub omod: u8,
    /// MFMA: cbsz, abid, blgp; which of A, B, C/D are AGPRs (bits 0, 1, 2).
    pub cbsz: u8,
    pub abid: u8,
    pub blgp: u8,
    pub acc: u8,
    pub sdwa: Option<Sdwa>,
    /// Memory flags.
    pub offen: bool,
    pub idxen: bool,
    pub lds: bool,
    pub sc0: bool,
    pub sc1: bool,
    pub nt: bool,
}

impl Instr {
    fn new(offset: u32, op: Op, enc: Enc) -> Instr {
        Instr {
            offset,
            size: 4,
            op,
            enc,
            dst: NONE,
            sdst: NONE,
            src: [NONE; 3],
            literal: 0,
            imm: 0,
            neg: 0,
            abs: 0,
            neg_hi: 0,
            op_sel: 0,
            op_sel_hi: 0,
            clamp: false,
            omod: 0,
            cbsz: 0,
            abid: 0,
            blgp: 0,
            acc: 0,
            sdwa: None,
            offen: false,
            idxen: false,
            lds: false,
            sc0: false,
            sc1: false,
            nt: false,
        }
    }

    /// The LLVM-style assembly text (branch targets as `pc+N` byte offsets in the kernel code).
    pub fn text(&self) -> String {
        print::text(self)
    }

    /// Absolute code offset of a branch's target.
    pub fn branch_target(&self) -> Option<i64> {
        matches!(
            self.op,
            Op::SBranch
                | Op::SCbranchScc0
                | Op::SCbranchScc1
                | Op::SCbranchVccz
                | Op::SCbranchVccnz
                | Op::SCbranchExecz
                | Op::SCbranchExecnz
        )
        .then(|| self.offset as i64 + 4 + 4 * self.imm as i64)
    }
}

/// A cursor over the code bytes.
pub(crate) struct Words<'a> {
    pub code: &'a [u8],
    pub at: usize,
}

impl Words<'_> {
    pub fn word(&self, i: usize) -> Result<u32, SimError> {
        let o = self.at + 4 * i;
        let b = self
            .code
            .get(o..o + 4)
            .ok_or(SimError::Truncated { offset: self.at })?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

fn unknown(arch: Arch, offset: usize, what: String, word: u32) -> SimError {
    SimError::UnknownInstruction {
        target: arch.target(),
        offset,
        what,
        word,
    }
}

pub(crate) fn lookup(
    fam: Fam,
    code: u16,
    arch: Arch,
    w: &Words,
    word: u32,
) -> Result<Op, SimError> {
    Op::lookup(fam, code, arch)
        .ok_or_else(|| unknown(arch, w.at, format!("{fam:?} opcode {code:#x}"), word))
}

/// Decode one instruction at `at`.
pub fn decode_one(code: &[u8], at: usize, arch: Arch) -> Result<Instr, SimError> {
    let w = Words { code, at };
    let w0 = w.word(0)?;
    let offset = u32::try_from(at).map_err(|_| SimError::Truncated { offset: at })?;
    let mut i = match w0 >> 30 {
        0b10 => scalar::decode(&w, w0, offset, arch)?,
        0b00 | 0b01 => vector::decode_vop(&w, w0, offset, arch)?,
        _ => match w0 >> 26 {
            0b110000 => scalar::decode_smem(&w, w0, offset, arch)?,
            0b110100 => vector::decode_vop3(&w, w0, offset, arch)?,
            0b110110 => memory::decode_ds(&w, w0, offset, arch)?,
            0b110111 => memory::decode_flat(&w, w0, offset, arch)?,
            0b111000 => memory::decode_mubuf(&w, w0, offset, arch)?,
            _ => return Err(unknown(arch, at, format!("encoding {:#04x}", w0 >> 26), w0)),
        },
    };
    // A literal source adds one dword (SOP*/VOP1/VOP2/VOPC only; VOP3 on gfx9 has none).
    if i.op.has_constant_k()
        || i.src.contains(&LITERAL)
            && matches!(
                i.enc,
                Enc::Sop1 | Enc::Sop2 | Enc::Sopc | Enc::Vop1 | Enc::Vop2 | Enc::Vopc
            )
    {
        i.literal = w.word(i.size as usize / 4)?;
        i.size += 4;
    }
    Ok(i)
}

/// Decode a whole kernel, instruction after instruction from offset 0.
pub fn decode_all(code: &[u8], arch: Arch) -> Result<Vec<Instr>, SimError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let i = decode_one(code, at, arch)?;
        at += i.size as usize;
        out.push(i);
    }
    Ok(out)
}
