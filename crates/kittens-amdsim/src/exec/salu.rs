//! The scalar ALU (SOP1, SOP2, SOPC, SOPK) and program control (SOPP), after the CDNA3 ISA guide's
//! "Scalar ALU Operations" and "Program Flow Control": SCC is the carry, borrow, overflow or
//! "result is non-zero" bit as each operation defines it.

use super::wave::Wave;
use super::{ExecError, Flow};
use crate::decode::{Instr, Op};

pub(super) fn exec(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    use Op::*;
    let a = |w: &Wave| w.s32(i, i.src[0]);
    let b = |w: &Wave| w.s32(i, i.src[1]);
    let a64 = |w: &Wave| w.s64(i, i.src[0]);
    let b64 = |w: &Wave| w.s64(i, i.src[1]);
    let k16 = i.imm as u16;
    let (r32, scc): (Option<u32>, Option<bool>) = match i.op {
        SAddU32 => {
            let (r, c) = a(w)?.overflowing_add(b(w)?);
            (Some(r), Some(c))
        }
        SSubU32 => {
            let (r, c) = a(w)?.overflowing_sub(b(w)?);
            (Some(r), Some(c))
        }
        SAddI32 => {
            let (r, o) = (a(w)? as i32).overflowing_add(b(w)? as i32);
            (Some(r as u32), Some(o))
        }
        SSubI32 => {
            let (r, o) = (a(w)? as i32).overflowing_sub(b(w)? as i32);
            (Some(r as u32), Some(o))
        }
        SAddcU32 => {
            let s = a(w)? as u64 + b(w)? as u64 + w.scc as u64;
            (Some(s as u32), Some(s >> 32 != 0))
        }
        SSubbU32 => {
            let (x, y) = (a(w)? as u64, b(w)? as u64 + w.scc as u64);
            (Some(x.wrapping_sub(y) as u32), Some(y > x))
        }
        SMinI32 | SMaxI32 => {
            let (x, y) = (a(w)? as i32, b(w)? as i32);
            let first = if i.op == SMinI32 { x < y } else { x > y };
            (Some(if first { x } else { y } as u32), Some(first))
        }
        SMinU32 | SMaxU32 => {
            let (x, y) = (a(w)?, b(w)?);
            let first = if i.op == SMinU32 { x < y } else { x > y };
            (Some(if first { x } else { y }), Some(first))
        }
        SCselectB32 => (Some(if w.scc { a(w)? } else { b(w)? }), None),
        SAndB32 | SOrB32 | SXorB32 | SAndn2B32 | SOrn2B32 | SNandB32 | SNorB32 | SXnorB32 => {
            let (x, y) = (a(w)?, b(w)?);
            let r = match i.op {
                SAndB32 => x & y,
                SOrB32 => x | y,
                SXorB32 => x ^ y,
                SAndn2B32 => x & !y,
                SNandB32 => !(x & y),
                SNorB32 => !(x | y),
                SXnorB32 => !(x ^ y),
                _ => x | !y,
            };
            (Some(r), Some(r != 0))
        }
        SLshlB32 => bits(a(w)? << (b(w)? & 31)),
        SLshrB32 => bits(a(w)? >> (b(w)? & 31)),
        SAshrI32 => bits(((a(w)? as i32) >> (b(w)? & 31)) as u32),
        SMulI32 => (Some(a(w)?.wrapping_mul(b(w)?)), None),
        SMulHiU32 => (Some(((a(w)? as u64 * b(w)? as u64) >> 32) as u32), None),
        SMulHiI32 => (
            Some(((a(w)? as i32 as i64 * b(w)? as i32 as i64) >> 32) as u32),
            None,
        ),
        SBfeU32 | SBfeI32 => {
            let (x, f) = (a(w)?, b(w)?);
            let (off, width) = (f & 31, (f >> 16) & 0x7f);
            let r = if width == 0 {
                0
            } else if i.op == SBfeU32 {
                let v = x >> off;
                if width >= 32 {
                    v
                } else {
                    v & ((1 << width) - 1)
                }
            } else {
                let width = width.min(32 - off);
                (((x << (32 - off - width)) as i32) >> (32 - width)) as u32
            };
            bits(r)
        }
        // CDNA3 ISA guide, S_LSHL<N>_ADD_U32: D = (S0 << N) + S1, SCC = the unsigned carry out of
        // the full 64-bit sum (bits shifted out of S0 count).
        SLshl1AddU32 | SLshl2AddU32 | SLshl3AddU32 | SLshl4AddU32 => {
            let n = match i.op {
                SLshl1AddU32 => 1,
                SLshl2AddU32 => 2,
                SLshl3AddU32 => 3,
                _ => 4,
            };
            let s = ((a(w)? as u64) << n) + b(w)? as u64;
            (Some(s as u32), Some(s >> 32 != 0))
        }
        SMovB32 => (Some(a(w)?), None),
        SNotB32 => bits(!a(w)?),
        SAbsI32 => bits((a(w)? as i32).unsigned_abs()),
        SBitset0B32 => (Some(w.s32(i, i.dst)? & !(1 << (a(w)? & 31))), None),
        SBitset1B32 => (Some(w.s32(i, i.dst)? | (1 << (a(w)? & 31))), None),
        SMovkI32 => (Some(i.imm as i16 as i32 as u32), None),
        SAddkI32 => {
            let (r, o) = (w.s32(i, i.dst)? as i32).overflowing_add(i.imm as i16 as i32);
            (Some(r as u32), Some(o))
        }
        SMulkI32 => (
            Some((w.s32(i, i.dst)? as i32).wrapping_mul(i.imm as i16 as i32) as u32),
            None,
        ),
        // SOPK compares: the signed forms sign-extend simm16, the unsigned ones zero-extend it.
        SCmpkEqI32 => (None, Some(a(w)? as i32 == i.imm as i16 as i32)),
        SCmpkLgI32 => (None, Some(a(w)? as i32 != i.imm as i16 as i32)),
        SCmpkGtI32 => (None, Some(a(w)? as i32 > i.imm as i16 as i32)),
        SCmpkGeI32 => (None, Some(a(w)? as i32 >= i.imm as i16 as i32)),
        SCmpkLtI32 => (None, Some((a(w)? as i32) < i.imm as i16 as i32)),
        SCmpkLeI32 => (None, Some(a(w)? as i32 <= i.imm as i16 as i32)),
        SCmpkEqU32 => (None, Some(a(w)? == k16 as u32)),
        SCmpkLgU32 => (None, Some(a(w)? != k16 as u32)),
        SCmpkGtU32 => (None, Some(a(w)? > k16 as u32)),
        SCmpkGeU32 => (None, Some(a(w)? >= k16 as u32)),
        SCmpkLtU32 => (None, Some(a(w)? < k16 as u32)),
        SCmpkLeU32 => (None, Some(a(w)? <= k16 as u32)),
        SCmpEqI32 | SCmpEqU32 => (None, Some(a(w)? == b(w)?)),
        SCmpLgI32 | SCmpLgU32 => (None, Some(a(w)? != b(w)?)),
        SCmpGtI32 => (None, Some((a(w)? as i32) > b(w)? as i32)),
        SCmpGeI32 => (None, Some((a(w)? as i32) >= b(w)? as i32)),
        SCmpLtI32 => (None, Some((a(w)? as i32) < b(w)? as i32)),
        SCmpLeI32 => (None, Some((a(w)? as i32) <= b(w)? as i32)),
        SCmpGtU32 => (None, Some(a(w)? > b(w)?)),
        SCmpGeU32 => (None, Some(a(w)? >= b(w)?)),
        SCmpLtU32 => (None, Some(a(w)? < b(w)?)),
        SCmpLeU32 => (None, Some(a(w)? <= b(w)?)),
        // SCC = bit `S1[4:0]` of S0 is 0 (bitcmp0) or 1 (bitcmp1).
        SBitcmp0B32 => (None, Some((a(w)? >> (b(w)? & 31)) & 1 == 0)),
        SBitcmp1B32 => (None, Some((a(w)? >> (b(w)? & 31)) & 1 == 1)),
        SCmpEqU64 => (None, Some(a64(w)? == b64(w)?)),
        SCmpLgU64 => (None, Some(a64(w)? != b64(w)?)),
        _ => return exec64(w, i, a64, b64),
    };
    if let Some(r) = r32 {
        w.set_s32(i, i.dst, r)?;
    }
    if let Some(s) = scc {
        w.scc = s;
    }
    Ok(())
}

