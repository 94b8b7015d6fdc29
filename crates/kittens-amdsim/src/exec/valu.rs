//! The vector ALU (VOP1, VOP2, VOPC, VOP3, VOP3P without MFMA, SDWA), lane by lane under EXEC,
//! after the CDNA3 ISA guide's "Vector ALU Operations" (and the CDNA4 ISA guide for `v_bitop3_b32`
//! and `v_cvt_pk_bf16_f32`). Float results are IEEE f32 on the host; transcendental ops
//! (`v_exp_f32`, `v_log_f32`, `v_rcp_f32`) are computed exactly rather than to the hardware's 1 ULP.

use super::wave::{Wave, AGPR0, LANES};
use super::ExecError;
use crate::decode::{Enc, Instr, Op, NONE};
use std::array::from_fn;

type Row = [u32; LANES];

fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

/// Source `k` as f32 with the VOP3 ABS/NEG input modifiers.
fn fm(i: &Instr, k: usize, x: u32) -> f32 {
    let mut v = f(x);
    if i.abs >> k & 1 == 1 {
        v = v.abs();
    }
    if i.neg >> k & 1 == 1 {
        v = -v;
    }
    v
}

/// The f32 output modifiers: OMOD then clamp to [0, 1].
fn fout(i: &Instr, mut v: f32) -> u32 {
    v = match i.omod {
        1 => v * 2.0,
        2 => v * 4.0,
        3 => v * 0.5,
        _ => v,
    };
    if i.clamp {
        v = v.clamp(0.0, 1.0);
    }
    v.to_bits()
}

/// Two-operand integer operations (shared by VOP2, VOP3 and SDWA forms).
fn int2(op: Op, a: u32, b: u32, clamp: bool) -> Option<u32> {
    use Op::*;
    Some(match op {
        VMinI32 => (a as i32).min(b as i32) as u32,
        VMaxI32 => (a as i32).max(b as i32) as u32,
        VMinU32 => a.min(b),
        VMaxU32 => a.max(b),
        VLshrrevB32 => b >> (a & 31),
        // GFX9-family 16-bit ALU ops zero the destination's high half (LLVM relies on it).
        VLshrrevB16 => (b & 0xffff) >> (a & 15),
        VAddU16 => (a.wrapping_add(b)) & 0xffff,
        VSubU16 => a.wrapping_sub(b) & 0xffff,
        VSubrevU16 => b.wrapping_sub(a) & 0xffff,
        VMulLoU16 => (a & 0xffff).wrapping_mul(b & 0xffff) & 0xffff,
        VLshlrevB16 => ((b & 0xffff) << (a & 15)) & 0xffff,
        VAshrrevI32 => ((b as i32) >> (a & 31)) as u32,
        VLshlrevB32 => b << (a & 31),
        VAndB32 => a & b,
        VOrB32 => a | b,
        VXorB32 => a ^ b,
        VAddU32 if clamp => a.saturating_add(b),
        VAddU32 => a.wrapping_add(b),
        VSubU32 if clamp => a.saturating_sub(b),
        VSubU32 => a.wrapping_sub(b),
        VSubrevU32 if clamp => b.saturating_sub(a),
        VSubrevU32 => b.wrapping_sub(a),
        VMulLoU32 => a.wrapping_mul(b),
        // CDNA3 ISA guide, V_MUL_U32_U24: the low 32 bits of the product of the operands' low 24 bits.
        VMulU32U24 => (a & 0xff_ffff).wrapping_mul(b & 0xff_ffff),
        // V_MUL_I32_I24: the low 32 bits of the product of the operands' low 24 bits, sign-extended.
        VMulI32I24 => (((a << 8) as i32 >> 8).wrapping_mul((b << 8) as i32 >> 8)) as u32,
        // V_MUL_HI_U32_U24: bits 47..32 of the same 48-bit product (LLVM pairs it with the low half
        // for a 24-bit multiply whose product may pass 32 bits).
        VMulHiU32U24 => ((u64::from(a & 0xff_ffff) * u64::from(b & 0xff_ffff)) >> 32) as u32,
        VMulHiU32 => ((a as u64 * b as u64) >> 32) as u32,
        _ => return None,
    })
}

