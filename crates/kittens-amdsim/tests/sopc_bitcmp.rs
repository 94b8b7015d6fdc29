//! The SOPC bit tests (CDNA3 ISA guide, SOPC opcodes S_BITCMP0_B32 = 12, S_BITCMP1_B32 = 13), which
//! gfx942's attention backward at head dim 96 compiles to, on a hand-assembled kernel: each sets SCC
//! to whether bit `S1[4:0]` of S0 is 0 (bitcmp0) or 1 (bitcmp1), `s_cselect_b32` turns it into −1 or
//! 0, and the lane stores it.

mod support;

use support::{S_ENDPGM, S_LOAD_DWORDX4_S4_S0, S_WAITCNT_LGKM0, S_WAITCNT_VM0};

const S_LOAD_DWORD_S8_S4: [u32; 2] = [0xC002_0202, 0]; // s_load_dword s8, s[4:5], 0x0
const S_CSELECT_S9: u32 = 0x8509_80C1; // s_cselect_b32 s9, -1, 0
const V_MOV_V1_S9: u32 = 0x7E02_0209; // v_mov_b32_e32 v1, s9
const V_MOV_V2_0: u32 = 0x7E04_0280; // v_mov_b32_e32 v2, 0

/// `s_bitcmp<op> s8, bit` (SOPC: bits 31:23 = 101111110, opcode 22:16, ssrc1 15:8 — the inline
/// integer `bit` is 128 + bit — ssrc0 7:0).
fn bitcmp(opcode: u32, bit: u32) -> u32 {
    0xBF00_0000 | opcode << 16 | (128 + bit) << 8 | 8
}

/// `global_store_dword v2, v1, s[6:7] offset:off` (v2 = 0: every lane stores the same word).
fn store(off: u32) -> [u32; 2] {
    [0xDC70_8000 | off, 0x0006_0102]
}

const BITS: [u32; 4] = [0, 1, 5, 31];

fn run(x: u32) -> Vec<u32> {
    let mut words = vec![];
    words.extend(S_LOAD_DWORDX4_S4_S0);
    words.push(S_WAITCNT_LGKM0);
    words.extend(S_LOAD_DWORD_S8_S4);
    words.push(S_WAITCNT_LGKM0);
    words.push(V_MOV_V2_0);
    let mut slot = 0;
    for op in [12, 13] {
        for bit in BITS {
            words.push(bitcmp(op, bit));
            words.push(S_CSELECT_S9);
            words.push(V_MOV_V1_S9);
            words.extend(store(4 * slot));
            slot += 1;
        }
    }
    words.push(S_WAITCNT_VM0);
    words.push(S_ENDPGM);
    support::run(&words, &[x], 4 * 2 * BITS.len(), 10, 3)
}

#[test]
fn sopc_bitcmp_tests_one_bit() {
    for x in [0x8000_0021u32, 0x1234_5678, 0, u32::MAX] {
        let got = run(x);
        for (i, bit) in BITS.iter().enumerate() {
            let set = (x >> bit) & 1 == 1;
            let want = |b: bool| if b { u32::MAX } else { 0 };
            assert_eq!(got[i], want(!set), "s_bitcmp0_b32 {x:#x}, {bit}");
            assert_eq!(
                got[BITS.len() + i],
                want(set),
                "s_bitcmp1_b32 {x:#x}, {bit}"
            );
        }
    }
}
