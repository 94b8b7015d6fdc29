//! Hand-assembled words (fields placed by the CDNA3 ISA guide's "Microcode Formats") through the
//! decoder: what it accepts, and the typed errors for what it does not know.

use kittens_amdsim::{decode_all, decode_one, SimError};
use kittens_hw::Arch;

fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// VOP1 v_mov_b32 (opcode 1) of a literal: 0111111 | vdst | op | src0 = 255, then the literal.
#[test]
fn vop1_with_literal_is_twelve_bytes_less_four() {
    let w = (0x3f << 25) | (7 << 17) | (1 << 9) | 255;
    let code = bytes(&[w, 0x3f80_0000]);
    let i = decode_one(&code, 0, Arch::Cdna3).unwrap();
    assert_eq!(i.size, 8);
    assert_eq!(i.literal, 0x3f80_0000);
    assert_eq!(i.text(), "v_mov_b32_e32 v7, 0x3f800000");
}

#[test]
fn unknown_opcode_names_its_offset() {
    // s_nop 0, then SOPP opcode 0x7e (none in either ISA's table).
    let code = bytes(&[0xbf80_0000, 0xbf80_0000 | (0x7e << 16)]);
    match decode_all(&code, Arch::Cdna4) {
        Err(SimError::UnknownInstruction { offset, what, .. }) => {
            assert_eq!(offset, 4);
            assert!(what.contains("Sopp") && what.contains("0x7e"), "{what}");
        }
        other => panic!("expected an unknown instruction, got {other:?}"),
    }
}

#[test]
fn gfx950_only_opcodes_are_unknown_on_gfx942() {
    // ds_read_b64_tr_b16 (DS opcode 0xe3) exists on CDNA4 only.
    let code = bytes(&[(0x36 << 26) | (0xe3 << 17), 0x0200_0001]);
    assert!(decode_one(&code, 0, Arch::Cdna4).is_ok());
    assert!(matches!(
        decode_one(&code, 0, Arch::Cdna3),
        Err(SimError::UnknownInstruction { offset: 0, .. })
    ));
}

#[test]
fn a_literal_past_the_end_is_truncation() {
    let w = (0x3f << 25) | (7 << 17) | (1 << 9) | 255;
    assert!(matches!(
        decode_all(&bytes(&[w]), Arch::Cdna3),
        Err(SimError::Truncated { offset: 0 })
    ));
}
