//! Matrix-instruction catalog: every matrix instruction the kernels use, with its exact
//! lane/register ↔ element maps for A, B and C/D, its flops and (where known) its issue cycles.
//!
//! The maps are *computed* from each instruction's structure by small closed-form functions
//! (lane groups, contiguous K runs per lane, accumulator row groups), never stored as tables:
//! - CDNA3 / CDNA4 MFMAs: [`cdna`], checked entry for entry against AMD's Matrix Instruction
//!   Calculator (`tests/data/cdna3_mfma_layouts.json`) for CDNA3, against FP8-tutorial step 6 for
//!   the CDNA4 fp8 16×16×128 map, and against the sources named in `cdna.rs` for CDNA4 bf16;
//! - Hopper `mma.sync.m16n8k16` and `wgmma` m64nNk16: [`hopper`], after the PTX ISA sections
//!   "Matrix Fragments for mma.m16n8k16" and "wgmma Register Fragments".
//!
//! Conventions (those of the oracle file): A is M×K (row = i, col = k), B is K×N (row = k,
//! col = j), C and D are M×N. `slot` counts a lane's elements in register order, the low half
//! (or low byte) of the first register first.

mod cdna;
mod hopper;

pub use hopper::wgmma_accumulator;

use crate::dtype::DType;
use crate::Arch;
use serde::Serialize;
use thiserror::Error;

/// One operand of `D = A·B + C`. C shares D's layout, so it parses to [`Operand::D`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operand {
    A,
    B,
    D,
}

impl Operand {
    pub const ALL: [Operand; 3] = [Operand::A, Operand::B, Operand::D];

    pub fn name(self) -> &'static str {
        match self {
            Operand::A => "a",
            Operand::B => "b",
            Operand::D => "d",
        }
    }
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Operand {
    type Err = MmaError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "a" => Ok(Operand::A),
            "b" => Ok(Operand::B),
            "c" | "d" => Ok(Operand::D),
            _ => Err(MmaError::UnknownOperand(s.to_string())),
        }
    }
}

/// One element of an operand: lane `lane`'s `slot`-th element is matrix element (`row`, `col`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Entry {
    pub lane: u32,
    pub slot: u32,
    pub row: u32,
    pub col: u32,
}

/// How an instruction distributes its operands over lanes; selects the closed-form map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// AMD MFMA (wave of 64). Each lane holds `k_run` consecutive K values of one A row / B
    /// column per chunk; a lane with more elements than `k_run` holds several chunks, spaced
    /// by the K extent the whole wave covers per chunk (see `cdna.rs`).
    Mfma { k_run: u32 },
    /// NVIDIA `mma.sync.aligned.m16n8k16` (warp of 32).
    MmaSync,
    /// NVIDIA `wgmma.mma_async` m64nNk16 (warpgroup of 128). A may come from registers; B always
    /// comes from shared memory through a descriptor, so B has no register map.
    Wgmma,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MmaError {
    #[error("unknown matrix instruction `{name}`; known: {known}")]
    UnknownInstr { name: String, known: String },
    #[error("unknown operand `{0}`; use a, b, c or d")]
    UnknownOperand(String),
    #[error("`{instr}` has no register layout for operand {op}: {why}")]
    NoRegisterLayout {
        instr: &'static str,
        op: Operand,
        why: &'static str,
    },
    #[error("wgmma N must be a multiple of 8 in 8..=256, got {0} (PTX ISA, wgmma shapes)")]
    BadWgmmaN(u32),
}

/// One matrix instruction. Fields are plain data; the maps come from [`MmaInstr::map`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MmaInstr {
    /// Assembly (AMD) or PTX (NVIDIA) name.
    pub name: &'static str,
    pub arch: Arch,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Independent blocks computed by one instruction (1 for every entry here).
    pub blocks: u32,
    pub a_dtype: DType,
    pub b_dtype: DType,
    pub acc_dtype: DType,
    /// Lanes that hold the operands: 64 (wave), 32 (warp) or 128 (warpgroup).
    pub lanes: u32,
    /// `2·M·N·K·blocks`.
    pub flops: u64,
    /// Issue cycles on one SIMD, where a vendor source states or implies them.
    pub cycles: Option<u32>,
    pub family: Family,
    /// Where the map and the cycle count come from.
    pub source: &'static str,
    /// Anything the dtypes cannot say (fp8 FNUZ vs OCP, xf32, operand sources).
    pub note: &'static str,
}

