//! Shared-memory (AMD LDS / NVIDIA smem) instructions: lanes, bytes per lane, banks and phases, and the
//! conflict function.
//!
//! # The conflict rule
//!
//! A wave (64 lanes) or warp (32 lanes) does not serve one shared-memory instruction in one step: its lanes
//! are split into *phases*, subsets of lanes that access the banks at the same time (HipKittens §3.2.2 and
//! footnote 6). Inside one phase, every lane's access covers `bytes_per_lane / 4` consecutive 4-byte words;
//! word `w` lives in bank `w % banks`. The **conflict degree** of a phase is the largest number of
//! **distinct** words that fall into one bank: 1 means conflict-free, N means the bank needs N cycles.
//! Several lanes reading the *same* word are served by one broadcast and do not conflict. That broadcast
//! rule is the one NVIDIA states in the CUDA C++ Programming Guide (shared-memory section: accesses to the
//! same 32-bit word never conflict) and the one AMD's LDS follows (CDNA3 ISA reference, LDS chapter: a bank
//! conflict is distinct addresses in one bank); HipKittens D.2's solver counts conflicts the same way.
//! A phase without active lanes has degree 0.
//!
//! # Sources of the numbers
//!
//! - CDNA `ds_read_b128`, `ds_read_b96`, `ds_write_b64`, `ds_read_b64`: banks and phases are HipKittens
//!   Table 5 (found with the paper's solver, D.2; the CDNA ISA does not document them).
//! - `ds_read_b64_tr_b16` (CDNA4 only): HipKittens D.1 says it runs in two phases, lanes 0-31 then 32-63.
//!   Table 5 gives no bank count for it; we use 64, that of `ds_read_b64` (same 64-bit width). D.1's claim
//!   that the unswizzled 16×32 column load is conflict-free needs those 64 banks (32 lanes × 2 words).
//! - NVIDIA: 32 banks of 4 bytes (CUDA C++ Programming Guide, compute capability 5.x and later, which covers
//!   Hopper). 64-bit accesses are served per half warp and 128-bit ones per quarter warp (8 lanes): the
//!   guide only says wide requests are split into several transactions; the lane split is the widely
//!   measured behaviour. `ldmatrix ... .x4`: each group of 8 lanes supplies the 8 row addresses (16 bytes
//!   each) of one 8×8 b16 matrix (PTX ISA, `ldmatrix`), one phase per matrix.
//! - Alignment: every access must be aligned to its own size (16 bytes for `ds_read_b128`, 8 for the 64-bit
//!   ones); LLVM's AMDGPU backend emits `ds_read_b128` only at 16-byte alignment unless the unaligned access
//!   mode is on (llvm-project review D92767). `ds_read_b96` needs 4-byte (dword) alignment here.

use serde::Serialize;
use thiserror::Error;

/// Bytes per bank on every GPU modelled here (HipKittens Fig. 4 caption; CUDA C++ Programming Guide).
pub const BANK_BYTES: u32 = 4;

/// Which vendor's machine an instruction runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Amd,
    Nvidia,
}

/// The shared-memory instructions of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DsInstr {
    DsReadB128,
    DsReadB96,
    DsReadB64,
    DsWriteB64,
    /// CDNA `ds_write_b128` (16 bytes per lane; the register-staged GEMM's store of the next K step).
    DsWriteB128,
    /// CDNA `ds_read_u16` (one 16-bit element per lane; column-layout loads where no transposing load exists).
    DsReadU16,
    /// CDNA4 transposing load of 16-bit elements (HipKittens D.1).
    DsReadB64TrB16,
    /// NVIDIA `ld.shared.b32` / `st.shared.b32`.
    NvShared32,
    /// NVIDIA `ld.shared.v2.b32` (64 bits per lane).
    NvShared64,
    /// NVIDIA `ld.shared.v4.b32` (128 bits per lane).
    NvShared128,
    /// NVIDIA `ldmatrix.sync.aligned.m8n8.x4.shared.b16` (four 8×8 b16 matrices).
    Ldmatrix,
}

/// A lane range `first..=last` of a phase.
pub type LaneRange = (u32, u32);

/// Everything the conflict function needs to know about one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DsInfo {
    pub name: &'static str,
    pub vendor: Vendor,
    /// Lanes of the wave or warp that issues it.
    pub lanes: u32,
    /// Bytes each lane reads or writes.
    pub bytes_per_lane: u32,
    /// Required alignment of each lane's byte address.
    pub align: u32,
    /// Number of 4-byte banks the instruction sees.
    pub banks: u32,
    /// Lanes active in each phase, as inclusive ranges.
    pub phases: &'static [&'static [LaneRange]],
    /// Where the banks and phases come from.
    pub source: &'static str,
}

