//! Which lane holds which element of a register base tile, as closed forms the HIP code can compute.
//!
//! The maps themselves come from the matrix-instruction catalog (`kittens_hw::mma`, checked there
//! against AMD's Matrix Instruction Calculator); this module never restates a layout. It picks the
//! instruction operand a base tile stands for and fits, per slot, the affine form
//! `row = r0 + ri·(lane % G) + rg·(lane / G)` (same for the column), verifying every lane. The fitted
//! coefficients are what the lowering prints.
//!
//! Convention (HipKittens §3.2.2, D.1): a row-layout base tile of `R × C` is the A operand (M×K) of the
//! target's MFMA with `M = R, K = C`; a column-layout `f32` base tile of `R × C` is the accumulator
//! (M×N). A B operand is stored N×K in row layout, which is the A map transposed (checked where used).

use super::LowerError;
use kittens_hw::mma::{self, MmaInstr, Operand};
use kittens_hw::{dtype::DType, Arch};
use kittens_tile::{BaseShape, Layout};

/// `value = base + per_idx·(lane % group) + per_group·(lane / group)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Affine {
    pub base: u32,
    pub per_idx: u32,
    pub per_group: u32,
}

/// Where slot `s` of every lane sits: `slots[s] = (row, col)`, both affine in the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMap {
    pub instr: &'static str,
    pub group: u32,
    pub slots: Vec<(Affine, Affine)>,
}

impl LaneMap {
    pub fn elems_per_lane(&self) -> u32 {
        self.slots.len() as u32
    }

    /// True when each lane's slots are consecutive columns of one row (one vector LDS access).
    pub fn row_contiguous(&self) -> bool {
        self.slots.iter().enumerate().all(|(s, (r, c))| {
            let (r0, c0) = self.slots[0];
            *r == r0
                && c.per_idx == c0.per_idx
                && c.per_group == c0.per_group
                && c.base == c0.base + s as u32
        })
    }

    /// The length of the runs when each lane's slots are several runs of `len` consecutive columns of
    /// one row (the fp8 16×128 operand: two runs of 16, FP8-tutorial §6's K chunks `16·(lane/16)` and
    /// `+64`), each run a vector LDS access; `None` when the slots are not such runs of 8 or 16 bytes.
    pub fn row_runs(&self, elem_bytes: u32) -> Option<usize> {
        let n = self.slots.len();
        [16, 8]
            .into_iter()
            .map(|bytes| (bytes / elem_bytes.max(1)) as usize)
            .filter(|&len| len > 0 && len < n && n.is_multiple_of(len))
            .find(|&len| {
                self.slots.chunks(len).all(|run| {
                    let (r0, c0) = run[0];
                    run.iter().enumerate().all(|(s, (r, c))| {
                        *r == r0
                            && c.per_idx == c0.per_idx
                            && c.per_group == c0.per_group
                            && c.base == c0.base + s as u32
                    })
                })
            })
    }

    /// The same elements with rows and columns exchanged (the map of the transposed tile).
    pub fn transposed(&self) -> LaneMap {
        LaneMap {
            instr: self.instr,
            group: self.group,
            slots: self.slots.iter().map(|&(r, c)| (c, r)).collect(),
        }
    }

    /// True when both maps put every lane's every slot on the same element.
    pub fn same_as(&self, o: &LaneMap) -> bool {
        self.slots.len() == o.slots.len()
            && (0..64).all(|l| (0..self.slots.len()).all(|s| self.at(l, s) == o.at(l, s)))
    }

    /// The (row, col) of `lane`'s slot `s`, evaluated on the host (tests, checks).
    pub fn at(&self, lane: u32, s: usize) -> (u32, u32) {
        let (i, g) = (lane % self.group, lane / self.group);
        let (r, c) = self.slots[s];
        (
            r.base + r.per_idx * i + r.per_group * g,
            c.base + c.per_idx * i + c.per_group * g,
        )
    }
}

/// The MFMA of `arch` whose operand `op` has shape `rows × cols` and element type `dtype`.
fn find_instr(
    arch: Arch,
    dtype: DType,
    op: Operand,
    shape: BaseShape,
) -> Option<&'static MmaInstr> {
    mma::all().iter().find(|i| {
        i.arch == arch
            && i.lanes == 64
            && i.dtype(op) == dtype
            && i.rows_cols(op) == (shape.rows, shape.cols)
            && (op != Operand::D || i.a_dtype == DType::Bf16)
    })
}