impl MmaInstr {
    /// Every element of `op`, ordered by lane then slot.
    ///
    /// Panics only for an operand with no register layout (`wgmma`'s B, which lives in shared
    /// memory); use [`MmaInstr::try_map`] where the operand is not known to have one.
    pub fn map(&self, op: Operand) -> Vec<Entry> {
        match self.try_map(op) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`MmaInstr::map`], with an error for operands that live outside registers.
    pub fn try_map(&self, op: Operand) -> Result<Vec<Entry>, MmaError> {
        if !self.has_register_layout(op) {
            return Err(MmaError::NoRegisterLayout {
                instr: self.name,
                op,
                why: "wgmma reads B from shared memory through a matrix descriptor",
            });
        }
        let per_lane = self.elems_per_lane(op);
        let mut out = Vec::with_capacity((self.lanes * per_lane) as usize);
        for lane in 0..self.lanes {
            for slot in 0..per_lane {
                let (row, col) = self.element(op, lane, slot);
                out.push(Entry {
                    lane,
                    slot,
                    row,
                    col,
                });
            }
        }
        Ok(out)
    }

    /// The (row, col) held by `lane` in `slot` of operand `op` (no bounds checks beyond debug).
    pub fn element(&self, op: Operand, lane: u32, slot: u32) -> (u32, u32) {
        debug_assert!(lane < self.lanes && slot < self.elems_per_lane(op));
        match self.family {
            Family::Mfma { k_run } => cdna::element(self, k_run, op, lane, slot),
            Family::MmaSync => hopper::mma_sync_element(op, lane, slot),
            Family::Wgmma => hopper::wgmma_element(op, lane, slot),
        }
    }

    /// False only for operands that never sit in registers (`wgmma` B).
    pub fn has_register_layout(&self, op: Operand) -> bool {
        !(self.family == Family::Wgmma && op == Operand::B)
    }

    /// Operand shape: A is M×K, B is K×N, D is M×N.
    pub fn rows_cols(&self, op: Operand) -> (u32, u32) {
        match op {
            Operand::A => (self.m, self.k),
            Operand::B => (self.k, self.n),
            Operand::D => (self.m, self.n),
        }
    }

    pub fn dtype(&self, op: Operand) -> DType {
        match op {
            Operand::A => self.a_dtype,
            Operand::B => self.b_dtype,
            Operand::D => self.acc_dtype,
        }
    }

    /// Elements of `op` each lane holds (0 for an operand without a register layout).
    pub fn elems_per_lane(&self, op: Operand) -> u32 {
        if !self.has_register_layout(op) {
            return 0;
        }
        let (r, c) = self.rows_cols(op);
        r * c * self.blocks / self.lanes
    }

    /// 32-bit registers per lane that hold `op`.
    pub fn regs_per_lane(&self, op: Operand) -> u32 {
        (self.elems_per_lane(op) * self.dtype(op).bits()).div_ceil(32)
    }

    /// Elements of `op` packed in one 32-bit register.
    pub fn elems_per_reg(&self, op: Operand) -> u32 {
        (32 / self.dtype(op).bits()).max(1)
    }
}

/// Every instruction in the catalog: CDNA3, then CDNA4, then Hopper.
pub fn all() -> &'static [MmaInstr] {
    &CATALOG
}

/// The instruction `name` (case-insensitive) as architecture `arch` has it: one name may be listed
/// for two architectures (CDNA4 keeps CDNA3's `v_mfma_f32_16x16x16_bf16`), each entry with that
/// architecture's facts.
pub fn instr_on(name: &str, arch: Arch) -> Option<&'static MmaInstr> {
    CATALOG
        .iter()
        .find(|i| i.arch == arch && i.name.eq_ignore_ascii_case(name))
}

/// Look an instruction up by name (case-insensitive): the first architecture that lists it (see
/// [`instr_on`] for one architecture's entry).
pub fn instr(name: &str) -> Result<&'static MmaInstr, MmaError> {
    CATALOG
        .iter()
        .find(|i| i.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| MmaError::UnknownInstr {
            name: name.to_string(),
            known: CATALOG
                .iter()
                .map(|i| i.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The smallest bf16 instruction of an architecture: register tiles are built from the smallest
/// MFMA so that they compose into any larger tile (HipKittens §3.2.2). For Hopper that is
/// `mma.sync.m16n8k16`.
pub fn default_bf16(arch: Arch) -> &'static MmaInstr {
    let name = match arch {
        Arch::Cdna3 => "v_mfma_f32_16x16x16_bf16",
        Arch::Cdna4 => "v_mfma_f32_16x16x32_bf16",
        Arch::Hopper => "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    };
    CATALOG
        .iter()
        .find(|i| i.name == name)
        .expect("default_bf16 names a catalog entry")
}

const N_CDNA: usize = cdna::CDNA3.len() + cdna::CDNA4.len();

static CATALOG: [MmaInstr; N_CDNA + hopper::HOPPER.len()] = {
    let mut out = [cdna::CDNA3[0]; N_CDNA + hopper::HOPPER.len()];
    let mut i = 0;
    while i < cdna::CDNA3.len() {
        out[i] = cdna::CDNA3[i];
        i += 1;
    }
    let mut j = 0;
    while j < cdna::CDNA4.len() {
        out[i + j] = cdna::CDNA4[j];
        j += 1;
    }
    let mut h = 0;
    while h < hopper::HOPPER.len() {
        out[N_CDNA + h] = hopper::HOPPER[h];
        h += 1;
    }
    out
};
