//! Code-object analysis: what the AMDGPU compiler says a kernel uses.
//!
//! Resources come from the AMDHSA metadata block of the assembly (`.vgpr_count`, `.agpr_count`,
//! `.sgpr_count`, `.vgpr_spill_count`, `.sgpr_spill_count`, `.private_segment_fixed_size`,
//! `.group_segment_fixed_size`; AMDGPUUsage "Code Object V5 Metadata"), the architected VGPR count from
//! the kernel's `.amdhsa_accum_offset` (the first AGPR of the unified register file on gfx90a and
//! later). Waves per SIMD follow from the unified count and the 512 registers per lane per SIMD of
//! CDNA3/CDNA4 (HipKittens §3.2.1; `regs_per_lane_per_simd` in the GPU catalog), allocated in granules
//! of 8 (AMDGPUUsage, "VGPR allocation granularity" of gfx90a/gfx942/gfx950), at most 8 waves.
//!
//! The hot loop is the body of the backward branch (`s_cbranch_*` or `s_branch` to an earlier label)
//! issuing the most MFMA work (multiply-adds by the catalog's shapes) from its own body — loops nested in it are left out (in a hot loop they are
//! cold element-wise paths), and of equal loops the shortest wins. A block placed after a loop that
//! branches back into its body (a cold path rejoining it) does not count as a loop.

use super::{gpu_of, AmdError};
use kittens_hw::Arch;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// VGPRs are allocated to a wave in blocks of this many (gfx90a+, unified VGPR/AGPR file).
const VGPR_GRANULE: u32 = 8;
/// The most waves one CDNA3/CDNA4 SIMD holds (CDNA3 ISA §2; the compiler's `; Occupancy:` caps there).
const MAX_WAVES_PER_SIMD: u32 = 8;

/// Counts by instruction class, plus every opcode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionMix {
    pub total: u32,
    pub mfma: u32,
    pub ds: u32,
    pub buffer: u32,
    pub s_waitcnt: u32,
    pub s_barrier: u32,
    /// Opcode → count.
    pub opcodes: BTreeMap<String, u32>,
}

impl InstructionMix {
    fn add(&mut self, opcode: &str) {
        self.total += 1;
        if opcode.starts_with("v_mfma") {
            self.mfma += 1;
        } else if opcode.starts_with("ds_") {
            self.ds += 1;
        } else if opcode.starts_with("buffer_") {
            self.buffer += 1;
        } else if opcode == "s_waitcnt" {
            self.s_waitcnt += 1;
        } else if opcode == "s_barrier" {
            self.s_barrier += 1;
        }
        *self.opcodes.entry(opcode.to_string()).or_insert(0) += 1;
    }
}

/// The hot loop: its label and what it issues per iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopReport {
    pub label: String,
    pub mix: InstructionMix,
    /// MFMAs over all instructions of one iteration (`mix.mfma / mix.total`; 0 for an empty loop).
    pub mfma_share: f64,
    /// The most MFMAs the iteration issues back to back, nothing else between them: a schedule that
    /// interleaves loads and LDS reads with its matrix work has short runs (HipKittens §3.3.2).
    pub longest_mfma_run: u32,
    /// How many separate runs of consecutive MFMAs the iteration has.
    pub mfma_runs: u32,
}

/// `(longest, count)` of the runs of consecutive MFMAs in `lines`.
fn mfma_runs(lines: &[Line]) -> (u32, u32) {
    let (mut longest, mut runs, mut cur) = (0, 0, 0);
    for l in lines {
        if let Line::Inst { opcode, .. } = l {
            if opcode.starts_with("v_mfma") {
                if cur == 0 {
                    runs += 1;
                }
                cur += 1;
                longest = longest.max(cur);
            } else {
                cur = 0;
            }
        }
    }
    (longest, runs)
}

/// Resources and instruction mix of one kernel, as the compiler produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeObjectReport {
    pub kernel: String,
    pub target: String,
    /// Architected VGPRs.
    pub vgpr: u32,
    /// Accumulation VGPRs.
    pub agpr: u32,
    /// VGPRs plus AGPRs as allocated from the unified file (`.vgpr_count` on gfx90a+).
    pub unified_vgpr: u32,
    pub sgpr: u32,
    pub vgpr_spill: u32,
    pub sgpr_spill: u32,
    pub scratch_bytes: u32,
    pub lds_bytes: u32,
    pub lds_budget_bytes: u32,
    /// Waves one SIMD can hold given the registers alone.
    pub waves_per_simd: u32,
    /// Waves per SIMD given registers and LDS: whole workgroups of `.max_flat_workgroup_size` threads
    /// fit `shared_bytes_per_cu / lds_bytes` times in a CU, each putting `ceil(waves / 4)` on a SIMD.
    pub occupancy: u32,
    /// Opcode → count over the whole kernel (`instructions` is the name the CLI's JSON promises).
    pub instructions: BTreeMap<String, u32>,
    pub mix: InstructionMix,
    pub hot_loop: Option<LoopReport>,
}

