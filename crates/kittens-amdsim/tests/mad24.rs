//! The 24-bit multiply-adds (CDNA3 ISA guide, VOP3 opcodes: V_MAD_I32_I24 = 0x1C2, V_MAD_U32_U24 =
//! 0x1C3), which the compiler emits for the strip kernels' 32-bit index arithmetic, on a
//! hand-assembled kernel: out[i] = mad24(in[i], in[i], 4·i); and the 24-bit signed multiply (VOP2). Inputs carry bits above bit 23 (which
//! both ignore) and, for the signed form, a set bit 23 (a negative 24-bit value). Also `v_log_f32`
//! (VOP1 0x21), which the attention's log-sum-exp compiles to.

mod support;

use support::{GLOBAL_STORE_V3, S_ENDPGM};

/// `v_mad_*_24 v3, v2, v2, v1` (VOP3a: opcode in bits 25:16, vdst 7:0; src0 8:0, src1 17:9,
/// src2 26:18 of the second word, VGPR n as 256 + n).
fn mad(opcode: u32) -> [u32; 2] {
    [0xD000_0000 | opcode << 16 | 3, 258 | 258 << 9 | 257 << 18]
}

/// `out[i] = op(in[i])` for the instruction words `op` (reading v2, writing v3, v1 = 4·i).
pub(crate) fn per_lane(op: &[u32], input: &[u32]) -> Vec<u32> {
    let mut words = support::load_lane_word();
    words.extend(op);
    words.extend(GLOBAL_STORE_V3);
    words.push(S_ENDPGM);
    support::run(&words, input, 256, 8, 4)
}

fn run(opcode: u32, input: &[u32]) -> Vec<u32> {
    per_lane(&mad(opcode), input)
}

fn inputs() -> Vec<u32> {
    // Bits above 23 set in every other lane; bit 23 set in every fourth.
    (0..64u32)
        .map(|i| {
            ((i.wrapping_mul(2_654_435_761) >> 12) & 0x7f_ffff) | (i % 2) << 28 | (i % 4 / 3) << 23
        })
        .collect()
}

#[test]
fn v_mad_u32_u24_multiplies_the_low_24_bits() {
    let x = inputs();
    let want: Vec<u32> = (0..64u64)
        .map(|i| {
            let a = u64::from(x[i as usize] & 0xff_ffff);
            ((a * a + 4 * i) & 0xffff_ffff) as u32
        })
        .collect();
    assert_eq!(run(0x1c3, &x), want);
}

#[test]
fn v_mad_i32_i24_multiplies_the_sign_extended_low_24_bits() {
    let x = inputs();
    let want: Vec<u32> = (0..64i64)
        .map(|i| {
            let low = i64::from(x[i as usize] & 0xff_ffff);
            let a = if low >= 1 << 23 { low - (1 << 24) } else { low };
            ((a * a + 4 * i) & 0xffff_ffff) as u32
        })
        .collect();
    assert!(x.iter().any(|v| v & 1 << 23 != 0));
    assert_eq!(run(0x1c2, &x), want);
}

/// `v_mul_i32_i24 v3, v2, v2` (VOP2 opcode 6: bits 30:25, vdst 24:17, vsrc1 16:9, src0 8:0), which
/// gfx942's attention backward at head dim 96 compiles to: the low 32 bits of the product of the
/// sign-extended low 24 bits.
#[test]
fn v_mul_i32_i24_multiplies_the_sign_extended_low_24_bits() {
    let x = inputs();
    let want: Vec<u32> = x
        .iter()
        .map(|&v| {
            let low = i64::from(v & 0xff_ffff);
            let a = if low >= 1 << 23 { low - (1 << 24) } else { low };
            ((a * a) & 0xffff_ffff) as u32
        })
        .collect();
    assert_eq!(per_lane(&[6 << 25 | 3 << 17 | 2 << 9 | 258], &x), want);
}

/// `v_log_f32 v3, v2` (VOP1: bits 31:25 = 0x3f, vdst 24:17, opcode 16:9, src0 8:0): log2, exact on the
/// emulator; log2(0) = −∞, negative inputs NaN.
#[test]
fn v_log_f32_is_log2() {
    let x: Vec<f32> = (0..64)
        .map(|i| match i {
            0 => 0.0,
            1 => -1.0,
            2 => f32::INFINITY,
            _ => 1.0e-30 * 1.9f32.powi(i),
        })
        .collect();
    let got = per_lane(
        &[0x7E06_4302],
        &x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
    );
    for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
        let (g, want) = (f32::from_bits(g), v.log2());
        assert!(
            g == want || (g.is_nan() && want.is_nan()),
            "lane {i}: log2({v}) = {g}, want {want}"
        );
    }
    assert_eq!(f32::from_bits(got[0]), f32::NEG_INFINITY);
}