/// Two-operand f32 operations.
fn float2(op: Op, a: f32, b: f32) -> Option<f32> {
    use Op::*;
    Some(match op {
        VAddF32 => a + b,
        VSubF32 => a - b,
        VSubrevF32 => b - a,
        VMulF32 => a * b,
        VMinF32 => a.min(b),
        VMaxF32 => a.max(b),
        VLdexpF32 => ldexp(a, b.to_bits() as i32),
        _ => return None,
    })
}

/// `a · 2^e`, rounded once (the f64 product is exact for every f32 result that is not subnormal).
fn ldexp(a: f32, e: i32) -> f32 {
    let e = e.clamp(-400, 400);
    let (e1, e2) = (e / 2, e - e / 2);
    ((a as f64) * 2f64.powi(e1) * 2f64.powi(e2)) as f32
}

fn compare(op: Op, a: u32, b: u32) -> Option<bool> {
    use Op::*;
    let (x, y) = (f(a), f(b));
    Some(match op {
        VCmpLtF32 => x < y,
        VCmpEqF32 => x == y,
        VCmpLeF32 => x <= y,
        VCmpGtF32 => x > y,
        // "Less or greater": false for NaN, unlike `!=`.
        VCmpLgF32 => !x.is_nan() && !y.is_nan() && x != y,
        VCmpGeF32 => x >= y,
        VCmpOF32 => !x.is_nan() && !y.is_nan(),
        VCmpUF32 => x.is_nan() || y.is_nan(),
        // The negated comparisons: true where the relation fails, NaN operands included.
        VCmpNgeF32 => x.partial_cmp(&y).is_none_or(|o| o.is_lt()),
        VCmpNlgF32 => !(!x.is_nan() && !y.is_nan() && x != y),
        VCmpNgtF32 => x.partial_cmp(&y).is_none_or(|o| o.is_le()),
        VCmpNleF32 => x.partial_cmp(&y).is_none_or(|o| o.is_gt()),
        VCmpNeqF32 => !(x == y),
        VCmpNltF32 => x.partial_cmp(&y).is_none_or(|o| o.is_ge()),
        VCmpLtI32 => (a as i32) < b as i32,
        VCmpEqI32 | VCmpEqU32 => a == b,
        VCmpLeI32 => (a as i32) <= b as i32,
        VCmpGtI32 => (a as i32) > b as i32,
        VCmpNeI32 | VCmpNeU32 => a != b,
        VCmpGeI32 => (a as i32) >= b as i32,
        VCmpLtU32 => a < b,
        VCmpLeU32 => a <= b,
        VCmpGtU32 => a > b,
        VCmpGeU32 => a >= b,
        VCmpClassF32 => class_f32(x, b),
        _ => return None,
    })
}

/// The 64-bit integer compares (sources are register pairs or 64-bit scalars).
fn compare64(op: Op, a: u64, b: u64) -> Option<bool> {
    use Op::*;
    let (x, y) = (a as i64, b as i64);
    Some(match op {
        VCmpLtI64 => x < y,
        VCmpEqI64 | VCmpEqU64 => a == b,
        VCmpLeI64 => x <= y,
        VCmpGtI64 => x > y,
        VCmpNeI64 | VCmpNeU64 => a != b,
        VCmpGeI64 => x >= y,
        VCmpLtU64 => a < b,
        VCmpLeU64 => a <= b,
        VCmpGtU64 => a > b,
        VCmpGeU64 => a >= b,
        _ => return None,
    })
}

/// V_CMP_CLASS_F32 (CDNA3 ISA guide): true when `x` falls in a class whose bit is set in `mask`
/// (0 signalling NaN, 1 quiet NaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal,
/// 8 +normal, 9 +inf).
fn class_f32(x: f32, mask: u32) -> bool {
    use std::num::FpCategory::*;
    let neg = x.is_sign_negative();
    let class = match x.classify() {
        Nan if x.to_bits() & 0x0040_0000 == 0 => 0,
        Nan => 1,
        Infinite => {
            if neg {
                2
            } else {
                9
            }
        }
        Normal => {
            if neg {
                3
            } else {
                8
            }
        }
        Subnormal => {
            if neg {
                4
            } else {
                7
            }
        }
        Zero => {
            if neg {
                5
            } else {
                6
            }
        }
    };
    mask >> class & 1 == 1
}

/// bf16 of an f32, round to nearest even, NaN kept quiet (CDNA4 ISA guide, V_CVT_PK_BF16_F32).
fn bf16_rne(x: u32) -> u32 {
    if f(x).is_nan() {
        (x >> 16) | 0x40
    } else {
        (x + 0x7fff + ((x >> 16) & 1)) >> 16
    }
}

