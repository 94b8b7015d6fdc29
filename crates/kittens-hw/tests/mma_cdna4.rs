//! CDNA4 maps against independent statements of them:
//! - fp8 `v_mfma_f32_16x16x128_f8f6f4`: the lane mapping of FP8-tutorial step 6 ("Wave-lane mapping for
//!   16×16×128": `row = lane & 15`, `k_chunk0 = 16·(lane >> 4)`, `k_chunk1 = k_chunk0 + 64`, 16
//!   fp8 per chunk; output rows `4·(lane >> 4) + i`, column `lane & 15`);
//! - bf16 `v_mfma_f32_16x16x32_bf16` / `v_mfma_f32_32x32x16_bf16`: IREE's
//!   `getSingleSubgroupLayout` (compiler/src/iree/compiler/Codegen/Dialect/GPU/IR/IREEGPUAttrs.cpp),
//!   whose outer/thread/tstrides/element description is interpreted below; register widths
//!   against LLVM's assembler test `llvm/test/MC/AMDGPU/mai-gfx950.s`.

use kittens_hw::mma::{self, Entry, Operand};
use std::collections::BTreeMap;

fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
    v.sort();
    v
}

#[test]
fn fp8_16x16x128_follows_seed_002_section_6() {
    let i = mma::instr("v_mfma_f32_16x16x128_f8f6f4").unwrap();
    let mut want_a = Vec::new();
    let mut want_b = Vec::new();
    let mut want_d = Vec::new();
    for lane in 0..64u32 {
        let (row, k_group) = (lane & 15, lane >> 4);
        for j in 0..16 {
            for (chunk, k) in [(0, k_group * 16 + j), (1, 64 + k_group * 16 + j)] {
                let slot = 16 * chunk + j;
                want_a.push(Entry {
                    lane,
                    slot,
                    row,
                    col: k,
                });
                want_b.push(Entry {
                    lane,
                    slot,
                    row: k,
                    col: row,
                });
            }
        }
        for r in 0..4 {
            want_d.push(Entry {
                lane,
                slot: r,
                row: k_group * 4 + r,
                col: lane & 15,
            });
        }
    }
    assert_eq!(sorted(i.map(Operand::A)), sorted(want_a));
    assert_eq!(sorted(i.map(Operand::B)), sorted(want_b));
    assert_eq!(sorted(i.map(Operand::D)), sorted(want_d));
}

/// IREE's `MMASingleSubgroupLayout` for a 2-D operand: lane `l` sits at thread coordinate
/// `(l / tstrides[d]) mod thread[d]` in each dimension; its vector is `outer × element`, row-major,
/// and coordinate `d` of vector entry (o, e) is `o·thread·element + t·element + e`.
struct IreeLayout {
    outer: [u32; 2],
    thread: [u32; 2],
    tstrides: [u32; 2],
    element: [u32; 2],
}

impl IreeLayout {
    fn entries(&self, lanes: u32) -> Vec<Entry> {
        let mut out = Vec::new();
        for lane in 0..lanes {
            let t = [0, 1].map(|d| (lane / self.tstrides[d]) % self.thread[d]);
            let mut slot = 0;
            for o0 in 0..self.outer[0] {
                for o1 in 0..self.outer[1] {
                    for e0 in 0..self.element[0] {
                        for e1 in 0..self.element[1] {
                            let at = |d: usize, o: u32, e: u32| {
                                (o * self.thread[d] + t[d]) * self.element[d] + e
                            };
                            out.push(Entry {
                                lane,
                                slot,
                                row: at(0, o0, e0),
                                col: at(1, o1, e1),
                            });
                            slot += 1;
                        }
                    }
                }
            }
        }
        out
    }
}

/// IREE's `mfmaLhs16xK`, `mfmaRhsKx16`, `mfmaLhs32xK`, `mfmaRhsKx32`, `mfmaAcc16x16`, `mfmaAcc32x32`.
fn iree(m: u32, k: u32, op: Operand) -> IreeLayout {
    let g = 64 / m;
    match op {
        Operand::A => IreeLayout {
            outer: [1, 1],
            thread: [m, g],
            tstrides: [1, m],
            element: [1, k / g],
        },
        Operand::B => IreeLayout {
            outer: [1, 1],
            thread: [g, m],
            tstrides: [m, 1],
            element: [k / g, 1],
        },
        Operand::D if m == 16 => IreeLayout {
            outer: [1, 1],
            thread: [4, 16],
            tstrides: [16, 1],
            element: [4, 1],
        },
        Operand::D => IreeLayout {
            outer: [4, 1],
            thread: [2, 32],
            tstrides: [32, 1],
            element: [4, 1],
        },
    }
}

#[test]
fn bf16_maps_equal_iree_subgroup_layouts() {
    for name in ["v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16"] {
        let i = mma::instr(name).unwrap();
        for op in Operand::ALL {
            assert_eq!(
                sorted(i.map(op)),
                sorted(iree(i.m, i.k, op).entries(64)),
                "{name} {op}"
            );
        }
    }
}

/// The same interpreter reproduces the CDNA3 maps, so it is a fair reading of IREE's encoding.
#[test]
fn the_iree_reading_also_reproduces_cdna3() {
    for name in [
        "v_mfma_f32_16x16x16_bf16",
        "v_mfma_f32_32x32x8_bf16",
        "v_mfma_f32_16x16x32_fp8_fp8",
    ] {
        let i = mma::instr(name).unwrap();
        for op in Operand::ALL {
            assert_eq!(
                sorted(i.map(op)),
                sorted(iree(i.m, i.k, op).entries(64)),
                "{name} {op}"
            );
        }
    }
}

