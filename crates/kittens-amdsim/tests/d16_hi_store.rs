//! `global_store_short_d16_hi` (CDNA3 ISA guide, FLAT/GLOBAL opcode 0x1B): stores the high 16 bits of
//! each lane's data VGPR, which clang emits for a bf16 output that is an f32's top half (the
//! attention's RTZ rounding), on a hand-assembled kernel: `out16[i] = in32[i] >> 16`.

mod support;

use support::{S_ENDPGM, S_WAITCNT_VM0};

const V_LSHLREV_V1_1_V0: u32 = 0x2402_0081; // v_lshlrev_b32_e32 v1, 1, v0
const STORE_D16_HI: [u32; 2] = [0xDC6C_8000, 0x0006_0201]; // global_store_short_d16_hi v1, v2, s[6:7]

#[test]
fn global_store_short_d16_hi_stores_the_high_half() {
    let input: Vec<u32> = (0..64u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ 0x8000)
        .collect();
    let mut words = support::load_lane_word();
    words.push(V_LSHLREV_V1_1_V0);
    words.extend(STORE_D16_HI);
    words.push(S_WAITCNT_VM0);
    words.push(S_ENDPGM);
    let out = support::run(&words, &input, 128, 8, 3);
    let halves: Vec<u32> = out.iter().flat_map(|w| [w & 0xffff, w >> 16]).collect();
    let want: Vec<u32> = input.iter().map(|x| x >> 16).collect();
    assert_eq!(halves, want);
}