const TABLE5: &str = "HipKittens Table 5";

static DS_READ_B128: DsInfo = DsInfo {
    name: "ds_read_b128",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 16,
    align: 16,
    banks: 64,
    phases: &[
        &[(0, 3), (12, 15), (20, 27)],
        &[(4, 11), (16, 19), (28, 31)],
        &[(32, 35), (44, 47), (52, 59)],
        &[(36, 43), (48, 51), (60, 63)],
    ],
    source: TABLE5,
};

static DS_READ_B96: DsInfo = DsInfo {
    name: "ds_read_b96",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 12,
    align: 4,
    banks: 32,
    phases: &[
        &[(0, 3), (20, 23)],
        &[(4, 7), (16, 19)],
        &[(8, 11), (28, 31)],
        &[(12, 15), (24, 27)],
        &[(32, 35), (52, 55)],
        &[(36, 39), (48, 51)],
        &[(40, 43), (60, 63)],
        &[(44, 47), (56, 59)],
    ],
    source: TABLE5,
};

static DS_READ_B64: DsInfo = DsInfo {
    name: "ds_read_b64",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 8,
    align: 8,
    banks: 64,
    phases: &[&[(0, 31)], &[(32, 63)]],
    source: TABLE5,
};

static DS_WRITE_B64: DsInfo = DsInfo {
    name: "ds_write_b64",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 8,
    align: 8,
    banks: 32,
    phases: &[&[(0, 15)], &[(16, 31)], &[(32, 47)], &[(48, 63)]],
    source: TABLE5,
};

/// Table 5 lists no 128-bit write; its phases and banks are assumed to be those of `ds_read_b128`.
static DS_WRITE_B128: DsInfo = DsInfo {
    name: "ds_write_b128",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 16,
    align: 16,
    banks: 64,
    phases: DS_READ_B128.phases,
    source: "assumed equal to ds_read_b128 (HipKittens Table 5 lists no 128-bit write)",
};

/// Table 5 lists no 16-bit read: 32 banks (CDNA3 ISA guide, LDS chapter) and half-wave phases (as
/// Table 5's `ds_read_b64`) are assumed.
static DS_READ_U16: DsInfo = DsInfo {
    name: "ds_read_u16",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 2,
    align: 2,
    banks: 32,
    phases: &[&[(0, 31)], &[(32, 63)]],
    source: "CDNA3 ISA guide (32 banks); half-wave phases assumed (HipKittens Table 5 lists no 16-bit read)",
};

static DS_READ_B64_TR_B16: DsInfo = DsInfo {
    name: "ds_read_b64_tr_b16",
    vendor: Vendor::Amd,
    lanes: 64,
    bytes_per_lane: 8,
    align: 8,
    banks: 64,
    phases: &[&[(0, 31)], &[(32, 63)]],
    source: "HipKittens D.1 (phases); banks assumed equal to ds_read_b64 (Table 5)",
};

const CUDA_GUIDE: &str =
    "CUDA C++ Programming Guide, shared memory (cc 5.x+); lane split by width measured";

static NV_SHARED32: DsInfo = DsInfo {
    name: "ld.shared.b32",
    vendor: Vendor::Nvidia,
    lanes: 32,
    bytes_per_lane: 4,
    align: 4,
    banks: 32,
    phases: &[&[(0, 31)]],
    source: CUDA_GUIDE,
};

static NV_SHARED64: DsInfo = DsInfo {
    name: "ld.shared.v2.b32",
    vendor: Vendor::Nvidia,
    lanes: 32,
    bytes_per_lane: 8,
    align: 8,
    banks: 32,
    phases: &[&[(0, 15)], &[(16, 31)]],
    source: CUDA_GUIDE,
};

const QUARTER_WARPS: &[&[LaneRange]] = &[&[(0, 7)], &[(8, 15)], &[(16, 23)], &[(24, 31)]];

static NV_SHARED128: DsInfo = DsInfo {
    name: "ld.shared.v4.b32",
    vendor: Vendor::Nvidia,
    lanes: 32,
    bytes_per_lane: 16,
    align: 16,
    banks: 32,
    phases: QUARTER_WARPS,
    source: CUDA_GUIDE,
};

