//! The bank solver: the swizzle of one shared tile that serves every access a kernel makes to it.
//!
//! HipKittens Appendix D.1 shows that one swizzle cannot serve every instruction (`ds_write_b64` wants
//! 8-byte granules, `ds_read_b128` needs 16 contiguous bytes), and §3.2.2 ships one hand-picked swizzle
//! per tile shape. Here the swizzle is searched instead: every candidate of the XOR family
//! ([`Swizzle::Xor`], then pairs of terms, [`Swizzle::Xor2`]) that keeps each access's bytes contiguous
//! and meets the lowering's constraints ([`Constraints`]) is scored by the bank model
//! ([`crate::analyze`], `kittens_hw::lds`) on *all* accesses together. The best candidate minimises the
//! worst conflict over the accesses, then the sum of their worst conflicts, then the lane addresses
//! the lowering must keep ([`address_classes`]), then the swizzle's complexity (none, one term, two
//! terms); the declared swizzle wins a tie.
//!
//! The search is a pure function of its inputs and the most expensive part of lowering a kernel; the
//! same tiles recur across a kernel's variants and between lowering and the bank checks, so answers
//! are kept per process ([`solve`]).

use crate::{analyze, DType, RegTile, SharedTile, Swizzle, TileError, XorTerm};
use kittens_hw::lds::DsInstr;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One kind of access to the tile: a register tile moved with one shared-memory instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct TileAccess {
    pub reg: RegTile,
    pub instr: DsInstr,
}

/// What a swizzle must also satisfy for the code that fills the tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Constraints {
    /// Byte runs every swizzle must keep whole and in place relative to each other (a vector fill, e.g.
    /// 16-byte global→LDS loads); 0 or 1: none.
    pub granule: u32,
    /// The swizzle must be its own inverse (fills that swizzle the global address instead of the LDS
    /// address use the swizzle as its inverse).
    pub involution: bool,
    /// The swizzle's period must divide this many bytes (a fill covers whole periods); 0: no limit.
    pub period_divides: u32,
}

/// The solver's answer for one tile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub swizzle: Swizzle,
    /// Worst conflict of each access, in the order given.
    pub max_conflict: Vec<u32>,
}

impl Choice {
    /// The worst conflict over every access (0 when there are none).
    pub fn worst(&self) -> u32 {
        self.max_conflict.iter().copied().max().unwrap_or(0)
    }
}

/// Bits needed for offsets below `n` (`n` a power of two gives its exponent).
fn log2_ceil(n: u32) -> u32 {
    32 - n.saturating_sub(1).leading_zeros()
}

/// The single XOR terms over a tile of `bytes` that keep `granule`-byte runs whole and are involutions
/// (the bits read lie above the bits flipped).
fn terms(bytes: u32, granule: u32) -> Vec<XorTerm> {
    let top = log2_ceil(bytes);
    let low = log2_ceil(granule.max(1));
    let mut out = Vec::new();
    for base in low..top {
        for bits in 1..=3 {
            for shift in bits..=top {
                let t = XorTerm::new(bits, base, shift);
                if base + bits + shift <= top {
                    out.push(t);
                }
            }
        }
    }
    out
}

fn xor(t: XorTerm) -> Swizzle {
    Swizzle::Xor {
        bits: t.bits,
        base: t.base,
        shift: t.shift,
    }
}

/// True when `s` keeps every `granule`-byte run of a `bytes`-byte tile whole.
fn keeps_granule(s: Swizzle, granule: u32, bytes: u32) -> bool {
    granule <= 1
        || (0..bytes)
            .step_by(granule as usize)
            .all(|o| (1..granule).all(|i| s.apply(o + i) == s.apply(o) + i))
}

fn is_involution(s: Swizzle, bytes: u32) -> bool {
    (0..bytes).all(|o| s.apply(s.apply(o)) == o)
}