impl CodeObjectReport {
    /// Zero spills, no scratch, LDS within the target's budget.
    pub fn within_budget(&self) -> bool {
        self.vgpr_spill == 0
            && self.sgpr_spill == 0
            && self.scratch_bytes == 0
            && self.lds_bytes <= self.lds_budget_bytes
    }
}

/// Analyse the assembly of one kernel (`kernel`, or the only kernel when `None`) compiled for `arch`.
pub fn analyze(asm: &str, arch: Arch, kernel: Option<&str>) -> Result<CodeObjectReport, AmdError> {
    let meta = kernel_metadata(asm, kernel)?;
    let name = meta
        .get("name")
        .cloned()
        .ok_or_else(|| AmdError::Analysis("kernel metadata has no .name".into()))?;
    let field = |key: &str| -> Result<u32, AmdError> {
        let v = meta.get(key).ok_or_else(|| {
            AmdError::Analysis(format!("kernel {name}: no .{key} in the metadata"))
        })?;
        v.parse()
            .map_err(|_| AmdError::Analysis(format!("kernel {name}: .{key} is `{v}`, not a count")))
    };
    let unified = field("vgpr_count")?;
    let agpr = meta
        .get("agpr_count")
        .map_or(Ok(0), |_| field("agpr_count"))?;
    let body = kernel_body(asm, &name)?;
    // With AGPRs, the architected VGPRs end at the accumulation offset (a multiple of 4); without,
    // the unified count is the VGPR count.
    let vgpr = match agpr {
        0 => unified,
        _ => accum_offset(asm, &name).unwrap_or_else(|| unified.saturating_sub(agpr)),
    };
    let gpu = gpu_of(arch)?;
    let waves = waves_per_simd(unified, gpu.regs_per_lane_per_simd);
    let lds_bytes = field("group_segment_fixed_size")?;
    let threads = meta
        .get("max_flat_workgroup_size")
        .map_or(Ok(1024), |_| field("max_flat_workgroup_size"))?;
    let waves_per_block_per_simd = threads
        .div_ceil(gpu.wave_width)
        .div_ceil(gpu.simds_per_cu)
        .max(1);
    let lds_waves = match lds_bytes {
        0 => MAX_WAVES_PER_SIMD,
        b => (gpu.shared_bytes_per_cu / b) * waves_per_block_per_simd,
    };
    let mix = mix_of(&body);
    Ok(CodeObjectReport {
        target: super::toolchain::amd_target(arch)?.to_string(),
        vgpr,
        agpr,
        unified_vgpr: unified,
        sgpr: field("sgpr_count")?,
        vgpr_spill: field("vgpr_spill_count")?,
        sgpr_spill: field("sgpr_spill_count")?,
        scratch_bytes: field("private_segment_fixed_size")?,
        lds_bytes,
        lds_budget_bytes: gpu.shared_bytes_per_block,
        waves_per_simd: waves,
        occupancy: waves.min(lds_waves),
        instructions: mix.opcodes.clone(),
        hot_loop: hot_loop(&body),
        mix,
        kernel: name,
    })
}

/// Register-limited waves per SIMD: `regs / round_up(unified, 8)`, capped at 8.
pub fn waves_per_simd(unified_vgpr: u32, regs_per_lane_per_simd: u32) -> u32 {
    let alloc = unified_vgpr.max(1).div_ceil(VGPR_GRANULE) * VGPR_GRANULE;
    (regs_per_lane_per_simd / alloc).min(MAX_WAVES_PER_SIMD)
}