/// V_PERM_B32's byte select over the 8 bytes {S0, S1} (S1 the low dword).
fn perm_byte(data: u64, sel: u32) -> u32 {
    match sel {
        0..=7 => ((data >> (8 * sel)) & 0xff) as u32,
        8..=11 => {
            let bit = 16 * (sel - 8) + 15;
            if data >> bit & 1 == 1 {
                0xff
            } else {
                0
            }
        }
        12 => 0,
        _ => 0xff,
    }
}

/// V_BITOP3_B32: bit j of the result is bit (a_j·4 + b_j·2 + c_j) of the 8-bit table.
fn bitop3(table: u32, a: u32, b: u32, c: u32) -> u32 {
    let mut r = 0;
    for idx in 0..8 {
        if table >> idx & 1 == 1 {
            let pick = |x: u32, bit: u32| if idx >> bit & 1 == 1 { x } else { !x };
            r |= pick(a, 2) & pick(b, 1) & pick(c, 0);
        }
    }
    r
}

pub(super) fn exec(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    use Op::*;
    if i.enc == Enc::Sdwa {
        return sdwa(w, i);
    }
    let exec = w.exec;
    let src = |w: &Wave, k: usize| -> Result<Row, ExecError> {
        if i.src[k] == NONE {
            Ok([0; LANES])
        } else {
            w.v32(i, i.src[k])
        }
    };
    let op = i.op;
    if compare64(op, 0, 0).is_some() {
        let (x, y) = (w.v64(i, i.src[0])?, w.v64(i, i.src[1])?);
        let mut m = 0u64;
        for l in 0..LANES {
            if exec >> l & 1 == 1 && compare64(op, x[l], y[l]) == Some(true) {
                m |= 1 << l;
            }
        }
        return w.set_s64(i, i.dst, m);
    }
    if matches!(op, VAccvgprReadB32 | VAccvgprWriteB32 | VAccvgprMovB32) {
        return acc_move(w, i);
    }
    if op.has_carry_out() {
        return carry(w, i);
    }
    let (a, b, c) = (src(w, 0)?, src(w, 1)?, src(w, 2)?);
    // Compares write a lane mask (0 for inactive lanes) to VCC or an SGPR pair.
    if let Some(_probe) = compare(op, 0, 0) {
        let mut m = 0u64;
        for l in 0..LANES {
            if exec >> l & 1 == 1 && compare(op, a[l], b[l]) == Some(true) {
                m |= 1 << l;
            }
        }
        return w.set_s64(i, i.dst, m);
    }
    if let Some(_probe) = int2(op, 0, 0, false) {
        let r = from_fn(|l| int2(op, a[l], b[l], i.clamp).unwrap_or(0));
        return write(w, i, &r);
    }
    if float2(op, 0.0, 0.0).is_some() {
        let r = from_fn(|l| fout(i, float2(op, fm(i, 0, a[l]), fm(i, 1, b[l])).unwrap_or(0.0)));
        return write(w, i, &r);
    }
    let r: Row = match op {
        VCndmaskB32 => {
            let m = w.s64(i, i.src[2])?;
            from_fn(|l| if m >> l & 1 == 1 { b[l] } else { a[l] })
        }
        VFmacF32 => {
            let d = w.v[Wave::vreg(i, i.dst)?];
            from_fn(|l| fout(i, fm(i, 0, a[l]).mul_add(fm(i, 1, b[l]), f(d[l]))))
        }
        // CDNA3 ISA guide, V_FMAMK_F32 (S0·K + S1) and V_FMAAK_F32 (S0·S1 + K), K the constant
        // word after the instruction.
        VFmamkF32 => from_fn(|l| fout(i, f(a[l]).mul_add(f(i.literal), f(b[l])))),
        VFmaakF32 => from_fn(|l| fout(i, f(a[l]).mul_add(f(b[l]), f(i.literal)))),
        VMovB32 => a,
        VReadfirstlaneB32 => {
            let lane = if exec == 0 {
                0
            } else {
                exec.trailing_zeros() as usize
            };
            return w.set_s32(i, i.dst, a[lane]);
        }
        VReadlaneB32 => return w.set_s32(i, i.dst, a[(b[0] & 63) as usize]),
        VWritelaneB32 => {
            let r = Wave::vreg(i, i.dst)?;
            w.v[r][(b[0] & 63) as usize] = a[0];
            return Ok(());
        }
        VCvtF32I32 => from_fn(|l| fout(i, a[l] as i32 as f32)),
        VCvtF32U32 => from_fn(|l| fout(i, a[l] as f32)),
        VCvtU32F32 => from_fn(|l| fm(i, 0, a[l]) as u32),
        VCvtI32F32 => from_fn(|l| fm(i, 0, a[l]) as i32 as u32),
        VExpF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).exp2())),
        // log2: −∞ at ±0 (a row of the attention that kept no key), NaN below 0 (as the host's).
        VLogF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).log2())),
        VRcpF32 | VRcpIflagF32 => from_fn(|l| fout(i, 1.0 / fm(i, 0, a[l]))),
        VTruncF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).trunc())),
        // Correctly rounded (the hardware is within 1 ULP).
        VSqrtF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).sqrt())),
        VNotB32 => from_fn(|l| !a[l]),
        VBfrevB32 => from_fn(|l| a[l].reverse_bits()),
        VBfeU32 => from_fn(|l| {
            let (off, width) = (b[l] & 31, c[l] & 31);
            if width == 0 {
                0
            } else {
                (a[l] >> off) & (u32::MAX >> (32 - width))
            }
        }),
        VBfeI32 => from_fn(|l| {
            let (off, width) = (b[l] & 31, c[l] & 31);
            if width == 0 {
                0
            } else {
                let width = width.min(32 - off);
                (((a[l] << (32 - off - width)) as i32) >> (32 - width)) as u32
            }
        }),
        // CDNA3 ISA guide, V_ALIGNBIT_B32: the low dword of {S0, S1} >> S2[4:0].
        VAlignbitB32 => from_fn(|l| (((a[l] as u64) << 32 | b[l] as u64) >> (c[l] & 31)) as u32),
        // V_ASHRREV_I64: S1 >> S0[5:0], the sign bit shifted in.
        VLshlrevB64 | VLshrrevB64 | VAshrrevI64 => {
            let x = w.v64(i, i.src[1])?;
            let r: [u64; LANES] = match i.op {
                VLshlrevB64 => from_fn(|l| x[l] << (a[l] & 63)),
                VAshrrevI64 => from_fn(|l| ((x[l] as i64) >> (a[l] & 63)) as u64),
                _ => from_fn(|l| x[l] >> (a[l] & 63)),
            };
            let d = Wave::vreg(i, i.dst)?;
            w.write_v64(d, &r);
            return Ok(());
        }
        VBfiB32 => from_fn(|l| (a[l] & b[l]) | (!a[l] & c[l])),
        VFmaF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).mul_add(fm(i, 1, b[l]), fm(i, 2, c[l])))),
        VMin3F32 => from_fn(|l| fout(i, fm(i, 0, a[l]).min(fm(i, 1, b[l])).min(fm(i, 2, c[l])))),
        VMax3F32 => from_fn(|l| fout(i, fm(i, 0, a[l]).max(fm(i, 1, b[l])).max(fm(i, 2, c[l])))),
        // The division sequence LLVM emits (div_scale, rcp, Newton steps, div_fmas, div_fixup)
        // yields the correctly rounded quotient: scaling is never needed here (VCC = 0), and
        // div_fixup(q, den, num) returns num / den in IEEE f32, which also covers its special cases.
        VDivScaleF32 => {
            w.set_s64(i, i.sdst, 0)?;
            from_fn(|l| fout(i, fm(i, 0, a[l])))
        }
        VDivFmasF32 => from_fn(|l| fout(i, fm(i, 0, a[l]).mul_add(fm(i, 1, b[l]), fm(i, 2, c[l])))),
        VDivFixupF32 => from_fn(|l| fout(i, fm(i, 2, c[l]) / fm(i, 1, b[l]))),
        VPermB32 => from_fn(|l| {
            let data = (a[l] as u64) << 32 | b[l] as u64;
            (0..4).fold(0, |r, k| {
                r | perm_byte(data, (c[l] >> (8 * k)) & 0xff) << (8 * k)
            })
        }),
        VLshlAddU32 => from_fn(|l| (a[l] << (b[l] & 31)).wrapping_add(c[l])),
        VAddLshlU32 => from_fn(|l| a[l].wrapping_add(b[l]) << (c[l] & 31)),
        VAdd3U32 => from_fn(|l| a[l].wrapping_add(b[l]).wrapping_add(c[l])),
        // CDNA3 ISA guide, V_MAD_U32_U24: D = S0[23:0] · S1[23:0] + S2 (low 32 bits).
        VMadU32U24 => from_fn(|l| {
            (a[l] & 0xff_ffff)
                .wrapping_mul(b[l] & 0xff_ffff)
                .wrapping_add(c[l])
        }),
        // V_MAD_I32_I24: D = sext(S0[23:0]) · sext(S1[23:0]) + S2 (low 32 bits).
        VMadI32I24 => from_fn(|l| {
            let s24 = |x: u32| ((x << 8) as i32) >> 8;
            s24(a[l]).wrapping_mul(s24(b[l])).wrapping_add(c[l] as i32) as u32
        }),
        VXadU32 => from_fn(|l| (a[l] ^ b[l]).wrapping_add(c[l])),
        // CDNA3 ISA guide, V_MBCNT_LO/HI_U32_B32: S1 plus the set bits of S0 in the low (high) half
        // of the mask of lanes below this one (the lane index from two of them, `-1` as S0).
        VMbcntLoU32B32 => from_fn(|l| {
            let below = (1u64 << l).wrapping_sub(1) as u32;
            (a[l] & below).count_ones().wrapping_add(b[l])
        }),
        VMbcntHiU32B32 => from_fn(|l| {
            let below = ((1u64 << l).wrapping_sub(1) >> 32) as u32;
            (a[l] & below).count_ones().wrapping_add(b[l])
        }),
        VLshlOrB32 => from_fn(|l| (a[l] << (b[l] & 31)) | c[l]),
        VAndOrB32 => from_fn(|l| (a[l] & b[l]) | c[l]),
        VOr3B32 => from_fn(|l| a[l] | b[l] | c[l]),
        VBitop3B32 => from_fn(|l| bitop3(i.imm as u32, a[l], b[l], c[l])),
        VCvtPkBf16F32 => from_fn(|l| bf16_rne(a[l]) | bf16_rne(b[l]) << 16),
        VMovB64 => {
            let x = w.v64(i, i.src[0])?;
            let r = Wave::vreg(i, i.dst)?;
            w.write_v64(r, &x);
            return Ok(());
        }
        VLshlAddU64 => {
            let (x, z) = (w.v64(i, i.src[0])?, w.v64(i, i.src[2])?);
            let r: [u64; LANES] = from_fn(|l| (x[l] << (b[l] & 7)).wrapping_add(z[l]));
            let d = Wave::vreg(i, i.dst)?;
            w.write_v64(d, &r);
            return Ok(());
        }
        VMadU64U32 | VMadI64I32 => {
            let z = w.v64(i, i.src[2])?;
            let mut carry = 0u64;
            let r: [u64; LANES] = from_fn(|l| {
                let (p, o) = if op == VMadU64U32 {
                    (a[l] as u64 as u128 * b[l] as u128 + z[l] as u128, false)
                } else {
                    let s = a[l] as i32 as i128 * b[l] as i32 as i128 + z[l] as i64 as i128;
                    (s as u128, s < i64::MIN as i128 || s > i64::MAX as i128)
                };
                if (op == VMadU64U32 && p >> 64 != 0 || o) && exec >> l & 1 == 1 {
                    carry |= 1 << l;
                }
                p as u64
            });
            let d = Wave::vreg(i, i.dst)?;
            w.write_v64(d, &r);
            return w.set_s64(i, i.sdst, carry);
        }
        VPkFmaF32 | VPkMulF32 | VPkAddF32 | VPkMovB32 => return packed(w, i),
        _ => return Err(ExecError::Unimplemented),
    };
    write(w, i, &r)
}