fn bits(r: u32) -> (Option<u32>, Option<bool>) {
    (Some(r), Some(r != 0))
}

fn exec64(
    w: &mut Wave,
    i: &Instr,
    a64: impl Fn(&Wave) -> Result<u64, ExecError>,
    b64: impl Fn(&Wave) -> Result<u64, ExecError>,
) -> Result<(), ExecError> {
    use Op::*;
    let shift = |w: &Wave| w.s32(i, i.src[1]).map(|s| s & 63);
    let (r, scc) = match i.op {
        SCselectB64 => (if w.scc { a64(w)? } else { b64(w)? }, None),
        SAndB64 => nz(a64(w)? & b64(w)?),
        SOrB64 => nz(a64(w)? | b64(w)?),
        SXorB64 => nz(a64(w)? ^ b64(w)?),
        SAndn2B64 => nz(a64(w)? & !b64(w)?),
        SOrn2B64 => nz(a64(w)? | !b64(w)?),
        SNandB64 => nz(!(a64(w)? & b64(w)?)),
        SNorB64 => nz(!(a64(w)? | b64(w)?)),
        SXnorB64 => nz(!(a64(w)? ^ b64(w)?)),
        SLshlB64 => nz(a64(w)? << shift(w)?),
        SLshrB64 => nz(a64(w)? >> shift(w)?),
        SAshrI64 => nz(((a64(w)? as i64) >> shift(w)?) as u64),
        // CDNA3 ISA guide, S_BFE_U64 / S_BFE_I64: offset S1[5:0], width S1[22:16].
        SBfeU64 | SBfeI64 => {
            let (x, f) = (a64(w)?, w.s32(i, i.src[1])?);
            let (off, width) = (f & 63, ((f >> 16) & 0x7f).min(64));
            let r = if width == 0 {
                0
            } else {
                let width = width.min(64 - off);
                let up = x << (64 - off - width);
                if i.op == SBfeI64 {
                    ((up as i64) >> (64 - width)) as u64
                } else {
                    up >> (64 - width)
                }
            };
            nz(r)
        }
        SMovB64 => (a64(w)?, None),
        SNotB64 => nz(!a64(w)?),
        SAndSaveexecB64 | SOrSaveexecB64 => {
            let (s, old) = (a64(w)?, w.exec);
            w.exec = if i.op == SAndSaveexecB64 {
                s & old
            } else {
                s | old
            };
            let e = w.exec;
            w.set_s64(i, i.dst, old)?;
            w.scc = e != 0;
            return Ok(());
        }
        // CDNA3 ISA guide, S_ANDN2_SAVEEXEC_B64: D = EXEC; EXEC = S0 & !EXEC; SCC = EXEC != 0.
        SAndn2SaveexecB64 => {
            let (s, old) = (a64(w)?, w.exec);
            w.exec = s & !old;
            let e = w.exec;
            w.set_s64(i, i.dst, old)?;
            w.scc = e != 0;
            return Ok(());
        }
        _ => return Err(ExecError::Unimplemented),
    };
    w.set_s64(i, i.dst, r)?;
    if let Some(s) = scc {
        w.scc = s;
    }
    Ok(())
}