static LDMATRIX: DsInfo = DsInfo {
    name: "ldmatrix",
    vendor: Vendor::Nvidia,
    lanes: 32,
    bytes_per_lane: 16,
    align: 16,
    banks: 32,
    phases: QUARTER_WARPS,
    source:
        "PTX ISA, ldmatrix (8 row addresses of 16 bytes per 8x8 matrix); 32 banks per CUDA guide",
};

impl DsInstr {
    pub const ALL: [DsInstr; 11] = [
        DsInstr::DsReadB128,
        DsInstr::DsReadB96,
        DsInstr::DsReadB64,
        DsInstr::DsWriteB64,
        DsInstr::DsWriteB128,
        DsInstr::DsReadU16,
        DsInstr::DsReadB64TrB16,
        DsInstr::NvShared32,
        DsInstr::NvShared64,
        DsInstr::NvShared128,
        DsInstr::Ldmatrix,
    ];

    pub fn info(self) -> &'static DsInfo {
        match self {
            DsInstr::DsReadB128 => &DS_READ_B128,
            DsInstr::DsReadB96 => &DS_READ_B96,
            DsInstr::DsReadB64 => &DS_READ_B64,
            DsInstr::DsWriteB64 => &DS_WRITE_B64,
            DsInstr::DsWriteB128 => &DS_WRITE_B128,
            DsInstr::DsReadU16 => &DS_READ_U16,
            DsInstr::DsReadB64TrB16 => &DS_READ_B64_TR_B16,
            DsInstr::NvShared32 => &NV_SHARED32,
            DsInstr::NvShared64 => &NV_SHARED64,
            DsInstr::NvShared128 => &NV_SHARED128,
            DsInstr::Ldmatrix => &LDMATRIX,
        }
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether the instruction moves data across lanes (each lane's address feeds other lanes' registers).
    pub fn is_transposing(self) -> bool {
        matches!(self, DsInstr::DsReadB64TrB16 | DsInstr::Ldmatrix)
    }

    /// Whether it writes shared memory.
    pub fn is_store(self) -> bool {
        matches!(self, DsInstr::DsWriteB64 | DsInstr::DsWriteB128)
    }

    /// The lanes of each phase, expanded.
    pub fn phase_lanes(self) -> Vec<Vec<u32>> {
        self.info()
            .phases
            .iter()
            .map(|ranges| ranges.iter().flat_map(|&(a, b)| a..=b).collect())
            .collect()
    }
}

impl std::fmt::Display for DsInstr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DsInstr {
    type Err = LdsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.to_ascii_lowercase();
        let alias = match s.as_str() {
            "ds_read_b64_tr16" | "ds_load_tr16_b64" => Some(DsInstr::DsReadB64TrB16),
            "ldmatrix.x4" | "ldmatrix_x4" => Some(DsInstr::Ldmatrix),
            "lds128" => Some(DsInstr::NvShared128),
            _ => None,
        };
        alias
            .or_else(|| DsInstr::ALL.into_iter().find(|i| i.name() == s))
            .ok_or_else(|| LdsError::UnknownInstr(s.clone()))
    }
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum LdsError {
    #[error(
        "unknown shared-memory instruction `{0}`; known: ds_read_b128, ds_read_b96, ds_read_b64, ds_write_b64, \
         ds_write_b128, ds_read_u16, ds_read_b64_tr_b16, ld.shared.b32, ld.shared.v2.b32, ld.shared.v4.b32, ldmatrix"
    )]
    UnknownInstr(String),
    #[error("{instr} is issued by {expected} lanes, got {got} addresses")]
    LaneCount {
        instr: &'static str,
        expected: u32,
        got: usize,
    },
    #[error("{instr}: lane {lane} address {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        instr: &'static str,
        lane: u32,
        addr: u32,
        align: u32,
    },
}

/// The conflict degree of each phase of one `instr` whose lane `l` accesses byte address `addrs[l]`
/// (`None`: lane inactive). See the module documentation for the rule and its sources.
pub fn conflicts(instr: DsInstr, addrs: &[Option<u32>]) -> Result<Vec<u32>, LdsError> {
    let info = instr.info();
    if addrs.len() != info.lanes as usize {
        return Err(LdsError::LaneCount {
            instr: info.name,
            expected: info.lanes,
            got: addrs.len(),
        });
    }
    for (lane, a) in addrs.iter().enumerate() {
        if let Some(addr) = *a {
            if addr % info.align != 0 {
                return Err(LdsError::Misaligned {
                    instr: info.name,
                    lane: lane as u32,
                    addr,
                    align: info.align,
                });
            }
        }
    }
    Ok(instr
        .phase_lanes()
        .iter()
        .map(|lanes| phase_degree(info, lanes, addrs))
        .collect())
}