/// The lane map of a register base tile, or why the lowering cannot place it.
///
/// A row-layout tile is an MFMA A operand; one whose dtype no MFMA takes (an `f32` tile about to be
/// converted, HipKittens E.3's `q` in f32) borrows the bf16 A map of its shape, so the conversion is
/// lane-local. A column-layout `f32` tile is an accumulator; any other column-layout tile of `R × C` is
/// the row map of `C × R` transposed (HipKittens' `swap_layout_and_transpose` is then a register
/// rename, and `mma_atb` reads it as the A/B operand it stands for).
pub fn lane_map(
    arch: Arch,
    dtype: DType,
    layout: Layout,
    base: BaseShape,
) -> Result<LaneMap, LowerError> {
    match (layout, dtype) {
        (Layout::Row, _) => row_map(arch, dtype, base)
            .or_else(|e| row_map(arch, DType::Bf16, base).map_err(|_| e))
            .or_else(|e| {
                // An f32 row tile no A operand fits (gfx950 has no 16x16 bf16 A in the catalog): the
                // accumulator map transposed, so transposing an accumulator into it is a rename.
                operand_map(
                    arch,
                    DType::F32,
                    Operand::D,
                    BaseShape::new(base.cols, base.rows),
                )
                .map(|m| m.transposed())
                .map_err(|_| e)
            }),
        (Layout::Col, DType::F32) => operand_map(arch, dtype, Operand::D, base)
            .or_else(|e| col_as_transposed_row(arch, dtype, base).map_err(|_| e)),
        (Layout::Col, _) => col_as_transposed_row(arch, dtype, base),
    }
}

fn col_as_transposed_row(arch: Arch, dtype: DType, base: BaseShape) -> Result<LaneMap, LowerError> {
    lane_map(
        arch,
        dtype,
        Layout::Row,
        BaseShape::new(base.cols, base.rows),
    )
    .map(|m| m.transposed())
}

fn row_map(arch: Arch, dtype: DType, base: BaseShape) -> Result<LaneMap, LowerError> {
    operand_map(arch, dtype, Operand::A, base)
}

fn operand_map(
    arch: Arch,
    dtype: DType,
    op: Operand,
    base: BaseShape,
) -> Result<LaneMap, LowerError> {
    let what = if op == Operand::A {
        "row-layout tile as an MFMA A operand"
    } else {
        "column-layout f32 tile as an MFMA accumulator"
    };
    // A row tile wider in K than any CDNA3 MFMA (16×32 bf16, HipKittens' default shape) keeps CDNA4's
    // layout; `mfma_for_abt` then splits its K over several CDNA3 MFMAs.
    let cdna4_layout = || {
        (op == Operand::A && arch == Arch::Cdna3)
            .then(|| find_instr(Arch::Cdna4, dtype, op, base))
            .flatten()
    };
    let instr = find_instr(arch, dtype, op, base)
        .or_else(cdna4_layout)
        .ok_or_else(|| {
            LowerError::Layout(format!(
                "no {} MFMA fits a {base} {dtype:?} {what}",
                arch.target()
            ))
        })?;
    fit(instr, op)
}

/// Fit the per-slot affine forms of `instr`'s operand `op`, trying lane groups of 16 and 32.
pub fn fit(instr: &'static MmaInstr, op: Operand) -> Result<LaneMap, LowerError> {
    let per_lane = instr.elems_per_lane(op);
    for group in [16u32, 32, 64] {
        let mut slots = Vec::with_capacity(per_lane as usize);
        for s in 0..per_lane {
            let at = |lane: u32| instr.element(op, lane, s);
            let (r0, c0) = at(0);
            let step = |lane: u32, v0: u32, f: fn((u32, u32)) -> u32| f(at(lane)).checked_sub(v0);
            let coeffs = (|| {
                let ri = if group > 1 { step(1, r0, |p| p.0)? } else { 0 };
                let ci = if group > 1 { step(1, c0, |p| p.1)? } else { 0 };
                let rg = if group < 64 {
                    step(group, r0, |p| p.0)?
                } else {
                    0
                };
                let cg = if group < 64 {
                    step(group, c0, |p| p.1)?
                } else {
                    0
                };
                Some((
                    Affine {
                        base: r0,
                        per_idx: ri,
                        per_group: rg,
                    },
                    Affine {
                        base: c0,
                        per_idx: ci,
                        per_group: cg,
                    },
                ))
            })();
            let Some(c) = coeffs else { break };
            slots.push(c);
        }
        if slots.len() != per_lane as usize {
            continue;
        }
        let map = LaneMap {
            instr: instr.name,
            group,
            slots,
        };
        let exact = (0..instr.lanes).all(|l| {
            (0..per_lane as usize).all(|s| map.at(l, s) == instr.element(op, l, s as u32))
        });
        if exact {
            return Ok(map);
        }
    }
    Err(LowerError::Layout(format!(
        "{} operand {op}: lane map is not affine in lane groups",
        instr.name
    )))
}