/// The 32-bit adds and subtracts with a carry out to VCC or an SGPR pair, and a carry in from one
/// (CDNA3 ISA guide, V_ADD_CO_U32 ... V_SUBBREV_CO_U32): bit l of the mask is lane l's carry (a
/// borrow for the subtracts), 0 for inactive lanes.
fn carry(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    use Op::*;
    let (a, b) = (w.v32(i, i.src[0])?, w.v32(i, i.src[1])?);
    let cin = if i.op.has_carry_in() {
        w.s64(i, i.src[2])?
    } else {
        0
    };
    let exec = w.exec;
    let mut mask = 0u64;
    let r: Row = from_fn(|l| {
        let c = cin >> l & 1;
        let (x, y) = (a[l] as u64, b[l] as u64);
        let (v, out) = match i.op {
            VAddCoU32 | VAddcCoU32 => {
                let s = x + y + c;
                (s as u32, s >> 32 != 0)
            }
            VSubCoU32 | VSubbCoU32 => (x.wrapping_sub(y + c) as u32, y + c > x),
            _ => (y.wrapping_sub(x + c) as u32, x + c > y),
        };
        if out && exec >> l & 1 == 1 {
            mask |= 1 << l;
        }
        v
    });
    write(w, i, &r)?;
    w.set_s64(i, i.sdst, mask)
}