fn nz(r: u64) -> (u64, Option<bool>) {
    (r, Some(r != 0))
}

/// SOPP: branches, barrier, waits, end; `s_nop`, `s_setprio` change no result.
pub(super) fn sopp(w: &Wave, i: &Instr) -> Result<Flow, ExecError> {
    use Op::*;
    let target = i.branch_target().unwrap_or(0);
    let taken = match i.op {
        SNop | SSetprio => return Ok(Flow::Next),
        SEndpgm => return Ok(Flow::End),
        SBarrier => return Ok(Flow::Barrier),
        SWaitcnt => {
            let x = i.imm as u32 & 0xffff;
            return Ok(Flow::Wait {
                vm: (x & 0xf) | ((x >> 14) & 3) << 4,
                lgkm: (x >> 8) & 0xf,
            });
        }
        SBranch => true,
        SCbranchScc0 => !w.scc,
        SCbranchScc1 => w.scc,
        SCbranchVccz => w.vcc == 0,
        SCbranchVccnz => w.vcc != 0,
        SCbranchExecz => w.exec == 0,
        SCbranchExecnz => w.exec != 0,
        _ => return Err(ExecError::Unimplemented),
    };
    Ok(if taken {
        Flow::Jump(target)
    } else {
        Flow::Next
    })
}