/// Max over banks of the number of distinct words the phase's lanes touch in that bank (an access
/// narrower than a word touches the word that holds it).
fn phase_degree(info: &DsInfo, lanes: &[u32], addrs: &[Option<u32>]) -> u32 {
    let bytes = info.bytes_per_lane;
    let mut words: Vec<u32> = lanes
        .iter()
        .filter_map(|&l| addrs[l as usize])
        .flat_map(|a| a / BANK_BYTES..=(a + bytes - 1) / BANK_BYTES)
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut per_bank = vec![0u32; info.banks as usize];
    for w in words {
        per_bank[(w % info.banks) as usize] += 1;
    }
    per_bank.into_iter().max().unwrap_or(0)
}

/// The bank of byte address `addr` for `instr`.
pub fn bank(instr: DsInstr, addr: u32) -> u32 {
    (addr / BANK_BYTES) % instr.info().banks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instruction's phases partition its lanes, each lane exactly once.
    #[test]
    fn phases_partition_the_lanes() {
        for i in DsInstr::ALL {
            let mut seen = vec![0u32; i.info().lanes as usize];
            for l in i.phase_lanes().into_iter().flatten() {
                seen[l as usize] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1), "{i}: {seen:?}");
        }
    }

    /// A phase that reads all banks exactly once is conflict-free; the Table 5 shape of ds_read_b128 means
    /// 16 lanes x 4 words = 64 banks.
    #[test]
    fn full_bank_sweep_is_conflict_free() {
        for i in DsInstr::ALL {
            let info = i.info();
            let mut addrs = vec![None; info.lanes as usize];
            for lanes in i.phase_lanes() {
                for (k, &l) in lanes.iter().enumerate() {
                    addrs[l as usize] = Some(k as u32 * info.bytes_per_lane);
                }
            }
            let c = conflicts(i, &addrs).unwrap();
            let words = i.phase_lanes()[0].len() as u32 * info.bytes_per_lane / BANK_BYTES;
            let expect = words.div_ceil(info.banks);
            assert!(
                c.iter().all(|&d| d == expect),
                "{i}: {c:?}, expected {expect}"
            );
        }
    }

    /// Same-word broadcast is not a conflict; distinct words one bank-stride apart are.
    #[test]
    fn broadcast_versus_conflict() {
        let same = vec![Some(64u32); 64];
        assert_eq!(conflicts(DsInstr::DsReadB64, &same).unwrap(), vec![1, 1]);
        let strided: Vec<_> = (0..64).map(|l| Some(l * 256)).collect();
        // 32 lanes per phase, each 2 words, all at bank 0/1 with distinct words: 32-way.
        assert_eq!(
            conflicts(DsInstr::DsReadB64, &strided).unwrap(),
            vec![32, 32]
        );
        // ds_write_b64 sees 32 banks of 4 bytes: stride 128 bytes puts each phase's 16 lanes in banks 0/1.
        let s128: Vec<_> = (0..64).map(|l| Some(l * 128)).collect();
        assert_eq!(conflicts(DsInstr::DsWriteB64, &s128).unwrap(), vec![16; 4]);
    }

    /// ds_read_b128 phase 0 is the peculiar lane set 0-3, 12-15, 20-27 (Table 5): lanes 0 and 4 hitting one
    /// bank with distinct words conflict only if they share a phase.
    #[test]
    fn b128_phase_membership() {
        let mut addrs = vec![None; 64];
        addrs[0] = Some(0);
        addrs[12] = Some(256);
        assert_eq!(
            conflicts(DsInstr::DsReadB128, &addrs).unwrap(),
            vec![2, 0, 0, 0]
        );
        addrs[12] = None;
        addrs[4] = Some(256);
        assert_eq!(
            conflicts(DsInstr::DsReadB128, &addrs).unwrap(),
            vec![1, 1, 0, 0]
        );
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            conflicts(DsInstr::DsReadB128, &[Some(0); 32]),
            Err(LdsError::LaneCount { .. })
        ));
        let mut a = vec![Some(0u32); 64];
        a[5] = Some(8);
        assert_eq!(
            conflicts(DsInstr::DsReadB128, &a),
            Err(LdsError::Misaligned {
                instr: "ds_read_b128",
                lane: 5,
                addr: 8,
                align: 16
            })
        );
        assert!("ds_read_b256".parse::<DsInstr>().is_err());
        for i in DsInstr::ALL {
            assert_eq!(i.name().parse::<DsInstr>(), Ok(i));
        }
    }
}
