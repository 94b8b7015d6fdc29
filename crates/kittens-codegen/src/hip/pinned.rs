//! Pinned register tiles (HipKittens §3.2.1, D.3): a tile pinned to `first..=last` of the VGPR or AGPR
//! file is split in order among its base tiles, and every MFMA that reads or writes it names those
//! registers through physical-register constraints (`"{a[8:11]}"`). The compiler still moves data in
//! and out for the other ops, but the matrix instruction itself reads its A/B operands and accumulates
//! in exactly the pinned registers, AGPRs included — which HIP's builtins never choose on their own.
//! Physical constraints also tell the compiler how many AGPRs the kernel needs (no reservation needed).

use super::layout::AbtPlan;
use super::lower::Emitter;
use kittens_tile::{RegFile, RegTile};

/// The register range of base tile `(bi, bj)` of a pinned tile (or of split `h` of `splits` of it), as
/// an asm constraint; `"v"` for a compiler-allocated tile.
pub(super) fn constraint(
    tile: &RegTile,
    elems: u32,
    bi: u32,
    bj: u32,
    split: (u32, u32),
) -> String {
    let Some(pin) = tile.pin else {
        return "v".to_string();
    };
    let per_base = (elems * tile.dtype.bytes()).div_ceil(4);
    let (h, splits) = split;
    let n = per_base / splits;
    let first = pin.first + (bi * tile.base_grid().1 + bj) * per_base + h * n;
    let file = if pin.file == RegFile::Agpr { "a" } else { "v" };
    if n == 1 {
        format!("{{{file}{first}}}")
    } else {
        format!("{{{file}[{first}:{}]}}", first + n - 1)
    }
}

/// Names and tiles of the three operands of an `mma_abt`, with their per-lane element counts.
pub(super) struct AbtOperands<'a> {
    pub d: (&'a str, &'a RegTile, u32),
    pub a: (&'a str, &'a RegTile, u32),
    pub b: (&'a str, &'a RegTile, u32),
}

impl Emitter<'_> {
    /// `mma_abt` with at least one pinned operand: fully unrolled, one asm statement per MFMA, so each
    /// names its base tiles' registers.
    pub(super) fn mma_pinned(&mut self, plan: &AbtPlan, ops: &AbtOperands, zero_first: bool) {
        let AbtOperands {
            d: (dn, dt, de),
            a: (an, at, ae),
            b: (bn, bt, be),
        } = ops;
        let (mr, nr, kr) = (dt.base_grid().0, dt.base_grid().1, at.base_grid().1);
        let part = |v: String, h: u32| match plan.splits {
            1 => v,
            _ => {
                let idx: Vec<String> = (h * plan.slots..(h + 1) * plan.slots)
                    .map(|x| x.to_string())
                    .collect();
                format!("__builtin_shufflevector({v}, {v}, {})", idx.join(", "))
            }
        };
        let opcode = plan.instr.name;
        self.line(format!(
            "// pinned operands: {mr}x{nr} accumulators x {kr} K tiles x {} {opcode}",
            plan.splits
        ));
        for i in 0..mr {
            for j in 0..nr {
                let cd = constraint(dt, *de, i, j, (0, 1));
                let cd_fresh = if cd == "v" {
                    "=&v".to_string()
                } else {
                    format!("={cd}")
                };
                for kk in 0..kr {
                    for h in 0..plan.splits {
                        let av = part(format!("{an}[{i}][{kk}]"), h);
                        let bv = part(format!("{bn}[{j}][{kk}]"), h);
                        let (ca, cb) = (
                            constraint(at, *ae, i, kk, (h, plan.splits)),
                            constraint(bt, *be, j, kk, (h, plan.splits)),
                        );
                        if zero_first && kk == 0 && h == 0 {
                            self.line(format!(
                                "asm volatile(\"{opcode} %0, %1, %2, 0\" : \"{cd_fresh}\"({dn}[{i}][{j}]) : \"{ca}\"({av}), \"{cb}\"({bv}));"
                            ));
                        } else {
                            self.line(format!(
                                "asm volatile(\"{opcode} %0, %1, %2, %0\" : \"+{cd}\"({dn}[{i}][{j}]) : \"{ca}\"({av}), \"{cb}\"({bv}));"
                            ));
                        }
                    }
                }
            }
        }
    }
}
