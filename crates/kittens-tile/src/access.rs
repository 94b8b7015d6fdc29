//! Access patterns: the byte address every lane gives each shared-memory instruction that moves a register
//! tile to or from a shared tile, and the bank conflicts of every phase.
//!
//! Which elements a lane holds comes from the matrix-instruction catalog (`kittens_hw::mma`), never from a
//! hand-written layout: a row-layout tile of base shape R×C is the A operand (M×K = R×C, K along columns) of
//! the vendor's matrix instruction of that shape, a column-layout tile the B operand (K×N = R×C, K along
//! rows). How a lane's address relates to those elements depends on the instruction:
//! - plain loads and stores (`ds_read_b128`, `ds_read_b64`, `ds_write_b64`, …): a lane moves its own next
//!   `bytes_per_lane` of consecutive row elements, so the address is that of the first;
//! - `ds_read_b64_tr_b16` (CDNA4 ISA guide §11.4, HipKittens D.1): in each group of 16 lanes, lane `i` reads
//!   4 consecutive elements of row `i / 4` of the group's 4-row block, namely the columns held by lanes
//!   `4·(i % 4) .. +4` of the group, and the hardware hands element `q` of them to those lanes (HipKittens D.1:
//!   "thread 4 reads the first element in the second row ... into thread 0's register"); the same lane
//!   arithmetic as HipKittens' column-layout `load`;
//! - `ldmatrix` (PTX ISA): each 8×8 matrix of the fragment (two consecutive slots per lane, lane `l` holding
//!   row `l / 4`, columns `2·(l % 4)..+2`) has its 8 row addresses supplied by lanes `8q .. 8q + 7`.
//!
//! Shared and register tiles meet on a *region*: when the shared tile is the larger, register tiles are
//! placed at every multiple of their shape inside it; when it is the smaller, the register tile spans
//! several shared tiles stored one after the other in row-major tile order (HipKittens D.1; also how TMA
//! stores a tile as boxes of the swizzle width).

use crate::{check_load, BaseShape, DType, Layout, RegTile, SharedTile, TileError};
use kittens_hw::lds::{self, DsInstr, Vendor};
use kittens_hw::mma::{self, Family, Operand};
use kittens_hw::Arch;
use serde::Serialize;

/// One issued shared-memory instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    /// Byte address each lane gives the instruction, relative to the first shared tile.
    pub addrs: Vec<Option<u32>>,
    /// The region elements (row, col) each lane's access covers, in address order.
    pub elems: Vec<Vec<(u32, u32)>>,
}

/// The conflict degree of one phase of one issued instruction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseConflict {
    pub instruction: u32,
    pub phase: u32,
    pub lanes: Vec<u32>,
    pub conflict: u32,
}

/// Everything [`analyze`] finds.
#[derive(Debug, Clone, Serialize)]
pub struct BankReport {
    pub instr: DsInstr,
    pub shared: SharedTile,
    pub reg: RegTile,
    /// The matrix instruction and operand whose lane map the register tile uses.
    pub lane_map: (&'static str, Operand),
    /// Rows × cols of the region the instructions cover.
    pub region: (u32, u32),
    pub issues: Vec<Issue>,
    pub phases: Vec<PhaseConflict>,
    pub max_conflict: u32,
}

/// Lane → slot → (row, col) of one base tile, and the instruction it comes from.
struct LaneMap {
    instr: &'static str,
    op: Operand,
    map: Vec<Vec<(u32, u32)>>,
}

/// An operand's (rows, cols) in an instruction.
type OperandShape = fn(&mma::MmaInstr) -> (u32, u32);

/// The operand a register tile of `layout` plays and its shape (rows, cols) in an instruction.
fn operand_of(layout: Layout) -> (Operand, OperandShape) {
    match layout {
        Layout::Row => (Operand::A, |i| (i.m, i.k)),
        Layout::Col => (Operand::B, |i| (i.k, i.n)),
    }
}

/// Catalog instructions whose lane maps a tile of `dtype` and `layout` can use on `vendor`.
fn candidates(
    dtype: DType,
    layout: Layout,
    vendor: Vendor,
) -> impl Iterator<Item = &'static mma::MmaInstr> {
    let (op, _) = operand_of(layout);
    mma::all().iter().filter(move |i| {
        let on_vendor = match vendor {
            Vendor::Amd => matches!(i.arch, Arch::Cdna3 | Arch::Cdna4),
            Vendor::Nvidia => i.family == Family::MmaSync,
        };
        on_vendor && i.dtype(op).bytes() == dtype.bytes()
    })
}

