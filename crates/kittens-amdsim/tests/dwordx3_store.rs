//! `global_store_dwordx3` (CDNA3 ISA guide, FLAT/GLOBAL opcode 0x1E): stores three consecutive data
//! VGPRs per lane, which clang emits for three adjacent f32 of the split attention's partial output
//! (`attn_fwd --variant seed001 --kv-splits G`), on a hand-assembled kernel:
//! `out[3i .. 3i + 3] = (in[i], !in[i], in[i] + 7)`.

mod support;

use support::{S_ENDPGM, S_WAITCNT_VM0};

// Encodings from LLVM 19's assembler (`llvm-mc -mcpu=gfx942 -show-encoding`).
const V_MOV_V4_V2: u32 = 0x7E08_0302; // v_mov_b32_e32 v4, v2
const V_NOT_V5_V2: u32 = 0x7E0A_5702; // v_not_b32_e32 v5, v2
const V_ADD_V6_7_V2: u32 = 0x680C_0487; // v_add_u32_e32 v6, 7, v2
const V_MUL_V1_12_V0: u32 = 0x1002_008C; // v_mul_u32_u24_e32 v1, 12, v0
const STORE_X3: [u32; 2] = [0xDC78_8000, 0x0006_0401]; // global_store_dwordx3 v1, v[4:6], s[6:7]

#[test]
fn global_store_dwordx3_stores_three_dwords_per_lane() {
    let input: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut words = support::load_lane_word();
    words.extend([V_MOV_V4_V2, V_NOT_V5_V2, V_ADD_V6_7_V2, V_MUL_V1_12_V0]);
    words.extend(STORE_X3);
    words.push(S_WAITCNT_VM0);
    words.push(S_ENDPGM);
    let out = support::run(&words, &input, 64 * 12, 8, 7);
    let want: Vec<u32> = input
        .iter()
        .flat_map(|&x| [x, !x, x.wrapping_add(7)])
        .collect();
    assert_eq!(out, want);
}
