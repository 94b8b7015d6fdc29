//! Scalar encodings: SOP2, SOPK, SOP1, SOPC, SOPP (bits 31:30 = 10) and SMEM (CDNA3 ISA guide,
//! "Microcode Formats": scalar ALU and scalar memory).

use super::{lookup, Enc, Fam, Instr, Words};
use crate::SimError;
use kittens_hw::Arch;

pub(super) fn decode(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let simm16 = (w0 & 0xffff) as u16 as i16 as i32;
    Ok(match w0 >> 23 {
        0x17d => {
            let op = lookup(Fam::Sop1, ((w0 >> 8) & 0xff) as u16, arch, w, w0)?;
            let mut i = Instr::new(offset, op, Enc::Sop1);
            i.dst = ((w0 >> 16) & 0x7f) as u16;
            i.src[0] = (w0 & 0xff) as u16;
            i
        }
        0x17e => {
            let op = lookup(Fam::Sopc, ((w0 >> 16) & 0x7f) as u16, arch, w, w0)?;
            let mut i = Instr::new(offset, op, Enc::Sopc);
            i.src[0] = (w0 & 0xff) as u16;
            i.src[1] = ((w0 >> 8) & 0xff) as u16;
            i
        }
        0x17f => {
            let op = lookup(Fam::Sopp, ((w0 >> 16) & 0x7f) as u16, arch, w, w0)?;
            let mut i = Instr::new(offset, op, Enc::Sopp);
            i.imm = simm16;
            i
        }
        _ if w0 >> 28 == 0xb => {
            let op = lookup(Fam::Sopk, ((w0 >> 23) & 0x1f) as u16, arch, w, w0)?;
            let mut i = Instr::new(offset, op, Enc::Sopk);
            let reg = ((w0 >> 16) & 0x7f) as u16;
            if op.widths()[0] > 0 {
                i.dst = reg;
            } else {
                i.src[0] = reg;
            }
            i.imm = simm16;
            i
        }
        _ => {
            let op = lookup(Fam::Sop2, ((w0 >> 23) & 0x7f) as u16, arch, w, w0)?;
            let mut i = Instr::new(offset, op, Enc::Sop2);
            i.dst = ((w0 >> 16) & 0x7f) as u16;
            i.src[0] = (w0 & 0xff) as u16;
            i.src[1] = ((w0 >> 8) & 0xff) as u16;
            i
        }
    })
}

/// SMEM: `sbase` (in SGPR pairs) in src 0, `soffset` in src 1 when SOE is set, the 21-bit byte
/// offset in `imm` when IMM is set.
pub(super) fn decode_smem(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let op = lookup(Fam::Smem, ((w0 >> 18) & 0xff) as u16, arch, w, w0)?;
    let w1 = w.word(1)?;
    let mut i = Instr::new(offset, op, Enc::Smem);
    i.size = 8;
    i.src[0] = ((w0 & 0x3f) * 2) as u16;
    i.dst = ((w0 >> 6) & 0x7f) as u16;
    i.sc0 = w0 >> 16 & 1 == 1;
    let imm = w0 >> 17 & 1 == 1;
    let soe = w0 >> 14 & 1 == 1;
    if imm {
        i.imm = (w1 & 0x1f_ffff) as i32;
    } else {
        // Without IMM the offset field names an SGPR.
        i.src[1] = (w1 & 0x7f) as u16;
    }
    if soe {
        i.src[1] = ((w1 >> 25) & 0x7f) as u16;
    }
    Ok(i)
}