/// The base shapes a register tile of `dtype` and `layout` can have on `vendor`: the operand shapes of the
/// catalog's matrix instructions with elements of the same width, largest first.
pub fn base_shapes(dtype: DType, layout: Layout, vendor: Vendor) -> Vec<BaseShape> {
    let (_, shape) = operand_of(layout);
    let mut out: Vec<BaseShape> = Vec::new();
    for i in candidates(dtype, layout, vendor) {
        let (r, c) = shape(i);
        if !out.contains(&BaseShape::new(r, c)) {
            out.push(BaseShape::new(r, c));
        }
    }
    out.sort_by_key(|b| std::cmp::Reverse((b.rows * b.cols, b.cols)));
    out
}

/// The base tile's lane map: the A operand (row layout) or B operand (column layout) of the first
/// catalog instruction of `vendor` with that operand shape and element width.
fn lane_map(reg: &RegTile, vendor: Vendor) -> Result<LaneMap, TileError> {
    let (op, shape) = operand_of(reg.layout);
    let found = candidates(reg.dtype, reg.layout, vendor)
        .find(|&i| shape(i) == (reg.base.rows, reg.base.cols));
    let Some(instr) = found else {
        return Err(TileError::NoLaneMap {
            vendor: if vendor == Vendor::Amd {
                "CDNA"
            } else {
                "NVIDIA mma.sync"
            },
            layout: reg.layout,
            base: reg.base,
            op: op.name(),
            bytes: reg.dtype.bytes(),
        });
    };
    let per_lane = instr.elems_per_lane(op) as usize;
    let mut map = vec![Vec::with_capacity(per_lane); instr.lanes as usize];
    for e in instr.map(op) {
        map[e.lane as usize].push((e.row, e.col));
    }
    Ok(LaneMap {
        instr: instr.name,
        op,
        map,
    })
}

/// The byte address of region element (r, c).
struct Region<'a> {
    shared: &'a SharedTile,
    rows: u32,
    cols: u32,
}

impl Region<'_> {
    fn addr(&self, r: u32, c: u32) -> u32 {
        let s = self.shared;
        let tile = (r / s.rows) * (self.cols / s.cols) + c / s.cols;
        tile * s.bytes() + s.offset(r % s.rows, c % s.cols)
    }
}

/// Every instruction that moves `reg` to or from `shared` with `instr`, lane by lane.
pub fn access_pattern(
    shared: &SharedTile,
    reg: &RegTile,
    instr: DsInstr,
) -> Result<Vec<Issue>, TileError> {
    Ok(pattern(shared, reg, instr)?.1)
}