/// The accumulator moves (CDNA3 ISA guide, V_ACCVGPR_READ_B32 / _WRITE_B32 / _MOV_B32): a VGPR
/// operand code names an AGPR on the side the decoder's `acc` bits mark (1 source, 4 destination).
fn acc_move(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    let x = if i.acc & 1 != 0 {
        w.v[Wave::vreg(i, i.src[0])? + AGPR0]
    } else {
        w.v32(i, i.src[0])?
    };
    let d = Wave::vreg(i, i.dst)? + if i.acc & 4 != 0 { AGPR0 } else { 0 };
    w.write_v(d, &x);
    Ok(())
}

fn write(w: &mut Wave, i: &Instr, r: &Row) -> Result<(), ExecError> {
    let d = Wave::vreg(i, i.dst)?;
    w.write_v(d, r);
    Ok(())
}

/// The packed f32 operations: each source is a 64-bit pair; the low result takes from each source
/// the half OP_SEL names, the high result the half OP_SEL_HI names (CDNA3 ISA guide, VOP3P).
fn packed(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    let n = if i.op == Op::VPkFmaF32 { 3 } else { 2 };
    let mut s = [[0u64; LANES]; 3];
    for (k, sk) in s.iter_mut().enumerate().take(n) {
        *sk = w.v64_packed_f32(i, i.src[k])?;
    }
    let pick = |k: usize, l: usize, hi_result: bool| -> f32 {
        let sel = if hi_result { i.op_sel_hi } else { i.op_sel };
        let x = if sel >> k & 1 == 1 {
            s[k][l] >> 32
        } else {
            s[k][l]
        } as u32;
        let neg = if hi_result { i.neg_hi } else { i.neg };
        if neg >> k & 1 == 1 {
            -f(x)
        } else {
            f(x)
        }
    };
    let half = |l: usize, hi: bool| -> f32 {
        let (x, y) = (pick(0, l, hi), pick(1, l, hi));
        match i.op {
            Op::VPkFmaF32 => x.mul_add(y, pick(2, l, hi)),
            Op::VPkMulF32 => x * y,
            Op::VPkAddF32 => x + y,
            _ => x,
        }
    };
    let r: [u64; LANES] = from_fn(|l| {
        let (lo, hi) = (half(l, false), half(l, true));
        let c = |v: f32| if i.clamp { v.clamp(0.0, 1.0) } else { v };
        c(lo).to_bits() as u64 | (c(hi).to_bits() as u64) << 32
    });
    let d = Wave::vreg(i, i.dst)?;
    w.write_v64(d, &r);
    Ok(())
}

