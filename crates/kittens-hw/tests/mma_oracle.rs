//! Every CDNA3 map equals AMD's Matrix Instruction Calculator output, entry for entry
//! (`tests/data/cdna3_mfma_layouts.json`, provenance in `tests/data/PROVENANCE.md`). The oracle is
//! only read by tests; the catalog computes its maps from closed forms.

use kittens_hw::mma::{self, Entry, Operand};
use kittens_hw::Arch;
use serde_json::Value;
use std::path::PathBuf;

fn oracle() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/cdna3_mfma_layouts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the CDNA3 layout oracle is missing at {} ({e}); it is part of the repository \
             — this test does not skip",
            path.display()
        )
    });
    serde_json::from_str(&text).expect("oracle file is valid JSON")
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("oracle field `{key}` missing or not a number"))
}

fn entries(v: &Value) -> Vec<Entry> {
    let list = v.as_array().expect("oracle map is a list");
    let mut out: Vec<Entry> = list
        .iter()
        .map(|e| {
            let f = |i: usize| {
                e[i].as_u64()
                    .expect("oracle entry is [lane, slot, row, col]") as u32
            };
            Entry {
                lane: f(0),
                slot: f(1),
                row: f(2),
                col: f(3),
            }
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_cdna3_instruction_of_the_oracle_is_in_the_catalog_and_matches() {
    let o = oracle();
    let instrs = o["instructions"]
        .as_object()
        .expect("oracle has an `instructions` object");
    assert!(
        instrs.len() >= 6,
        "oracle lists {} instructions",
        instrs.len()
    );
    for (name, spec) in instrs {
        let i = mma::instr(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.arch, Arch::Cdna3, "{name}");
        assert_eq!(
            (i.m, i.n, i.k),
            (
                num(spec, "M") as u32,
                num(spec, "N") as u32,
                num(spec, "K") as u32
            ),
            "{name}"
        );
        assert_eq!(i.blocks as u64, num(spec, "blocks"), "{name} blocks");
        assert_eq!(i.flops, num(spec, "flops"), "{name} flops");
        assert_eq!(
            i.cycles.map(u64::from),
            Some(num(spec, "cycles")),
            "{name} cycles"
        );
        let gprs = &spec["gprs"];
        for (op, key) in [
            (Operand::A, "A"),
            (Operand::B, "B"),
            (Operand::D, "C"),
            (Operand::D, "D"),
        ] {
            assert_eq!(
                i.regs_per_lane(op) as u64,
                num(gprs, key),
                "{name} gprs {key}"
            );
        }
        for (op, key) in [(Operand::A, "A"), (Operand::B, "B"), (Operand::D, "D")] {
            let mut ours = i.map(op);
            ours.sort();
            let theirs = entries(&spec[key]);
            assert_eq!(ours.len(), theirs.len(), "{name} {key}: entry count");
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!(a, b, "{name} operand {key}");
            }
        }
    }
}

#[test]
fn the_catalog_has_no_cdna3_instruction_the_oracle_lacks() {
    let o = oracle();
    let instrs = o["instructions"]
        .as_object()
        .expect("oracle has an `instructions` object");
    for i in mma::all().iter().filter(|i| i.arch == Arch::Cdna3) {
        assert!(
            instrs.contains_key(i.name),
            "{} is not checked by the oracle",
            i.name
        );
    }
}