/// The `.name`-keyed scalar fields of one kernel's entry in `amdhsa.kernels` (nested lists skipped).
fn kernel_metadata(asm: &str, kernel: Option<&str>) -> Result<BTreeMap<String, String>, AmdError> {
    let start = asm
        .find("amdhsa.kernels:")
        .ok_or_else(|| AmdError::Analysis("no amdhsa.kernels metadata".into()))?;
    let mut kernels: Vec<BTreeMap<String, String>> = Vec::new();
    for line in asm[start..].lines().skip(1) {
        if !line.starts_with(' ') {
            break; // the next top-level key (amdhsa.target, ...)
        }
        // Kernel entries are `  - .key: value`, their fields `    .key: value`; deeper lines are args.
        let (new_entry, rest) = match (line.strip_prefix("  - "), line.strip_prefix("    ")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) if !rest.starts_with(' ') => (false, rest),
            _ => continue,
        };
        if new_entry {
            kernels.push(BTreeMap::new());
        }
        if let (Some(entry), Some((key, value))) = (kernels.last_mut(), rest.split_once(':')) {
            if let Some(key) = key.strip_prefix('.') {
                entry.insert(key.to_string(), value.trim().trim_matches('\'').to_string());
            }
        }
    }
    match kernel {
        Some(k) => kernels
            .into_iter()
            .find(|m| m.get("name").map(String::as_str) == Some(k)),
        None if kernels.len() == 1 => kernels.pop(),
        None => None,
    }
    .ok_or_else(|| {
        AmdError::Analysis(format!(
            "kernel {} not found (or several kernels and none named)",
            kernel.unwrap_or("?")
        ))
    })
}

/// `.amdhsa_accum_offset` of the kernel descriptor (absent before gfx90a).
fn accum_offset(asm: &str, name: &str) -> Option<u32> {
    let start = asm.find(&format!(".amdhsa_kernel {name}"))?;
    let block = &asm[start..];
    let block = &block[..block.find(".end_amdhsa_kernel")?];
    block.lines().find_map(|l| {
        l.trim()
            .strip_prefix(".amdhsa_accum_offset")?
            .trim()
            .parse()
            .ok()
    })
}

/// One line of a kernel's code: a label or an instruction (opcode and operand text).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Line<'a> {
    Label(&'a str),
    Inst { opcode: &'a str, operands: &'a str },
}

/// The code lines of `name`, from its label to `.Lfunc_end`.
fn kernel_body<'a>(asm: &'a str, name: &str) -> Result<Vec<Line<'a>>, AmdError> {
    let label = format!("{name}:");
    let mut lines = asm
        .lines()
        .skip_while(|l| l.split(';').next().unwrap_or("").trim_end() != label);
    if lines.next().is_none() {
        return Err(AmdError::Analysis(format!("no code label `{label}`")));
    }
    let mut body = Vec::new();
    for raw in lines {
        let line = raw.split(';').next().unwrap_or("").trim_end();
        let text = line.trim_start();
        if text.starts_with(".Lfunc_end") {
            break;
        }
        if text.is_empty() || text.starts_with('.') && !text.ends_with(':') {
            continue; // directives
        }
        if let Some(l) = text.strip_suffix(':') {
            body.push(Line::Label(l));
        } else if line.starts_with(char::is_whitespace) {
            let (opcode, operands) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            body.push(Line::Inst {
                opcode,
                operands: operands.trim(),
            });
        }
    }
    Ok(body)
}

fn mix_of(lines: &[Line]) -> InstructionMix {
    let mut mix = InstructionMix::default();
    for l in lines {
        if let Line::Inst { opcode, .. } = l {
            mix.add(opcode);
        }
    }
    mix
}

