//! MFMAs as wave-wide matrix products. Which lane and register holds which element of A, B and C/D
//! comes from kittens-hw's lane maps (the tables tested against AMD's Matrix Instruction Calculator
//! and FP8-tutorial step 6), never from a map written here; elements decode with kittens-ir's codecs.
//! The product accumulates in f32 over K in order, starting from C (bf16 and fp8 products are exact
//! in f32, so only the order of the sums can differ from the hardware's).

use super::wave::{Wave, AGPR0, LANES};
use super::ExecError;
use crate::decode::{Instr, VGPR0};
use kittens_hw::dtype::DType;
use kittens_hw::mma::{self, Operand};
use kittens_hw::Arch;
use kittens_ir::numerics::from_bits;

/// First register row of an operand (VGPR or, with its ACC bit, AGPR).
fn row(i: &Instr, code: u16, acc: bool) -> Result<usize, ExecError> {
    if code < VGPR0 {
        return Err(ExecError::operand(i, code));
    }
    Ok((code - VGPR0) as usize + if acc { AGPR0 } else { 0 })
}

/// Element `slot` of a lane's operand registers starting at row `r`.
fn element(w: &Wave, r: usize, lane: usize, slot: u32, dt: DType) -> f32 {
    let bits = dt.bits();
    let per = 32 / bits;
    let word = w.v[r + (slot / per) as usize][lane];
    let x = (word >> ((slot % per) * bits)) & (u32::MAX >> (32 - bits));
    from_bits(x, dt)
}

pub(super) fn exec(w: &mut Wave, i: &Instr, arch: Arch) -> Result<(), ExecError> {
    let m = mma::instr_on(i.op.name(), arch).ok_or(ExecError::Unimplemented)?;
    if i.cbsz != 0 || i.abid != 0 || i.blgp != 0 {
        return Err(ExecError::Unimplemented);
    }
    let (mm, nn, kk) = (m.m as usize, m.n as usize, m.k as usize);
    let ra = row(i, i.src[0], i.acc & 1 != 0)?;
    let rb = row(i, i.src[1], i.acc & 2 != 0)?;
    let rd = row(i, i.dst, i.acc & 4 != 0)?;
    let mut a = vec![0f32; mm * kk];
    let mut b = vec![0f32; kk * nn];
    let mut d = vec![0f32; mm * nn];
    for lane in 0..LANES {
        for slot in 0..m.elems_per_lane(Operand::A) {
            let (r, c) = m.element(Operand::A, lane as u32, slot);
            a[r as usize * kk + c as usize] = element(w, ra, lane, slot, m.a_dtype);
        }
        for slot in 0..m.elems_per_lane(Operand::B) {
            let (r, c) = m.element(Operand::B, lane as u32, slot);
            b[r as usize * nn + c as usize] = element(w, rb, lane, slot, m.b_dtype);
        }
    }
    // C: an inline constant (0 for a fresh accumulator) or registers in D's layout.
    let c_const = if i.src[2] < VGPR0 {
        Some(f32::from_bits(w.s32(i, i.src[2])?))
    } else {
        None
    };
    let rc = if c_const.is_none() {
        row(i, i.src[2], i.acc & 4 != 0)?
    } else {
        0
    };
    for lane in 0..LANES {
        for slot in 0..m.elems_per_lane(Operand::D) {
            let (r, c) = m.element(Operand::D, lane as u32, slot);
            d[r as usize * nn + c as usize] =
                c_const.unwrap_or_else(|| f32::from_bits(w.v[rc + slot as usize][lane]));
        }
    }
    for r in 0..mm {
        for c in 0..nn {
            let mut acc = d[r * nn + c];
            for k in 0..kk {
                acc += a[r * kk + k] * b[k * nn + c];
            }
            d[r * nn + c] = acc;
        }
    }
    // MFMAs write every lane (EXEC does not mask them; the ISA requires it to be all ones).
    for lane in 0..LANES {
        for slot in 0..m.elems_per_lane(Operand::D) {
            let (r, c) = m.element(Operand::D, lane as u32, slot);
            w.v[rd + slot as usize][lane] = d[r as usize * nn + c as usize].to_bits();
        }
    }
    Ok(())
}