/// IREE gives the f8f6f4 shapes one contiguous run of 32 K values per lane; FP8-tutorial step 6 splits it
/// into two runs of 16, 64 apart. For an unscaled product both are valid: they differ by one
/// permutation of K applied to A and B alike, which leaves `A·B` unchanged. (With block scales
/// the true hardware order matters; see docs/layouts.md.)
#[test]
fn f8f6f4_maps_differ_from_iree_only_by_a_shared_k_permutation() {
    for name in ["v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_32x32x64_f8f6f4"] {
        let i = mma::instr(name).unwrap();
        let mut perm: BTreeMap<u32, u32> = BTreeMap::new();
        for (op, k_of) in [
            (Operand::A, (|e: &Entry| e.col) as fn(&Entry) -> u32),
            (Operand::B, |e: &Entry| e.row),
        ] {
            let ours = sorted(i.map(op));
            let theirs = sorted(iree(i.m, i.k, op).entries(64));
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!((a.lane, a.slot), (b.lane, b.slot));
                let other = |e: &Entry| if op == Operand::A { e.row } else { e.col };
                assert_eq!(other(a), other(b), "{name} {op}: M/N index must agree");
                let prev = perm.insert(k_of(b), k_of(a));
                assert!(
                    prev.is_none() || prev == Some(k_of(a)),
                    "{name}: not one K permutation"
                );
            }
        }
        let image: std::collections::BTreeSet<u32> = perm.values().copied().collect();
        assert_eq!(
            (perm.len(), image.len()),
            (i.k as usize, i.k as usize),
            "{name}: K permutation is a bijection"
        );
        assert!(
            perm.iter().any(|(a, b)| a != b),
            "{name}: the two orders really differ"
        );
        assert_eq!(
            sorted(i.map(Operand::D)),
            sorted(iree(i.m, i.k, Operand::D).entries(64)),
            "{name} D"
        );
    }
}

/// Operand register widths of the gfx950 assembler test (`v[a:b]` spans b − a + 1 registers).
#[test]
fn register_widths_match_llvm_mc_gfx950() {
    // (instruction, D, A, B) as in the first `// GFX950:` line of each instruction in mai-gfx950.s.
    for (name, d, a, b) in [
        ("v_mfma_f32_16x16x32_bf16", "v[0:3]", "v[0:3]", "v[0:3]"),
        ("v_mfma_f32_32x32x16_bf16", "v[0:15]", "v[0:3]", "v[0:3]"),
        (
            "v_mfma_f32_16x16x128_f8f6f4",
            "v[0:3]",
            "v[4:11]",
            "v[4:11]",
        ),
        (
            "v_mfma_f32_32x32x64_f8f6f4",
            "v[0:15]",
            "v[4:11]",
            "v[4:11]",
        ),
    ] {
        let width = |s: &str| {
            let (lo, hi) = s
                .trim_start_matches("v[")
                .trim_end_matches(']')
                .split_once(':')
                .unwrap();
            hi.parse::<u32>().unwrap() - lo.parse::<u32>().unwrap() + 1
        };
        let i = mma::instr(name).unwrap();
        assert_eq!(i.regs_per_lane(Operand::D), width(d), "{name} D");
        assert_eq!(i.regs_per_lane(Operand::A), width(a), "{name} A");
        assert_eq!(i.regs_per_lane(Operand::B), width(b), "{name} B");
    }
}

/// CDNA4 keeps CDNA3's `v_mfma_f32_16x16x16_bf16` (same encoding, VOP3P-MAI opcode 0x61, which
/// LLVM assembles for gfx950 as for gfx942): its CDNA4 entry is the CDNA3 one (checked against the
/// AMD Matrix Instruction Calculator in `mma_oracle.rs`) in shape, types and every operand map, and
/// the name finds each architecture's own entry.
#[test]
fn cdna4_keeps_the_cdna3_16x16x16_bf16_form() {
    use kittens_hw::Arch;
    let name = "v_mfma_f32_16x16x16_bf16";
    let c3 = mma::instr_on(name, Arch::Cdna3).unwrap();
    let c4 = mma::instr_on(name, Arch::Cdna4).unwrap();
    assert_eq!((c3.arch, c4.arch), (Arch::Cdna3, Arch::Cdna4));
    assert_eq!((c4.m, c4.n, c4.k), (16, 16, 16));
    assert_eq!(
        (c4.a_dtype, c4.b_dtype, c4.acc_dtype, c4.lanes, c4.flops),
        (c3.a_dtype, c3.b_dtype, c3.acc_dtype, c3.lanes, c3.flops)
    );
    for op in [Operand::A, Operand::B, Operand::D] {
        assert_eq!(sorted(c4.map(op)), sorted(c3.map(op)), "{op}");
    }
    // A 16×32 bf16 product still finds the double-rate form first on CDNA4.
    let first = mma::all()
        .iter()
        .find(|i| i.arch == Arch::Cdna4 && i.a_dtype == c4.a_dtype && (i.m, i.n) == (16, 16))
        .unwrap();
    assert_eq!(first.name, "v_mfma_f32_16x16x32_bf16");
}
