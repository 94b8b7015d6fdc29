//! Pinned register tiles (HipKittens §3.2.1, D.3): a tile pinned to `first..=last` of the VGPR or AGPR
//! file is split in order among its base tiles, and every MFMA that reads it names those registers
//! through physical-register constraints (`"{a[8:11]}"`). The compiler still moves data in and out
//! for the other ops, but the matrix instruction itself reads its A/B operands from exactly the pinned
//! registers, AGPRs included — which HIP's builtins never choose on their own — and a fresh
//! accumulator (no C) is written there. A value the compiler holds elsewhere is copied into the named
//! registers before each use; for an operand that does not change over a loop the copy is hoisted out
//! of it, so K and V of the attention backward stay in their AGPRs for the whole key loop.
//!
//! An accumulator an MFMA adds into is pinned to its register file instead (`"+a"`): its value lives
//! across MFMAs (the backward's dK and dV across the whole key loop), and a loop-carried value tied to
//! fixed registers is copied into them and out again every iteration (gfx950, clang 22: 128
//! `v_accvgpr_mov` per key step for dK and dV). With the file constraint, and the value placed in the
//! file wherever another op writes the tile (`KITTENS_IN_AGPRS`, [`Emitter::place_pinned`]), the
//! compiler keeps it in AGPRs with no copy in the loop. Physical constraints also tell the compiler
//! how many AGPRs the kernel needs (no reservation needed).

use super::layout::AbtPlan;
use super::lower::Emitter;
use kittens_ir::Op;
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

/// Names and tiles of the three operands of an `mma_abt`, with their per-lane element counts, and
/// whether A and B are stored transposed (`mma_atb`'s K×M A, K×N B: base tiles indexed `[k][m]`).
pub(super) struct AbtOperands<'a> {
    pub d: (&'a str, &'a RegTile, u32),
    pub a: (&'a str, &'a RegTile, u32),
    pub b: (&'a str, &'a RegTile, u32),
    pub transposed: (bool, bool),
}

impl Emitter<'_> {
    /// An MFMA with at least one pinned operand: fully unrolled, one statement per MFMA, so each
    /// names its base tiles' registers. The statement is the prelude's `KITTENS_PINNED_MFMA` (asm
    /// with physical-register constraints; the host emulation's header calls the MFMA's function
    /// instead). Where the compiler schedules the kernel's MFMAs (the 4-wave interleave) the asm
    /// is not volatile, so that the compiler may place it between the cluster's loads like the
    /// builtins; its operands' data dependencies still order it.
    pub(super) fn mma_pinned(&mut self, plan: &AbtPlan, ops: &AbtOperands, zero_first: bool) {
        let AbtOperands {
            d: (dn, dt, de),
            a: (an, at, ae),
            b: (bn, bt, be),
            transposed: (ta, tb),
        } = ops;
        let (mr, nr) = dt.base_grid();
        let kr = if *ta {
            at.base_grid().0
        } else {
            at.base_grid().1
        };
        // Base tile (row, col) of operand index (m or n, k) of a possibly transposed operand.
        let at_ix = |tr: bool, mn: u32, k: u32| if tr { (k, mn) } else { (mn, k) };
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
        let f = opcode.trim_start_matches("v_");
        let volatile = if self.compiler_scheduled() { 0 } else { 1 };
        self.line(format!(
            "// pinned operands: {mr}x{nr} accumulators x {kr} K tiles x {} {opcode}",
            plan.splits
        ));
        for i in 0..mr {
            for j in 0..nr {
                let exact = constraint(dt, *de, i, j, (0, 1));
                // An accumulator an MFMA adds into is pinned to its file only (module docs).
                let file = match dt.pin {
                    Some(p) if p.file == RegFile::Agpr => "a".to_string(),
                    _ => "v".to_string(),
                };
                for kk in 0..kr {
                    let (ai, ak) = at_ix(*ta, i, kk);
                    let (bj, bk) = at_ix(*tb, j, kk);
                    for h in 0..plan.splits {
                        let av = part(format!("{an}[{ai}][{ak}]"), h);
                        let bv = part(format!("{bn}[{bj}][{bk}]"), h);
                        let (ca, cb) = (
                            constraint(at, *ae, ai, ak, (h, plan.splits)),
                            constraint(bt, *be, bj, bk, (h, plan.splits)),
                        );
                        let fresh = zero_first && kk == 0 && h == 0;
                        let (form, cd) = match (fresh, exact.as_str()) {
                            (true, "v") => ("KITTENS_PINNED_MFMA_ZERO", "=&v".to_string()),
                            (true, _) => ("KITTENS_PINNED_MFMA_ZERO", format!("={exact}")),
                            (false, _) => ("KITTENS_PINNED_MFMA", format!("+{file}")),
                        };
                        self.line(format!(
                            "{form}({volatile}, {f}, \"{opcode}\", \"{cd}\", \"{ca}\", \"{cb}\", {dn}[{i}][{j}], {av}, {bv});"
                        ));
                    }
                }
            }
        }
    }
}

impl Emitter<'_> {
    /// After an op other than an MFMA wrote a tile pinned to AGPRs (a fill, a transpose, a load), the
    /// value is placed in the AGPR file, so the MFMAs' file constraints find it there (module docs).
    pub(super) fn place_pinned(&mut self, op: &Op) {
        if matches!(
            op,
            Op::Mma { .. } | Op::StoreShared { .. } | Op::StoreGlobal { .. }
        ) {
            return;
        }
        let Some(&dst) = op.regs().first() else {
            return;
        };
        let Some(t) = self.k.reg(dst).tile().copied() else {
            return;
        };
        if t.pin.is_some_and(|p| p.file == RegFile::Agpr) {
            let ((name, _), (gr, gc)) = (self.reg(dst), t.base_grid());
            for tile in super::lower::base_tiles(&name, gr, gc) {
                self.line(format!("KITTENS_IN_AGPRS({tile});"));
            }
        }
    }
}