/// How many distinct lane addresses the lowering needs for access `a` under `tile`'s swizzle: base
/// tiles whose addresses differ from another's by the same byte distance for every lane and placement
/// (as without a swizzle) share one address and reach each other through the instruction's immediate
/// offset (MI300X-attn §2.1: offsets riding in the instruction cost no register).
pub fn address_classes(tile: &SharedTile, a: &TileAccess) -> u32 {
    let plain_tile = SharedTile::with_swizzle(tile.dtype, tile.rows, tile.cols, Swizzle::None);
    let (Ok(sw), Ok(plain)) = (
        crate::access_pattern(tile, &a.reg, a.instr),
        plain_tile.and_then(|p| crate::access_pattern(&p, &a.reg, a.instr)),
    ) else {
        return u32::MAX;
    };
    // Issues come per placement, base tile, slot group (crate::access).
    let bases = ((a.reg.rows / a.reg.base.rows) * (a.reg.cols / a.reg.base.cols)) as usize;
    let placements = ((tile.rows.max(a.reg.rows) / a.reg.rows)
        * (tile.cols.max(a.reg.cols) / a.reg.cols)) as usize;
    let groups = sw.len() / (placements * bases).max(1);
    if groups == 0 || sw.len() != placements * bases * groups {
        return u32::MAX;
    }
    let at = |p: usize, b: usize, g: usize| (p * bases + b) * groups + g;
    let diff = |v: &[crate::Issue], i: usize, j: usize, l: usize| -> Option<i64> {
        Some(v[i].addrs[l]? as i64 - v[j].addrs[l]? as i64)
    };
    let same = |b: usize, r: usize| {
        (0..placements).all(|p| {
            (0..groups).all(|g| {
                let (i, j) = (at(p, b, g), at(p, r, g));
                (0..sw[i].addrs.len()).all(|l| diff(&sw, i, j, l) == diff(&plain, i, j, l))
            })
        })
    };
    let mut reps: Vec<usize> = Vec::new();
    for b in 0..bases {
        if !reps.iter().any(|&r| same(b, r)) {
            reps.push(b);
        }
    }
    reps.len() as u32
}

/// The score of one candidate, or `None` when it is infeasible: the worst conflict of each access.
fn score(
    dtype: DType,
    rows: u32,
    cols: u32,
    s: Swizzle,
    accesses: &[TileAccess],
    c: &Constraints,
) -> Option<Scored> {
    let tile = SharedTile::with_swizzle(dtype, rows, cols, s).ok()?;
    let bytes = tile.bytes();
    if c.period_divides > 0 && !c.period_divides.is_multiple_of(s.period_bytes()) {
        return None;
    }
    if !keeps_granule(s, c.granule, bytes) || (c.involution && !is_involution(s, bytes)) {
        return None;
    }
    accesses
        .iter()
        .map(|a| analyze(&tile, &a.reg, a.instr).ok().map(|r| r.max_conflict))
        .collect::<Option<Vec<u32>>>()
        .map(|conf| Scored {
            conf,
            split: accesses
                .iter()
                .map(|a| address_classes(&tile, a).min(1 << 16))
                .sum(),
        })
}

/// A feasible candidate's worst conflict per access, and the lane addresses its accesses need in all
/// ([`address_classes`]).
struct Scored {
    conf: Vec<u32>,
    split: u32,
}

/// Sort key of a scored candidate: worst conflict, total, lane addresses, complexity (declared first
/// on ties).
fn key(sc: &Scored, s: Swizzle, declared: Swizzle) -> (u32, u32, u32, u32) {
    let conf = &sc.conf;
    let complexity = match s {
        _ if s == declared => 0,
        Swizzle::None => 1,
        Swizzle::Xor { .. } => 2,
        Swizzle::Xor2 { .. } => 3,
    };
    (
        conf.iter().copied().max().unwrap_or(0),
        conf.iter().sum(),
        sc.split,
        complexity,
    )
}

/// The inputs of one search.
type SolveKey = (DType, u32, u32, Swizzle, Vec<TileAccess>, Constraints);

/// Answers kept per process: at most this many, the map is emptied when full (a long-lived process
/// that lowers ever new tiles stays bounded).
const SOLVED_MAX: usize = 4096;