fn pattern(
    shared: &SharedTile,
    reg: &RegTile,
    instr: DsInstr,
) -> Result<(LaneMap, Vec<Issue>), TileError> {
    check_load(shared, reg)?;
    let info = instr.info();
    let lm = lane_map(reg, info.vendor)?;
    let region = Region {
        shared,
        rows: shared.rows.max(reg.rows),
        cols: shared.cols.max(reg.cols),
    };
    let per_lane = lm.map[0].len() as u32;
    let group = match instr {
        DsInstr::DsReadB64TrB16 => 4,
        DsInstr::Ldmatrix => 8,
        _ => info.bytes_per_lane / reg.dtype.bytes().min(info.bytes_per_lane),
    };
    if !info.bytes_per_lane.is_multiple_of(reg.dtype.bytes()) || !per_lane.is_multiple_of(group) {
        let why = format!(
            "each lane of {} holds {per_lane} {}-byte elements per base tile, the instruction moves {} bytes per lane",
            lm.instr,
            reg.dtype.bytes(),
            info.bytes_per_lane
        );
        return Err(TileError::AccessShape {
            instr: info.name,
            why,
        });
    }
    if instr.is_transposing() && reg.dtype.bytes() != 2 {
        let why = format!("it moves 16-bit elements, the tile holds {}", reg.dtype);
        return Err(TileError::AccessShape {
            instr: info.name,
            why,
        });
    }
    let mut issues = Vec::new();
    for pr in (0..region.rows).step_by(reg.rows as usize) {
        for pc in (0..region.cols).step_by(reg.cols as usize) {
            for br in (0..reg.rows).step_by(reg.base.rows as usize) {
                for bc in (0..reg.cols).step_by(reg.base.cols as usize) {
                    for g in 0..per_lane / group {
                        // The elements each lane holds in this slot group, in region coordinates.
                        let held: Vec<Vec<(u32, u32)>> = lm
                            .map
                            .iter()
                            .map(|slots| {
                                let s = &slots[(g * group) as usize..((g + 1) * group) as usize];
                                s.iter().map(|&(r, c)| (pr + br + r, pc + bc + c)).collect()
                            })
                            .collect();
                        issues.push(issue(&region, instr, &held)?);
                    }
                }
            }
        }
    }
    Ok((lm, issues))
}

/// One instruction's addresses from the elements each lane holds for it.
fn issue(region: &Region, instr: DsInstr, held: &[Vec<(u32, u32)>]) -> Result<Issue, TileError> {
    let name = instr.name();
    let shape_err = |why: String| TileError::AccessShape { instr: name, why };
    let elems: Vec<Vec<(u32, u32)>> = match instr {
        DsInstr::DsReadB64TrB16 => transpose_reads(held).map_err(shape_err)?,
        DsInstr::Ldmatrix => ldmatrix_rows(held).map_err(shape_err)?,
        _ => held.to_vec(),
    };
    let eb = region.shared.dtype.bytes();
    let mut addrs = Vec::with_capacity(elems.len());
    for (lane, es) in elems.iter().enumerate() {
        let (r0, c0) = es[0];
        if es
            .iter()
            .enumerate()
            .any(|(k, &e)| e != (r0, c0 + k as u32))
        {
            let why = format!(
                "lane {lane} holds {es:?}, not consecutive elements of one row (a column layout needs a transposing load)"
            );
            return Err(shape_err(why));
        }
        let a0 = region.addr(r0, c0);
        if (0..es.len() as u32).any(|k| region.addr(r0, c0 + k) != a0 + k * eb) {
            return Err(TileError::SwizzleSplitsAccess {
                swizzle: region.shared.swizzle.name(),
                instr: name,
                lane: lane as u32,
                bytes: es.len() as u32 * eb,
            });
        }
        addrs.push(Some(a0));
    }
    Ok(Issue { addrs, elems })
}

/// `ds_read_b64_tr_b16`: the 4 elements each lane reads, from the 4 each lane receives (module docs).
fn transpose_reads(held: &[Vec<(u32, u32)>]) -> Result<Vec<Vec<(u32, u32)>>, String> {
    let mut out = Vec::with_capacity(held.len());
    for g0 in (0..held.len()).step_by(16) {
        let grp = &held[g0..g0 + 16];
        let k0 = grp[0][0].0;
        for (j, es) in grp.iter().enumerate() {
            let n = es[0].1;
            if es.iter().enumerate().any(|(q, &e)| e != (k0 + q as u32, n)) {
                return Err(format!(
                    "lane {} must hold rows {k0}..{} of one column, holds {es:?}",
                    g0 + j,
                    k0 + 4
                ));
            }
        }
        for i in 0..16 {
            let cols: Vec<(u32, u32)> = (0..4)
                .map(|q| (k0 + i as u32 / 4, grp[4 * (i % 4) + q][0].1))
                .collect();
            out.push(cols);
        }
    }
    Ok(out)
}

