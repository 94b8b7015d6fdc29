//! Vector ALU encodings: VOP1, VOP2, VOPC (with their SDWA forms), VOP3 (a and b) and VOP3P
//! including the MFMA form (CDNA3 ISA guide, "Microcode Formats": vector ALU).

use super::{lookup, Enc, Fam, Instr, Op, Sdwa, Words, SDWA, VCC_LO, VGPR0};
use crate::SimError;
use kittens_hw::Arch;

/// VOP1, VOP2, VOPC (bit 31 = 0).
pub(super) fn decode_vop(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let src0 = (w0 & 0x1ff) as u16;
    let vdst = ((w0 >> 17) & 0xff) as u16;
    let vsrc1 = VGPR0 + ((w0 >> 9) & 0xff) as u16;
    let (op, enc) = match w0 >> 25 {
        0x3f => (
            lookup(Fam::Vop1, ((w0 >> 9) & 0xff) as u16, arch, w, w0)?,
            Enc::Vop1,
        ),
        0x3e => (
            lookup(Fam::Vopc, ((w0 >> 17) & 0xff) as u16, arch, w, w0)?,
            Enc::Vopc,
        ),
        _ => (
            lookup(Fam::Vop2, ((w0 >> 25) & 0x3f) as u16, arch, w, w0)?,
            Enc::Vop2,
        ),
    };
    let mut i = Instr::new(offset, op, enc);
    i.src[0] = src0;
    match enc {
        Enc::Vop1 => {
            // v_readfirstlane writes an SGPR through the VDST field.
            i.dst = if op == Op::VReadfirstlaneB32 {
                vdst
            } else {
                VGPR0 + vdst
            };
            if op == Op::VAccvgprMovB32 {
                // Both operands are AGPRs by the opcode (CDNA3 ISA guide, V_ACCVGPR_MOV_B32).
                i.acc = 5;
            }
        }
        Enc::Vopc => {
            i.dst = VCC_LO;
            i.src[1] = vsrc1;
        }
        _ => {
            i.dst = VGPR0 + vdst;
            i.src[1] = vsrc1;
            if op == Op::VCndmaskB32 || op.has_carry_in() {
                i.src[2] = VCC_LO;
            }
            if op.has_carry_out() {
                i.sdst = VCC_LO;
            }
        }
    }
    if src0 == SDWA {
        let d = w.word(1)?;
        i.size = 8;
        i.enc = Enc::Sdwa;
        let s0 = (d & 0xff) as u16;
        i.src[0] = if d >> 23 & 1 == 1 { s0 } else { VGPR0 + s0 };
        if enc == Enc::Vopc {
            return Err(SimError::UnknownInstruction {
                target: arch.target(),
                offset: offset as usize,
                what: format!("{} in SDWA form", op.name()),
                word: w0,
            });
        }
        i.sdwa = Some(Sdwa {
            dst_sel: ((d >> 8) & 7) as u8,
            dst_unused: ((d >> 11) & 3) as u8,
            clamp: d >> 13 & 1 == 1,
            src0_sel: ((d >> 16) & 7) as u8,
            src0_sext: d >> 19 & 1 == 1,
            src0_neg: d >> 20 & 1 == 1,
            src0_abs: d >> 21 & 1 == 1,
            src1_sel: ((d >> 24) & 7) as u8,
            src1_sext: d >> 27 & 1 == 1,
            src1_neg: d >> 28 & 1 == 1,
            src1_abs: d >> 29 & 1 == 1,
        });
        i.omod = ((d >> 14) & 3) as u8;
    }
    Ok(i)
}

/// Operations whose VOP3 form is VOP3b: bits 14:8 name an SGPR destination instead of ABS/op_sel.
fn is_vop3b(op: Op) -> bool {
    matches!(op, Op::VDivScaleF32 | Op::VMadU64U32 | Op::VMadI64I32) || op.has_carry_out()
}

