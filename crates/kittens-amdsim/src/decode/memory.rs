//! Memory encodings: DS (LDS), MUBUF (buffer) and FLAT with the global segment (CDNA3 ISA guide,
//! "Microcode Formats": LDS, MUBUF, FLAT). Operand roles: DS — src 0 address, src 1/2 data0/data1, dst the result; MUBUF —
//! src 0 VADDR, src 1 the resource's first SGPR, src 2 SOFFSET, dst VDATA (loads and stores);
//! GLOBAL — src 0 VADDR, src 1 SADDR or [`NONE`] for `off`, dst VDST or the stored data.

use super::{lookup, Enc, Fam, Instr, Words, NONE, VGPR0};
use crate::SimError;
use kittens_hw::Arch;

pub(super) fn decode_ds(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let op = lookup(Fam::Ds, ((w0 >> 17) & 0xff) as u16, arch, w, w0)?;
    let w1 = w.word(1)?;
    if w0 >> 16 & 1 == 1 {
        return Err(gds(arch, offset, w0));
    }
    let mut i = Instr::new(offset, op, Enc::Ds);
    i.size = 8;
    i.imm = (w0 & 0xffff) as i32;
    i.src[0] = VGPR0 + (w1 & 0xff) as u16;
    let [dst, _, d0, d1] = op.widths();
    if d0 > 0 {
        i.src[1] = VGPR0 + ((w1 >> 8) & 0xff) as u16;
    }
    if d1 > 0 {
        i.src[2] = VGPR0 + ((w1 >> 16) & 0xff) as u16;
    }
    if dst > 0 {
        i.dst = VGPR0 + ((w1 >> 24) & 0xff) as u16;
    }
    if w0 >> 25 & 1 == 1 {
        i.acc = 4;
    }
    Ok(i)
}

fn gds(arch: Arch, offset: u32, w0: u32) -> SimError {
    SimError::UnknownInstruction {
        target: arch.target(),
        offset: offset as usize,
        what: "a DS instruction on GDS".into(),
        word: w0,
    }
}

pub(super) fn decode_mubuf(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let op = lookup(Fam::Mubuf, ((w0 >> 18) & 0x7f) as u16, arch, w, w0)?;
    let w1 = w.word(1)?;
    let mut i = Instr::new(offset, op, Enc::Mubuf);
    i.size = 8;
    i.imm = (w0 & 0xfff) as i32;
    i.offen = w0 >> 12 & 1 == 1;
    i.idxen = w0 >> 13 & 1 == 1;
    i.sc0 = w0 >> 14 & 1 == 1;
    i.sc1 = w0 >> 15 & 1 == 1;
    i.lds = w0 >> 16 & 1 == 1;
    i.nt = w0 >> 17 & 1 == 1;
    i.src[0] = VGPR0 + (w1 & 0xff) as u16;
    i.dst = VGPR0 + ((w1 >> 8) & 0xff) as u16;
    i.src[1] = (((w1 >> 16) & 0x1f) * 4) as u16;
    i.src[2] = ((w1 >> 24) & 0xff) as u16;
    if w1 >> 23 & 1 == 1 {
        i.acc = 4;
    }
    Ok(i)
}

pub(super) fn decode_flat(w: &Words, w0: u32, offset: u32, arch: Arch) -> Result<Instr, SimError> {
    let seg = (w0 >> 14) & 3;
    if seg != 2 {
        return Err(SimError::UnknownInstruction {
            target: arch.target(),
            offset: offset as usize,
            what: format!("FLAT segment {seg} (only global, 2, is modelled)"),
            word: w0,
        });
    }
    let op = lookup(Fam::Global, ((w0 >> 18) & 0x7f) as u16, arch, w, w0)?;
    let w1 = w.word(1)?;
    let mut i = Instr::new(offset, op, Enc::Global);
    i.size = 8;
    // A 13-bit signed byte offset.
    i.imm = ((w0 & 0x1fff) << 19) as i32 >> 19;
    i.lds = w0 >> 13 & 1 == 1;
    i.sc0 = w0 >> 16 & 1 == 1;
    i.nt = w0 >> 17 & 1 == 1;
    i.sc1 = w0 >> 25 & 1 == 1;
    i.src[0] = VGPR0 + (w1 & 0xff) as u16;
    let saddr = ((w1 >> 16) & 0x7f) as u16;
    i.src[1] = if saddr == 0x7f { NONE } else { saddr };
    i.dst = VGPR0
        + if op.is_store() {
            (w1 >> 8) & 0xff
        } else {
            (w1 >> 24) & 0xff
        } as u16;
    if w1 >> 23 & 1 == 1 {
        i.acc = 4;
    }
    Ok(i)
}
