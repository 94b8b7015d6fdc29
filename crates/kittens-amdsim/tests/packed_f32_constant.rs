//! A packed f32 instruction with an inline float constant (`v_pk_add_f32 v[3:4], v[2:3], 1.0`,
//! VOP3P opcode 0x32), which clang emits for `x + 1.0f` on pairs of f32 registers (the attention's soft
//! cap, `exp2(·) + 1`): the constant is the f32 1.0 in the low dword, as the op_sel bits select
//! (the f64 pattern of a double-precision operand would add 0).

mod support;

use support::{GLOBAL_STORE_V3, S_ENDPGM};

#[test]
fn v_pk_add_f32_adds_the_f32_inline_constant() {
    // VOP3P: word 0 = 0xD38 << 20 | opcode << 16 | op_sel_hi[2] << 14 | vdst; word 1 = op_sel_hi[1:0]
    // << 27 | src1 << 9 | src0 (inline constant 1.0 = 242, VGPR n = 256 + n). op_sel 0: the low
    // result reads the low dwords; op_sel_hi [1, 0]: the high result v2's high dword (v3) and the
    // constant's low dword.
    let op = [0xD380_0000 | 0x32 << 16 | 3, 1 << 27 | 242 << 9 | 258];
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.75 - 20.0).collect();
    let mut words = support::load_lane_word();
    words.extend(op);
    words.extend(GLOBAL_STORE_V3);
    words.push(S_ENDPGM);
    let got = support::run(
        &words,
        &x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        256,
        8,
        4,
    );
    let want: Vec<u32> = x.iter().map(|v| (v + 1.0).to_bits()).collect();
    assert_eq!(got, want);
}