/// How one `mma_abt` on base tiles runs: `instr` applied `splits` times, split `h` taking slots
/// `h·slots .. (h+1)·slots` of each lane's A and B elements.
#[derive(Debug, Clone, Copy)]
pub struct AbtPlan {
    pub instr: &'static MmaInstr,
    pub splits: u32,
    pub slots: u32,
}

impl AbtPlan {
    /// How accumulator lane map `dm` holds the instruction's result: `Some(false)` where each lane's
    /// slot is the element the MFMA writes there; `Some(true)` where it is the transposed element (a
    /// row-layout f32 16×16 tile: the lane holds a row's run of columns, the MFMA writes a column's
    /// run of rows), which the MFMA yields with its operands swapped (`B·Aᵀ = (A·Bᵀ)ᵀ`, AMD's matrix
    /// instruction layouts, docs/references.md "CDNA3 ISA"); `None` otherwise. The swap needs a square
    /// instruction whose A and B lane layouts hold `bm` and `am` as they hold `am` and `bm`.
    pub fn d_transposed(&self, dm: &LaneMap, am: &LaneMap, bm: &LaneMap) -> Option<bool> {
        let i = self.instr;
        let n = i.elems_per_lane(Operand::D);
        if dm.elems_per_lane() != n {
            return None;
        }
        let holds = |tr: bool| {
            (0..64).all(|l| {
                (0..n).all(|s| {
                    let (r, c) = i.element(Operand::D, l, s);
                    let m = dm.at(l, s as usize);
                    m == if tr { (c, r) } else { (r, c) }
                })
            })
        };
        if holds(false) {
            return Some(false);
        }
        let swapped_fits = i.m == i.n
            && (0..self.splits).all(|h| {
                (0..64).all(|l| {
                    (0..self.slots).all(|s| {
                        let t = (h * self.slots + s) as usize;
                        let ((br, bk), (an, ak)) = (bm.at(l, t), am.at(l, t));
                        let (ir, _) = i.element(Operand::A, l, s);
                        let (_, ic) = i.element(Operand::B, l, s);
                        br == ir && an == ic && ak == bk
                    })
                })
            });
        (swapped_fits && holds(true)).then_some(true)
    }
}