/// `ldmatrix .x4`: lanes 8q..8q+7 give the 8 rows of matrix q (slots 2q, 2q+1 of every lane).
fn ldmatrix_rows(held: &[Vec<(u32, u32)>]) -> Result<Vec<Vec<(u32, u32)>>, String> {
    let mut out = Vec::with_capacity(32);
    for q in 0..4 {
        let (r0, c0) = held[0][2 * q];
        for (l, es) in held.iter().enumerate() {
            let want = (r0 + l as u32 / 4, c0 + 2 * (l as u32 % 4));
            if es[2 * q] != want || es[2 * q + 1] != (want.0, want.1 + 1) {
                return Err(format!(
                    "matrix {q}: lane {l} holds {:?}, ldmatrix delivers {want:?}",
                    &es[2 * q..]
                ));
            }
        }
        out.extend((0..8).map(|r| (0..8).map(|c| (r0 + r, c0 + c)).collect()));
    }
    Ok(out)
}

/// The instruction the HIP lowering moves `reg` with between registers and a shared tile of the same
/// dtype on `arch` (CDNA3 or CDNA4), or `None` when the bank model has none for it (an element-wise
/// 32-bit access). Row-layout tiles whose lanes hold runs of 8 or 16 consecutive bytes use one vector
/// access per run (`ds_read_b64/b128`, `ds_write_b64/b128`; one or two runs per base tile, as the
/// lowering's `lds_runs`); other 16-bit loads use the CDNA4
/// transposing read (HipKittens D.1) where its lane arithmetic fits, else one `ds_read_u16` per element.
pub fn amd_instr(reg: &RegTile, arch: Arch, store: bool) -> Option<DsInstr> {
    let e = reg.dtype.bytes();
    let bytes = reg.base.rows * reg.base.cols / 64 * e;
    let mut tries: Vec<DsInstr> = Vec::new();
    if reg.layout == Layout::Row {
        // A lane's bytes of one base tile may be several runs of one row (the fp8 16×128 operand:
        // two 16-byte runs, FP8-tutorial §6): one vector access per run, which `pattern` checks.
        for (width, read, write) in [
            (16, DsInstr::DsReadB128, DsInstr::DsWriteB128),
            (8, DsInstr::DsReadB64, DsInstr::DsWriteB64),
        ] {
            if bytes >= width && bytes.is_multiple_of(width) && bytes <= 2 * width {
                tries.push(if store { write } else { read });
            }
        }
    }
    if !store && e == 2 {
        if arch == Arch::Cdna4 {
            tries.push(DsInstr::DsReadB64TrB16);
        }
        tries.push(DsInstr::DsReadU16);
    }
    let plain =
        SharedTile::with_swizzle(reg.dtype, reg.rows, reg.cols, crate::Swizzle::None).ok()?;
    tries.into_iter().find(|&i| pattern(&plain, reg, i).is_ok())
}