/// The swizzle for a `rows × cols` shared tile of `dtype` that serves `accesses` best (module docs).
/// The declared swizzle is kept when nothing beats it; an error only when no candidate, the declared
/// one included, can perform every access. An answer already found in this process for the same
/// inputs is returned again (the search is deterministic).
pub fn solve(
    dtype: DType,
    rows: u32,
    cols: u32,
    declared: Swizzle,
    accesses: &[TileAccess],
    c: &Constraints,
) -> Result<Choice, TileError> {
    type Solved = HashMap<SolveKey, Result<Choice, TileError>>;
    static SOLVED: OnceLock<Mutex<Solved>> = OnceLock::new();
    let solved = SOLVED.get_or_init(Default::default);
    let key = (dtype, rows, cols, declared, accesses.to_vec(), *c);
    if let Some(answer) = solved.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return answer;
    }
    let answer = search(dtype, rows, cols, declared, accesses, c);
    if let Ok(mut m) = solved.lock() {
        if m.len() >= SOLVED_MAX {
            m.clear();
        }
        m.insert(key, answer.clone());
    }
    answer
}

/// [`solve`]'s search itself.
fn search(
    dtype: DType,
    rows: u32,
    cols: u32,
    declared: Swizzle,
    accesses: &[TileAccess],
    c: &Constraints,
) -> Result<Choice, TileError> {
    let bytes = SharedTile::with_swizzle(dtype, rows, cols, Swizzle::None)?.bytes();
    let granule = accesses
        .iter()
        .map(|a| a.instr.info().bytes_per_lane)
        .chain([c.granule, dtype.bytes()])
        .max()
        .unwrap_or(1);
    let mut best: Option<(Swizzle, Scored)> = None;
    let consider = |s: Swizzle, best: &mut Option<(Swizzle, Scored)>| {
        if let Some(sc) = score(dtype, rows, cols, s, accesses, c) {
            let better = match best {
                None => true,
                Some((bs, bsc)) => key(&sc, s, declared) < key(bsc, *bs, declared),
            };
            if better {
                *best = Some((s, sc));
            }
        }
    };
    consider(declared, &mut best);
    consider(Swizzle::None, &mut best);
    let singles = terms(bytes, granule);
    for &t in &singles {
        consider(xor(t), &mut best);
    }
    // Pairs only when no single term reaches conflict-free (they cost the square of the singles).
    if best
        .as_ref()
        .is_none_or(|(_, sc)| sc.conf.iter().any(|&d| d > 1))
    {
        for (i, &a) in singles.iter().enumerate() {
            for &b in &singles[i + 1..] {
                let flipped = |t: XorTerm| ((1u32 << t.bits) - 1) << t.base;
                let read = |t: XorTerm| flipped(t) << t.shift;
                // Disjoint flips, and neither term reads a bit the other flips (an involution).
                if flipped(a) & flipped(b) != 0
                    || read(a) & flipped(b) != 0
                    || read(b) & flipped(a) != 0
                {
                    continue;
                }
                consider(
                    Swizzle::Xor2 {
                        first: a,
                        second: b,
                    },
                    &mut best,
                );
            }
        }
    }
    let (
        swizzle,
        Scored {
            conf: max_conflict, ..
        },
    ) = best.ok_or_else(|| {
        TileError::Other(format!(
            "no swizzle of a {rows}x{cols} {dtype} shared tile serves every access ({})",
            accesses
                .iter()
                .map(|a| format!("{} of {}x{}", a.instr, a.reg.rows, a.reg.cols))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    Ok(Choice {
        swizzle,
        max_conflict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BaseShape, Layout};

    fn reg(rows: u32, cols: u32, layout: Layout, base: BaseShape) -> RegTile {
        RegTile::new(DType::Bf16, rows, cols, layout, base).unwrap()
    }

    /// The unswizzled 128×64 GEMM half-tile read with `ds_read_b128` is 4-way conflicted by the bank
    /// model; the solver finds a swizzle that makes it conflict-free, and the answer checks out when
    /// re-analysed independently.
    #[test]
    fn gemm_operand_tile_becomes_conflict_free() {
        let acc = [TileAccess {
            reg: reg(64, 64, Layout::Row, BaseShape::S16X32),
            instr: DsInstr::DsReadB128,
        }];
        let plain = SharedTile::with_swizzle(DType::Bf16, 128, 64, Swizzle::None).unwrap();
        assert_eq!(
            analyze(&plain, &acc[0].reg, acc[0].instr)
                .unwrap()
                .max_conflict,
            4
        );
        let c = Constraints {
            granule: 16,
            involution: true,
            period_divides: 128 * 128,
        };
        let ch = solve(DType::Bf16, 128, 64, Swizzle::None, &acc, &c).unwrap();
        assert_eq!(ch.max_conflict, vec![1]);
        let t = SharedTile::with_swizzle(DType::Bf16, 128, 64, ch.swizzle).unwrap();
        assert_eq!(
            analyze(&t, &acc[0].reg, acc[0].instr).unwrap().max_conflict,
            1
        );
        assert!(is_involution(ch.swizzle, t.bytes()));
        // A repeated question gets the kept answer, which is the search's; other inputs are not
        // answered from it.
        assert_eq!(
            solve(DType::Bf16, 128, 64, Swizzle::None, &acc, &c),
            search(DType::Bf16, 128, 64, Swizzle::None, &acc, &c)
        );
        assert_eq!(solve(DType::Bf16, 128, 64, Swizzle::None, &acc, &c), Ok(ch));
        let loose = Constraints::default();
        assert_eq!(
            solve(DType::Bf16, 128, 64, Swizzle::None, &acc, &loose),
            search(DType::Bf16, 128, 64, Swizzle::None, &acc, &loose)
        );
    }

    /// HipKittens D.1's counter-example: a 16×16 tile written with `ds_write_b64` and read as part of a
    /// 16×32 tile with `ds_read_b128` cannot have one swizzle good for both granularities; the solver
    /// still answers, reporting the conflict it could not remove, and never splits the 16-byte read.
    #[test]
    fn reports_the_least_conflicted_when_no_swizzle_serves_all() {
        let write = TileAccess {
            reg: reg(16, 16, Layout::Row, BaseShape::S16X16),
            instr: DsInstr::DsWriteB64,
        };
        let alone = solve(
            DType::Bf16,
            16,
            16,
            Swizzle::None,
            &[write],
            &Constraints::default(),
        )
        .unwrap();
        assert_eq!(alone.max_conflict, vec![1]);
        let read = TileAccess {
            reg: reg(16, 32, Layout::Row, BaseShape::S16X32),
            instr: DsInstr::DsReadB128,
        };
        let both = solve(
            DType::Bf16,
            16,
            32,
            Swizzle::None,
            &[write, read],
            &Constraints::default(),
        )
        .unwrap();
        let t = SharedTile::with_swizzle(DType::Bf16, 16, 32, both.swizzle).unwrap();
        for (a, &d) in [write, read].iter().zip(&both.max_conflict) {
            assert_eq!(analyze(&t, &a.reg, a.instr).unwrap().max_conflict, d);
        }
    }

    /// Attention's K/V tile: a row-layout `ds_read_b128` read and a column-layout transposing read of
    /// the same tile, both conflict-free under one solved swizzle.
    #[test]
    fn row_and_transposed_reads_share_one_swizzle() {
        let acc = [
            TileAccess {
                reg: reg(64, 128, Layout::Row, BaseShape::S16X32),
                instr: DsInstr::DsReadB128,
            },
            TileAccess {
                reg: reg(64, 128, Layout::Col, BaseShape::S32X16),
                instr: DsInstr::DsReadB64TrB16,
            },
        ];
        let c = Constraints {
            granule: 16,
            involution: true,
            period_divides: 64 * 256,
        };
        let ch = solve(DType::Bf16, 64, 128, Swizzle::None, &acc, &c).unwrap();
        assert_eq!(ch.max_conflict, vec![1, 1], "{}", ch.swizzle.name());
    }

    #[test]
    fn declared_swizzle_wins_ties_and_infeasible_is_an_error() {
        let acc = [TileAccess {
            reg: reg(16, 32, Layout::Row, BaseShape::S16X32),
            instr: DsInstr::DsReadB128,
        }];
        let ch = solve(
            DType::Bf16,
            16,
            32,
            Swizzle::HK_16X32,
            &acc,
            &Constraints::default(),
        )
        .unwrap();
        assert_eq!(ch.swizzle, Swizzle::HK_16X32);
        assert_eq!(ch.max_conflict, vec![1]);
        // A 16×32 register tile cannot be moved to or from a 32×16 shared tile (D.1): no candidate works.
        let bad = solve(
            DType::Bf16,
            32,
            16,
            Swizzle::None,
            &acc,
            &Constraints::default(),
        );
        assert!(matches!(bad, Err(TileError::Other(_))));
    }
}