/// VOP3 and VOP3P (bits 31:26 = 110100).
pub(super) fn decode_vop3(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let w1 = w.word(1)?;
    if w0 >> 23 == 0x1a7 {
        return decode_vop3p(w, w0, w1, offset, arch);
    }
    let code = ((w0 >> 16) & 0x3ff) as u16;
    let op = match code {
        0x000..=0x0ff => lookup(Fam::Vopc, code, arch, w, w0)?,
        0x100..=0x13f => lookup(Fam::Vop2, code - 0x100, arch, w, w0)?,
        0x140..=0x1bf => lookup(Fam::Vop1, code - 0x140, arch, w, w0)?,
        _ => lookup(Fam::Vop3, code, arch, w, w0)?,
    };
    let mut i = Instr::new(offset, op, Enc::Vop3);
    i.size = 8;
    let vdst = (w0 & 0xff) as u16;
    i.dst = match op.fam() {
        // Compares, readlane and readfirstlane write SGPRs through the VDST field.
        Fam::Vopc => vdst,
        _ if matches!(op, Op::VReadlaneB32 | Op::VReadfirstlaneB32) => vdst,
        _ => VGPR0 + vdst,
    };
    let nsrc = op.widths()[1..].iter().filter(|&&x| x > 0).count();
    i.src[0] = (w1 & 0x1ff) as u16;
    if nsrc > 1 {
        i.src[1] = ((w1 >> 9) & 0x1ff) as u16;
    }
    if nsrc > 2 {
        i.src[2] = ((w1 >> 18) & 0x1ff) as u16;
    }
    i.clamp = w0 >> 15 & 1 == 1;
    if is_vop3b(op) {
        i.sdst = ((w0 >> 8) & 0x7f) as u16;
    } else {
        i.abs = ((w0 >> 8) & 7) as u8;
        i.op_sel = ((w0 >> 11) & 0xf) as u8;
    }
    i.omod = ((w1 >> 27) & 3) as u8;
    i.neg = ((w1 >> 29) & 7) as u8;
    if op == Op::VBitop3B32 {
        // CDNA4 ISA guide, V_BITOP3_B32: the 8-bit truth table is spread over the NEG (bits 2:0),
        // ABS (bits 5:3) and OMOD (bits 7:6) fields, which the operation does not otherwise have.
        i.imm = (i.neg as i32) | (i.abs as i32) << 3 | (i.omod as i32) << 6;
        i.neg = 0;
        i.abs = 0;
        i.omod = 0;
    }
    Ok(i)
}

fn decode_vop3p(w: &Words, w0: u32, w1: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let op = lookup(Fam::Vop3p, ((w0 >> 16) & 0x7f) as u16, arch, w, w0)?;
    let mut i = Instr::new(offset, op, Enc::Vop3p);
    i.size = 8;
    i.dst = VGPR0 + (w0 & 0xff) as u16;
    i.src[0] = (w1 & 0x1ff) as u16;
    if op.widths()[2] > 0 {
        i.src[1] = ((w1 >> 9) & 0x1ff) as u16;
    }
    if op.widths()[3] > 0 {
        i.src[2] = ((w1 >> 18) & 0x1ff) as u16;
    }
    if op.is_mfma() {
        // The MAI form: ACC_CD (15), ABID (14:11), CBSZ (10:8); ACC for A/B (59, 60), BLGP (63:61).
        i.acc = (((w0 >> 15) & 1) as u8 * 4) | ((w1 >> 27) & 3) as u8;
        i.abid = ((w0 >> 11) & 0xf) as u8;
        i.cbsz = ((w0 >> 8) & 7) as u8;
        i.blgp = ((w1 >> 29) & 7) as u8;
        if op == Op::VMfmaF32_16x16x128F8f6f4 && (i.cbsz != 0 || i.blgp != 0) {
            // CBSZ/BLGP pick the operand formats here (fp8 = 0); fp6/fp4 have other widths.
            return Err(SimError::UnknownInstruction {
                target: arch.target(),
                offset: offset as usize,
                what: format!(
                    "{} with operand formats cbsz {} blgp {} (only fp8, 0, is modelled)",
                    op.name(),
                    i.cbsz,
                    i.blgp
                ),
                word: w0,
            });
        }
    } else {
        // The accumulator moves name their AGPR side by the opcode (CDNA3 ISA guide,
        // V_ACCVGPR_READ_B32 / V_ACCVGPR_WRITE_B32): the source, resp. the destination.
        i.acc = match op {
            Op::VAccvgprReadB32 => 1,
            Op::VAccvgprWriteB32 => 4,
            _ => 0,
        };
        i.neg_hi = ((w0 >> 8) & 7) as u8;
        i.op_sel = ((w0 >> 11) & 7) as u8;
        i.op_sel_hi = ((w1 >> 27) & 3) as u8 | (((w0 >> 14) & 1) as u8 * 4);
        i.clamp = w0 >> 15 & 1 == 1;
        i.neg = ((w1 >> 29) & 7) as u8;
    }
    Ok(i)
}
