//! The SOPK compares of a register with a 16-bit immediate (CDNA3 ISA guide, SOPK opcodes:
//! S_CMPK_EQ_I32 = 2 … S_CMPK_LG_U32 = 9), which gfx942's MI300X-attn configuration compiles to
//! (`s_cmpk_lg_i32` in its rolled K-load loop), on a hand-assembled kernel: each compare sets SCC,
//! `s_cselect_b32` turns it into −1 or 0, and the lane stores it. The signed forms sign-extend the
//! immediate and the unsigned ones zero-extend it: an immediate with bit 15 set tells them apart.

mod support;

use support::{S_ENDPGM, S_LOAD_DWORDX4_S4_S0, S_WAITCNT_LGKM0, S_WAITCNT_VM0};

const S_LOAD_DWORD_S8_S4: [u32; 2] = [0xC002_0202, 0]; // s_load_dword s8, s[4:5], 0x0
const S_CSELECT_S9: u32 = 0x8509_80C1; // s_cselect_b32 s9, -1, 0
const V_MOV_V1_S9: u32 = 0x7E02_0209; // v_mov_b32_e32 v1, s9
const V_MOV_V2_0: u32 = 0x7E04_0280; // v_mov_b32_e32 v2, 0

/// `s_cmpk_<op> s8, imm` (SOPK: bits 31:28 = 1011, opcode 27:23, sdst 22:16, simm16 15:0).
fn cmpk(opcode: u32, imm: u16) -> u32 {
    0xB000_0000 | opcode << 23 | 8 << 16 | u32::from(imm)
}

/// `global_store_dword v2, v1, s[6:7] offset:off` (v2 = 0: every lane stores the same word).
fn store(off: u32) -> [u32; 2] {
    [0xDC70_8000 | off, 0x0006_0102]
}

/// A compare's host reading of `(register, simm16)`.
type Reading = fn(u32, u16) -> bool;

/// The compares, each with its host reading.
const OPS: [(u32, &str, Reading); 8] = [
    (2, "eq_i32", |x, k| x as i32 == i32::from(k as i16)),
    (3, "lg_i32", |x, k| x as i32 != i32::from(k as i16)),
    (4, "gt_i32", |x, k| x as i32 > i32::from(k as i16)),
    (5, "ge_i32", |x, k| x as i32 >= i32::from(k as i16)),
    (6, "lt_i32", |x, k| (x as i32) < i32::from(k as i16)),
    (7, "le_i32", |x, k| x as i32 <= i32::from(k as i16)),
    (8, "eq_u32", |x, k| x == u32::from(k)),
    (9, "lg_u32", |x, k| x != u32::from(k)),
];

fn run(x: u32, imm: u16) -> Vec<u32> {
    let mut words = vec![];
    words.extend(S_LOAD_DWORDX4_S4_S0);
    words.push(S_WAITCNT_LGKM0);
    words.extend(S_LOAD_DWORD_S8_S4);
    words.push(S_WAITCNT_LGKM0);
    words.push(V_MOV_V2_0);
    for (slot, (op, _, _)) in OPS.iter().enumerate() {
        words.push(cmpk(*op, imm));
        words.push(S_CSELECT_S9);
        words.push(V_MOV_V1_S9);
        words.extend(store(4 * slot as u32));
    }
    words.push(S_WAITCNT_VM0);
    words.push(S_ENDPGM);
    support::run(&words, &[x], 4 * OPS.len(), 10, 3)
}

#[test]
fn sopk_compares_sign_or_zero_extend_their_immediate() {
    // 0xf000 is −4096 signed and 61440 unsigned; 0x1000 is 4096 either way.
    let cases = [
        (0x1000u32, 0x1000u16),
        (0x0fff, 0x1000),
        (0x1001, 0x1000),
        ((-4096i32) as u32, 0xf000),
        (61440, 0xf000),
        (0, 0xf000),
        ((-5000i32) as u32, 0xf000),
    ];
    for (x, imm) in cases {
        let got = run(x, imm);
        for (slot, (_, name, f)) in OPS.iter().enumerate() {
            let want = if f(x, imm) { u32::MAX } else { 0 };
            assert_eq!(got[slot], want, "s_cmpk_{name} {x:#x}, {imm:#x}");
        }
    }
}