/// The MFMA of `arch` that computes base tiles `a` (row layout, M×K) times `b` (row layout, N×K)ᵀ into
/// an `f32` accumulator of `acc`, given the tiles' lane maps.
///
/// An MFMA sums over K in whatever order its lanes present K, so a tile may feed it any permutation of
/// K as long as A and B use the same one. The check, per split, lane and slot: A's element sits in the
/// instruction's A row, B's in its B column, and both carry the same K index. This is what lets a 16×32
/// tile (CDNA4's layout) run as two 16×16×16 MFMAs on CDNA3.
pub fn mfma_for_abt(
    arch: Arch,
    dtype: DType,
    (a, am): (BaseShape, &LaneMap),
    (b, bm): (BaseShape, &LaneMap),
    acc: BaseShape,
) -> Result<AbtPlan, LowerError> {
    let fits = |i: &&'static MmaInstr| {
        i.arch == arch
            && i.lanes == 64
            && i.a_dtype == dtype
            && (i.m, i.n) == (a.rows, b.rows)
            && a.cols % i.k == 0
            && b.cols == a.cols
            && i.rows_cols(Operand::D) == (acc.rows, acc.cols)
    };
    let consistent = |i: &MmaInstr, splits: u32, slots: u32| {
        (0..splits).all(|h| {
            (0..64).all(|l| {
                (0..slots).all(|s| {
                    let t = (h * slots + s) as usize;
                    let ((ar, ak), (bn, bk)) = (am.at(l, t), bm.at(l, t));
                    let (ir, _) = i.element(Operand::A, l, s);
                    let (_, ic) = i.element(Operand::B, l, s);
                    ar == ir && bn == ic && ak == bk
                })
            })
        })
    };
    let per_lane = am.elems_per_lane();
    mma::all()
        .iter()
        .filter(fits)
        .map(|i| (i, a.cols / i.k, i.elems_per_lane(Operand::A)))
        .find(|&(i, splits, slots)| {
            splits * slots == per_lane
                && per_lane == bm.elems_per_lane()
                && consistent(i, splits, slots)
        })
        .map(|(instr, splits, slots)| AbtPlan {
            instr,
            splits,
            slots,
        })
        .ok_or_else(|| {
            LowerError::Layout(format!(
                "no {} MFMA computes {a}·({b})ᵀ into {acc} from these maps",
                arch.target()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fitted forms reproduce the catalog for every CDNA instruction's every operand.
    #[test]
    fn every_cdna_map_fits() {
        for i in mma::all().iter().filter(|i| i.arch.is_amd()) {
            for op in [Operand::A, Operand::B, Operand::D] {
                let m = fit(i, op).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(m.elems_per_lane(), i.elems_per_lane(op));
            }
        }
    }

    /// HipKittens §3.2.2: the bf16 base tiles are 16x32 (CDNA4) and 16x16 (CDNA3), each lane holding 8 and
    /// 4 consecutive K values: one ds_read_b128 / ds_read_b64.
    #[test]
    fn bf16_row_tiles_are_row_contiguous() {
        let m = lane_map(Arch::Cdna4, DType::Bf16, Layout::Row, BaseShape::S16X32).unwrap();
        assert!(m.row_contiguous() && m.elems_per_lane() == 8);
        let m = lane_map(Arch::Cdna3, DType::Bf16, Layout::Row, BaseShape::S16X16).unwrap();
        assert!(m.row_contiguous() && m.elems_per_lane() == 4);
        let acc = lane_map(Arch::Cdna4, DType::F32, Layout::Col, BaseShape::S16X16).unwrap();
        assert!(!acc.row_contiguous() && acc.elems_per_lane() == 4);
        for (arch, k_splits) in [(Arch::Cdna4, 1), (Arch::Cdna3, 2)] {
            let t = lane_map(arch, DType::Bf16, Layout::Row, BaseShape::S16X32).unwrap();
            let s = BaseShape::S16X32;
            let plan =
                mfma_for_abt(arch, DType::Bf16, (s, &t), (s, &t), BaseShape::S16X16).unwrap();
            assert_eq!(plan.splits, k_splits, "{}", arch.target());
        }
        let t = lane_map(Arch::Cdna3, DType::Bf16, Layout::Row, BaseShape::S16X16).unwrap();
        let s = BaseShape::S16X16;
        let plan = mfma_for_abt(Arch::Cdna3, DType::Bf16, (s, &t), (s, &t), s).unwrap();
        assert_eq!(
            (plan.instr.name, plan.splits),
            ("v_mfma_f32_16x16x16_bf16", 1)
        );
    }

    /// HipKittens E.3's attention transposes cost nothing: a column-layout bf16 tile is the row tile of
    /// the transposed shape (so `transpose(k_t, k_r)` renames registers and `mma_atb` reads it as the A
    /// operand), and the f32 accumulator transposed is the f32 row tile `o_q` the output store uses.
    #[test]
    fn attention_transposes_are_renames() {
        for arch in [Arch::Cdna4, Arch::Cdna3] {
            let col = lane_map(arch, DType::Bf16, Layout::Col, BaseShape::S32X16).unwrap();
            let row = lane_map(arch, DType::Bf16, Layout::Row, BaseShape::S16X32).unwrap();
            assert!(col.same_as(&row.transposed()), "{}", arch.target());
            let acc = lane_map(arch, DType::F32, Layout::Col, BaseShape::S16X16).unwrap();
            let out = lane_map(arch, DType::F32, Layout::Row, BaseShape::S16X16).unwrap();
            assert!(out.same_as(&acc.transposed()), "{}", arch.target());
            // The f32 copy of Q shares the bf16 Q map: scaling and rounding stay lane-local.
            let qf = lane_map(arch, DType::F32, Layout::Row, BaseShape::S16X32).unwrap();
            assert!(qf.same_as(&row));
            // ...but the accumulator is not the bf16 P operand: that copy needs the LDS remap.
            assert!(!acc.same_as(&col) && acc.elems_per_lane() != col.elems_per_lane());
        }
    }
}