/// The access pattern of `reg` ↔ `shared` with `instr` and the conflict degree of every phase.
pub fn analyze(
    shared: &SharedTile,
    reg: &RegTile,
    instr: DsInstr,
) -> Result<BankReport, TileError> {
    let (lm, issues) = pattern(shared, reg, instr)?;
    let phase_lanes = instr.phase_lanes();
    let mut phases = Vec::new();
    for (i, iss) in issues.iter().enumerate() {
        for (p, degree) in lds::conflicts(instr, &iss.addrs)?.into_iter().enumerate() {
            phases.push(PhaseConflict {
                instruction: i as u32,
                phase: p as u32,
                lanes: phase_lanes[p].clone(),
                conflict: degree,
            });
        }
    }
    let max_conflict = phases.iter().map(|p| p.conflict).max().unwrap_or(0);
    Ok(BankReport {
        instr,
        shared: *shared,
        reg: *reg,
        lane_map: (lm.instr, lm.op),
        region: (shared.rows.max(reg.rows), shared.cols.max(reg.cols)),
        issues,
        phases,
        max_conflict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_shapes_follow_the_catalog() {
        let amd_row = base_shapes(DType::Bf16, Layout::Row, Vendor::Amd);
        for b in [
            BaseShape::S16X32,
            BaseShape::S16X16,
            BaseShape::S32X16,
            BaseShape::S32X8,
        ] {
            assert!(amd_row.contains(&b), "{b} missing from {amd_row:?}");
        }
        assert!(
            base_shapes(DType::Bf16, Layout::Col, Vendor::Amd).contains(&BaseShape::new(16, 32))
        );
        assert_eq!(
            base_shapes(DType::Bf16, Layout::Row, Vendor::Nvidia),
            vec![BaseShape::S16X16]
        );
    }

    /// CDNA4's fp8 16×128 operand: each lane holds two 16-byte runs of its row (K `16·(l/16)..` and
    /// `64 + 16·(l/16)..`, FP8-tutorial §6), one `ds_read_b128` each; the model used to have no
    /// instruction for it (32 bytes per lane), so its tiles kept no swizzle and read 4-way.
    #[test]
    fn fp8_operand_runs_are_vector_reads() {
        let reg = RegTile::new(
            DType::Fp8E4m3,
            16,
            128,
            Layout::Row,
            BaseShape::new(16, 128),
        )
        .unwrap();
        assert_eq!(
            amd_instr(&reg, Arch::Cdna4, false),
            Some(DsInstr::DsReadB128)
        );
        assert_eq!(
            amd_instr(&reg, Arch::Cdna4, true),
            Some(DsInstr::DsWriteB128)
        );
        let shared = SharedTile::new(DType::Fp8E4m3, 16, 128).unwrap();
        let r = analyze(&shared, &reg, DsInstr::DsReadB128).unwrap();
        // Two reads per base tile, 64 lanes each, every address a lane's 16-byte run.
        assert_eq!(r.issues.len(), 2);
        for (k, iss) in r.issues.iter().enumerate() {
            for (l, es) in iss.elems.iter().enumerate() {
                let want = (l as u32 % 16, 64 * k as u32 + 16 * (l as u32 / 16));
                assert_eq!(es[0], want, "read {k} lane {l}");
                assert_eq!(es.len(), 16);
            }
        }
        // Unswizzled, the 128-byte rows put lanes 0..3 of a phase on the same banks.
        assert!(r.max_conflict > 1, "{}", r.max_conflict);
    }

    #[test]
    fn refuses_what_the_instruction_cannot_move() {
        let shared = SharedTile::new(DType::Bf16, 16, 16).unwrap();
        let reg = RegTile::new(DType::Bf16, 16, 16, Layout::Row, BaseShape::S16X16).unwrap();
        // 4 elements per lane, a 16-byte access needs 8.
        assert!(matches!(
            analyze(&shared, &reg, DsInstr::DsReadB128),
            Err(TileError::AccessShape { .. })
        ));
        // A column layout is not contiguous along rows: plain loads cannot fill it.
        let col = RegTile::new(DType::Bf16, 16, 16, Layout::Col, BaseShape::S16X16).unwrap();
        assert!(matches!(
            analyze(&shared, &col, DsInstr::DsReadB64),
            Err(TileError::AccessShape { .. })
        ));
        // No CDNA instruction has a 48x16 operand.
        let odd = RegTile::new(DType::Bf16, 48, 16, Layout::Row, BaseShape::new(48, 16)).unwrap();
        let s48 = SharedTile::new(DType::Bf16, 48, 16).unwrap();
        assert!(matches!(
            analyze(&s48, &odd, DsInstr::DsReadB64),
            Err(TileError::NoLaneMap { .. })
        ));
    }

    /// Every element of a larger tile is read exactly once across all issued instructions.
    #[test]
    fn covers_each_element_once() {
        let shared = SharedTile::new(DType::Bf16, 16, 32).unwrap();
        let reg = RegTile::new(DType::Bf16, 64, 64, Layout::Row, BaseShape::S16X32).unwrap();
        let issues = access_pattern(&shared, &reg, DsInstr::DsReadB128).unwrap();
        let mut seen = vec![0u32; 64 * 64];
        for e in issues.iter().flat_map(|i| i.elems.iter().flatten()) {
            seen[(e.0 * 64 + e.1) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(issues.len(), 8);
        // Contiguous Fig. 4-swizzled subtiles keep every load conflict-free.
        assert_eq!(
            analyze(&shared, &reg, DsInstr::DsReadB128)
                .unwrap()
                .max_conflict,
            1
        );
    }
}