/// The loop with the most matrix work (MFMA multiply-adds) in its own body (nested loops excluded):
/// its label and that mix.
fn hot_loop(body: &[Line]) -> Option<LoopReport> {
    let label_at: BTreeMap<&str, usize> = body
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            if let Line::Label(n) = l {
                Some((*n, i))
            } else {
                None
            }
        })
        .collect();
    // (start, end) of every backward branch: the label's index and the branch's.
    let loops: Vec<(usize, usize)> = body
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            Line::Inst { opcode, operands }
                if opcode.starts_with("s_cbranch_") || *opcode == "s_branch" =>
            {
                label_at
                    .get(operands.split(',').next()?.trim())
                    .filter(|&&s| s < i)
                    .map(|&s| (s, i))
            }
            _ => None,
        })
        .collect();
    // A backward branch from a block the compiler placed after a loop's end into that loop's body (a
    // cold path, e.g. a ragged-edge fix-up, rejoining the loop) is not a loop of its own: its range
    // starts inside another loop and ends past it.
    let rejoins =
        |&(s, e): &(usize, usize)| loops.iter().any(|&(s1, e1)| s1 < s && s <= e1 && e1 < e);
    let loops: Vec<(usize, usize)> = loops.iter().copied().filter(|l| !rejoins(l)).collect();
    // Each loop's own body: its range less the loops nested in it (inside a hot loop those are cold
    // element-wise paths, e.g. a ragged-edge fix-up, not the steady state).
    let own = |&(s, e): &(usize, usize)| -> Vec<Line> {
        let nested: Vec<(usize, usize)> = loops
            .iter()
            .copied()
            .filter(|&(s2, e2)| (s2, e2) != (s, e) && s <= s2 && e2 <= e)
            .collect();
        (s..=e)
            .filter(|&i| !nested.iter().any(|&(s2, e2)| s2 <= i && i <= e2))
            .map(|i| body[i])
            .collect()
    };
    // Matrix work of an iteration: multiply-adds of its MFMAs by the catalog's shapes (a kernel that
    // mixes 16x16x32 and 32x32x16 MFMAs, the attention backward's, does twice the work per 32x32).
    let macs = |mix: &InstructionMix| -> u64 {
        mix.opcodes
            .iter()
            .filter(|(op, _)| op.starts_with("v_mfma"))
            .map(|(op, &n)| {
                let shape = kittens_hw::mma::instr(op).map_or(1, |i| u64::from(i.m * i.n * i.k));
                shape * u64::from(n)
            })
            .sum()
    };
    loops
        .iter()
        .map(|l| {
            let lines = own(l);
            (l.0, mix_of(&lines), mfma_runs(&lines))
        })
        .max_by_key(|(_, mix, _)| (macs(mix), mix.mfma, std::cmp::Reverse(mix.total)))
        .map(|(s, mix, (longest_mfma_run, mfma_runs))| LoopReport {
            label: if let Line::Label(n) = body[s] {
                n.to_string()
            } else {
                String::new()
            },
            mfma_share: if mix.total == 0 {
                0.0
            } else {
                f64::from(mix.mfma) / f64::from(mix.total)
            },
            longest_mfma_run,
            mfma_runs,
            mix,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(asm: &str) -> Vec<Line<'_>> {
        asm.lines()
            .map(|l| match l.trim().strip_suffix(':') {
                Some(label) => Line::Label(label),
                None => {
                    let (op, rest) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
                    Line::Inst {
                        opcode: op,
                        operands: rest,
                    }
                }
            })
            .collect()
    }

    /// A cold element loop the compiler left inside the hot loop is not the hot loop, and its
    /// instructions are not the hot loop's.
    #[test]
    fn nested_cold_loop_is_left_out() {
        let asm = "\
.LBB0_1:
  v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
  s_cbranch_vccz .LBB0_3
.LBB0_2:
  buffer_load_ushort v8, v9, s[0:3], 0 offen
  s_cbranch_execnz .LBB0_2
.LBB0_3:
  v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
  s_cbranch_scc0 .LBB0_1
  s_endpgm
";
        let hot = hot_loop(&lines(asm)).expect("a loop");
        assert_eq!(hot.label, ".LBB0_1");
        assert_eq!(hot.mix.mfma, 2);
        assert_eq!(hot.mix.opcodes.get("buffer_load_ushort"), None);
    }

    /// The share and the runs of MFMAs are counted over the hot loop's own instructions: here six
    /// instructions, three MFMAs, in runs of 2 and 1.
    #[test]
    fn mfma_share_and_runs() {
        let asm = "\
.LBB0_1:
  v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
  v_mfma_f32_16x16x32_bf16 v[12:15], v[4:7], v[8:11], v[12:15]
  ds_read_b128 v[16:19], v20
  v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
  buffer_load_dwordx4 v21, s[0:3], 0 offen lds
  s_cbranch_scc0 .LBB0_1
  s_endpgm
";
        let hot = hot_loop(&lines(asm)).expect("a loop");
        assert_eq!(hot.mix.total, 6);
        assert_eq!(hot.mfma_share, 0.5);
        assert_eq!((hot.longest_mfma_run, hot.mfma_runs), (2, 2));
    }

    /// A cold block after the loop's back-edge that rejoins the body mid-way is not the hot loop.
    #[test]
    fn cold_block_rejoining_a_loop_is_not_a_loop() {
        let asm = "\
.LBB0_1:
  s_cbranch_vccz .LBB0_3
.LBB0_2:
  v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
  v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], v[0:3]
  s_cbranch_scc0 .LBB0_1
  s_endpgm
.LBB0_3:
  buffer_load_ushort v8, v9, s[0:3], 0 offen
  buffer_load_ushort v8, v9, s[0:3], 0 offen
  s_branch .LBB0_2
";
        let hot = hot_loop(&lines(asm)).expect("a loop");
        assert_eq!(hot.label, ".LBB0_1");
        assert_eq!(hot.mix.mfma, 2);
        assert_eq!(hot.mix.opcodes.get("buffer_load_ushort"), None);
    }

    #[test]
    fn waves_follow_the_granule_and_cap() {
        assert_eq!(waves_per_simd(100, 512), 4); // 104 allocated
        assert_eq!(waves_per_simd(256, 512), 2);
        assert_eq!(waves_per_simd(512, 512), 1);
        assert_eq!(waves_per_simd(8, 512), 8);
    }
}
