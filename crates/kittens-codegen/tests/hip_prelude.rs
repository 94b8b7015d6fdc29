//! The opcode table and the prelude text agree: every instruction an asm string of the prelude issues is
//! listed in `WRAPPED_OPCODES`, and every listed opcode is issued by some asm string. (Compiling the
//! prelude and finding each opcode in the assembly is kittens-runtime's tests/amd_prelude.rs.)

use kittens_codegen::hip::{
    bf16_mfma_opcode, builtin_kernel_source, wrapped_opcodes, PRELUDE, WRAPPED_OPCODES,
};
use kittens_hw::Arch;
use std::collections::BTreeSet;

/// First word of every string literal that follows `asm volatile(` or is an MFMA macro's opcode.
fn issued_opcodes(src: &str) -> BTreeSet<String> {
    let mut ops = BTreeSet::new();
    for (i, _) in src
        .match_indices("asm volatile(\"")
        .chain(src.match_indices(", \"v_mfma"))
    {
        let start = src[i..].find('"').map(|q| i + q + 1).unwrap_or(i);
        let word: String = src[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !word.is_empty() {
            ops.insert(word);
        }
    }
    ops
}

/// Kept as a text check: the table is what the analyses read the prelude's asm by, so it must list
/// exactly what the text issues (the other direction, on the compiled code, is amd_prelude.rs).
#[test]
fn table_matches_the_prelude_text() {
    let issued = issued_opcodes(PRELUDE);
    let listed: BTreeSet<String> = WRAPPED_OPCODES
        .iter()
        .map(|(op, _)| op.to_string())
        .collect();
    // buffer_load_dword and _dwordx4 each have an LDS and a register form: same opcodes.
    assert_eq!(issued, listed);
    assert!(listed.len() >= 20, "{listed:?}");
}

#[test]
fn targets_split_as_the_isa_says() {
    let g942: BTreeSet<_> = wrapped_opcodes(Arch::Cdna3).into_iter().collect();
    let g950: BTreeSet<_> = wrapped_opcodes(Arch::Cdna4).into_iter().collect();
    assert!(g942.contains("v_mfma_f32_16x16x8_xf32") && !g950.contains("v_mfma_f32_16x16x8_xf32"));
    assert!(g950.contains("ds_read_b64_tr_b16") && !g942.contains("ds_read_b64_tr_b16"));
    assert!(wrapped_opcodes(Arch::Hopper).is_empty());
    for arch in [Arch::Cdna3, Arch::Cdna4] {
        let op = bf16_mfma_opcode(arch).unwrap();
        assert!(wrapped_opcodes(arch).contains(&op), "{op}");
        // The built-in kernel (the prelude and `prelude_smoke`) is compiled and its every wrapper
        // found in the assembly by kittens-runtime tests/amd_prelude.rs.
        assert!(builtin_kernel_source("prelude_smoke", arch).is_some());
    }
    assert!(builtin_kernel_source("prelude_smoke", Arch::Hopper).is_none());
    assert!(builtin_kernel_source("no_such_kernel", Arch::Cdna4).is_none());
}
