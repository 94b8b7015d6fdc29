//! The architectural state of one wave64 (CDNA3 ISA guide, "Program State"): 102 SGPRs, VCC, EXEC,
//! M0, SCC, 256 VGPRs and 256 AGPRs of 64 lanes, and the program counter (an index into the decoded
//! kernel). Operand reads follow the 9-bit source encoding the decoder keeps.

use crate::decode::{Instr, LITERAL, VGPR0};
use crate::exec::ExecError;

pub const LANES: usize = 64;
/// Registers of 64 lanes: VGPRs 0-255, then AGPRs 0-255.
const VREGS: usize = 512;
pub const AGPR0: usize = 256;

#[derive(Clone)]
pub struct Wave {
    pub sgpr: [u32; 102],
    pub vcc: u64,
    pub exec: u64,
    pub m0: u32,
    pub scc: bool,
    /// `v[r][lane]`, register-major so one operand is one contiguous row.
    pub v: Vec<[u32; LANES]>,
    pub pc: usize,
    pub done: bool,
    pub at_barrier: bool,
}

/// The f32 bits of the inline float constants 240-248 (CDNA3 ISA guide, "Scalar ALU operands").
fn inline_float(code: u16) -> Option<f32> {
    Some(match code {
        240 => 0.5,
        241 => -0.5,
        242 => 1.0,
        243 => -1.0,
        244 => 2.0,
        245 => -2.0,
        246 => 4.0,
        247 => -4.0,
        248 => std::f32::consts::FRAC_1_PI / 2.0,
        _ => return None,
    })
}

impl Wave {
    pub fn new(exec: u64) -> Wave {
        Wave {
            sgpr: [0; 102],
            vcc: 0,
            exec,
            m0: 0,
            scc: false,
            v: vec![[0; LANES]; VREGS],
            pc: 0,
            done: false,
            at_barrier: false,
        }
    }

    /// A 32-bit scalar source.
    pub fn s32(&self, i: &Instr, code: u16) -> Result<u32, ExecError> {
        Ok(match code {
            0..=101 => self.sgpr[code as usize],
            106 => self.vcc as u32,
            107 => (self.vcc >> 32) as u32,
            124 => self.m0,
            126 => self.exec as u32,
            127 => (self.exec >> 32) as u32,
            128..=192 => (code - 128) as u32,
            193..=208 => (-((code - 192) as i32)) as u32,
            251 => (self.vcc == 0) as u32,
            252 => (self.exec == 0) as u32,
            253 => self.scc as u32,
            LITERAL => i.literal,
            c => match inline_float(c) {
                Some(f) => f.to_bits(),
                None => return Err(ExecError::operand(i, code)),
            },
        })
    }

    /// A 64-bit scalar source (an SGPR pair, VCC, EXEC, or a constant widened as the ISA does:
    /// integers sign-extended, float constants as f64, literals zero-extended).
    pub fn s64(&self, i: &Instr, code: u16) -> Result<u64, ExecError> {
        Ok(match code {
            0..=100 => {
                self.sgpr[code as usize] as u64 | (self.sgpr[code as usize + 1] as u64) << 32
            }
            106 => self.vcc,
            126 => self.exec,
            128..=208 => self.s32(i, code)? as i32 as i64 as u64,
            LITERAL => i.literal as u64,
            c => match inline_float(c) {
                Some(f) => (f as f64).to_bits(),
                None => return Err(ExecError::operand(i, code)),
            },
        })
    }

    pub fn set_s32(&mut self, i: &Instr, code: u16, x: u32) -> Result<(), ExecError> {
        match code {
            0..=101 => self.sgpr[code as usize] = x,
            106 => self.vcc = (self.vcc & !0xffff_ffff) | x as u64,
            107 => self.vcc = (self.vcc & 0xffff_ffff) | (x as u64) << 32,
            124 => self.m0 = x,
            126 => self.exec = (self.exec & !0xffff_ffff) | x as u64,
            127 => self.exec = (self.exec & 0xffff_ffff) | (x as u64) << 32,
            _ => return Err(ExecError::operand(i, code)),
        }
        Ok(())
    }

    pub fn set_s64(&mut self, i: &Instr, code: u16, x: u64) -> Result<(), ExecError> {
        match code {
            0..=100 => {
                self.sgpr[code as usize] = x as u32;
                self.sgpr[code as usize + 1] = (x >> 32) as u32;
            }
            106 => self.vcc = x,
            126 => self.exec = x,
            _ => return Err(ExecError::operand(i, code)),
        }
        Ok(())
    }

    /// A 32-bit vector source for every lane (a scalar or constant is broadcast).
    pub fn v32(&self, i: &Instr, code: u16) -> Result<[u32; LANES], ExecError> {
        if code >= VGPR0 {
            Ok(self.v[(code - VGPR0) as usize])
        } else {
            Ok([self.s32(i, code)?; LANES])
        }
    }

    /// A 64-bit vector source (a VGPR pair, or a 64-bit scalar broadcast).
    /// A source of a packed f32 instruction (VOP3P `v_pk_*_f32`): as [`Self::v64`], except that an
    /// inline float constant is its f32 bit pattern in the low dword (LLVM encodes it with
    /// OP_SEL_HI 0 so that both halves read that dword), not the f64 pattern a 64-bit operand of
    /// a double-precision instruction takes.
    pub fn v64_packed_f32(&self, i: &Instr, code: u16) -> Result<[u64; LANES], ExecError> {
        match inline_float(code) {
            Some(f) if code < VGPR0 => Ok([f.to_bits() as u64; LANES]),
            _ => self.v64(i, code),
        }
    }

    pub fn v64(&self, i: &Instr, code: u16) -> Result<[u64; LANES], ExecError> {
        if code >= VGPR0 {
            let r = (code - VGPR0) as usize;
            let (lo, hi) = (
                &self.v[r],
                self.v.get(r + 1).ok_or(ExecError::operand(i, code))?,
            );
            Ok(std::array::from_fn(|l| lo[l] as u64 | (hi[l] as u64) << 32))
        } else {
            Ok([self.s64(i, code)?; LANES])
        }
    }

    /// Index of a VGPR operand code (the destination of a vector op).
    pub fn vreg(i: &Instr, code: u16) -> Result<usize, ExecError> {
        if code >= VGPR0 {
            Ok((code - VGPR0) as usize)
        } else {
            Err(ExecError::operand(i, code))
        }
    }

    /// Row of a memory instruction's data register: an AGPR when the encoding's ACC bit is set
    /// (CDNA3 ISA guide, "Microcode Formats": DS, MUBUF and FLAT carry it), a VGPR otherwise.
    pub fn data_reg(i: &Instr, code: u16) -> Result<usize, ExecError> {
        Ok(Self::vreg(i, code)? + if i.acc & 4 != 0 { AGPR0 } else { 0 })
    }

    /// Write `x` into the active lanes of VGPR `r`.
    pub fn write_v(&mut self, r: usize, x: &[u32; LANES]) {
        let exec = self.exec;
        let row = &mut self.v[r];
        for (l, d) in row.iter_mut().enumerate() {
            if exec >> l & 1 == 1 {
                *d = x[l];
            }
        }
    }

    pub fn write_v64(&mut self, r: usize, x: &[u64; LANES]) {
        let lo: [u32; LANES] = std::array::from_fn(|l| x[l] as u32);
        let hi: [u32; LANES] = std::array::from_fn(|l| (x[l] >> 32) as u32);
        self.write_v(r, &lo);
        self.write_v(r + 1, &hi);
    }
}