/// An SDWA source: the selected byte or word, zero- or sign-extended (CDNA3 ISA guide, SDWA).
fn sel(x: u32, sel: u8, sext: bool) -> u32 {
    let (shift, bits) = match sel {
        0..=3 => (8 * sel as u32, 8),
        4 | 5 => (16 * (sel as u32 - 4), 16),
        _ => return x,
    };
    let v = (x >> shift) & ((1 << bits) - 1);
    if sext {
        (((v << (32 - bits)) as i32) >> (32 - bits)) as u32
    } else {
        v
    }
}

fn sdwa(w: &mut Wave, i: &Instr) -> Result<(), ExecError> {
    let s = i.sdwa.ok_or(ExecError::Unimplemented)?;
    let a = w.v32(i, i.src[0])?;
    let b = if i.src[1] == NONE {
        [0; LANES]
    } else {
        w.v32(i, i.src[1])?
    };
    let a: Row = from_fn(|l| sel(a[l], s.src0_sel, s.src0_sext));
    let b: Row = from_fn(|l| sel(b[l], s.src1_sel, s.src1_sext));
    if s.src0_neg || s.src1_neg || s.src0_abs || s.src1_abs || s.clamp || i.omod != 0 {
        return Err(ExecError::Unimplemented);
    }
    let r: Row = match i.op {
        Op::VCndmaskB32 => {
            let m = w.s64(i, i.src[2])?;
            from_fn(|l| if m >> l & 1 == 1 { b[l] } else { a[l] })
        }
        Op::VMovB32 => a,
        op => match int2(op, 0, 0, false) {
            Some(_) => from_fn(|l| int2(op, a[l], b[l], false).unwrap_or(0)),
            None => return Err(ExecError::Unimplemented),
        },
    };
    let d = Wave::vreg(i, i.dst)?;
    let old = w.v[d];
    let out: Row = from_fn(|l| {
        let (shift, bits) = match s.dst_sel {
            0..=3 => (8 * s.dst_sel as u32, 8),
            4 | 5 => (16 * (s.dst_sel as u32 - 4), 16),
            _ => return r[l],
        };
        let mask = ((1u32 << bits) - 1) << shift;
        let v = (r[l] << shift) & mask;
        match s.dst_unused {
            2 => (old[l] & !mask) | v,
            1 if (v >> (shift + bits - 1)) & 1 == 1 => v | !(mask | ((1 << shift) - 1)),
            _ => v,
        }
    });
    w.write_v(d, &out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 24-bit multiplies take the operands' low 24 bits; the two halves are the 48-bit product.
    #[test]
    fn mul_u24_halves_are_the_48_bit_product() {
        for (a, b) in [
            (0xff_ffffu32, 0xff_ffffu32),
            (0x1ab_cdef, 0x12_3456),
            (3, 5),
            (0, 7),
        ] {
            let p = u64::from(a & 0xff_ffff) * u64::from(b & 0xff_ffff);
            let lo = int2(Op::VMulU32U24, a, b, false).unwrap();
            let hi = int2(Op::VMulHiU32U24, a, b, false).unwrap();
            assert_eq!((u64::from(hi) << 32) | u64::from(lo), p, "{a:#x} * {b:#x}");
        }
        assert_eq!(
            int2(Op::VMulHiU32U24, 0xff_ffff, 0xff_ffff, false),
            Some(0xffff)
        );
    }

    /// The GFX9 16-bit integer ops: the low halves' result, the destination's high half zeroed.
    #[test]
    fn u16_ops_keep_the_low_half() {
        let op = |o, a, b| int2(o, a, b, false).unwrap();
        assert_eq!(op(Op::VMulLoU16, 0x1_0003, 0xffff_0005), 15);
        assert_eq!(op(Op::VMulLoU16, 0x1234, 0x5678), 0x0060);
        assert_eq!(op(Op::VSubU16, 3, 5), 0xfffe);
        assert_eq!(op(Op::VSubrevU16, 3, 5), 2);
        assert_eq!(op(Op::VLshlrevB16, 4, 0xf_1234), 0x2340);
    }

    /// The negated float comparisons are the plain ones' negations: true on NaN operands (AMD's
    /// "not greater or equal" etc.), where every plain ordered comparison is false.
    #[test]
    fn negated_compares_hold_on_nan() {
        let c = |o, x: f32, y: f32| compare(o, x.to_bits(), y.to_bits()).unwrap();
        let pairs = [
            (1.0, 2.0),
            (2.0, 1.0),
            (3.0, 3.0),
            (f32::NAN, 1.0),
            (1.0, f32::NAN),
        ];
        for (x, y) in pairs {
            assert_eq!(c(Op::VCmpNgeF32, x, y), !c(Op::VCmpGeF32, x, y), "{x} {y}");
            assert_eq!(c(Op::VCmpNlgF32, x, y), !c(Op::VCmpLgF32, x, y), "{x} {y}");
            assert_eq!(c(Op::VCmpNgtF32, x, y), !c(Op::VCmpGtF32, x, y), "{x} {y}");
            assert_eq!(c(Op::VCmpNleF32, x, y), !c(Op::VCmpLeF32, x, y), "{x} {y}");
            assert_eq!(c(Op::VCmpNeqF32, x, y), !c(Op::VCmpEqF32, x, y), "{x} {y}");
            assert_eq!(c(Op::VCmpNltF32, x, y), !c(Op::VCmpLtF32, x, y), "{x} {y}");
        }
        assert!(c(Op::VCmpNeqF32, f32::NAN, f32::NAN) && !c(Op::VCmpLgF32, 1.0, f32::NAN));
    }
}
