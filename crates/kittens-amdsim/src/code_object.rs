//! A loaded code object: the kernel's machine code, its kernel descriptor and its metadata
//! (AMDGPUUsage "Kernel Descriptor" and "Code Object V3+ Metadata"), which together say how a
//! dispatch starts a wave: which SGPRs hold the kernarg pointer and the workgroup ids, how many bytes
//! of LDS a workgroup gets, and where each kernel argument sits.

use crate::elf::{u16_at, u32_at, u64_at, Elf, EM_AMDGPU};
use crate::msgpack::{self, Value};
use crate::SimError;
use kittens_hw::Arch;

/// `NT_AMDGPU_METADATA` (AMDGPUUsage "Note Records").
const NT_AMDGPU_METADATA: u32 = 32;
const STT_FUNC: u8 = 2;

/// One kernel argument as the metadata lays it out in the kernarg segment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KernArg {
    pub offset: u32,
    pub size: u32,
    /// `.value_kind`: `global_buffer`, `by_value`, or a hidden argument (`hidden_*`).
    pub kind: String,
}

/// The fields of the 64-byte kernel descriptor a dispatch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KernelDescriptor {
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_size: u32,
    pub rsrc1: u32,
    pub rsrc2: u32,
    pub rsrc3: u32,
    pub code_properties: u16,
}

impl KernelDescriptor {
    /// COMPUTE_PGM_RSRC2.USER_SGPR_COUNT: the system SGPRs (workgroup ids) follow the user SGPRs.
    pub fn user_sgpr_count(&self) -> u32 {
        (self.rsrc2 >> 1) & 0x1f
    }

    /// Which of the workgroup id X, Y, Z the dispatch writes into SGPRs.
    pub fn workgroup_id_enabled(&self) -> [bool; 3] {
        [7, 8, 9].map(|b| self.rsrc2 >> b & 1 == 1)
    }

    /// The SGPR holding the kernarg segment pointer's low half, if the kernel asked for it: after
    /// the private segment buffer (4 SGPRs), dispatch pointer (2) and queue pointer (2) when enabled.
    pub fn kernarg_sgpr(&self) -> Option<u32> {
        let p = self.code_properties as u32;
        (p >> 3 & 1 == 1).then(|| 4 * (p & 1) + 2 * (p >> 1 & 1) + 2 * (p >> 2 & 1))
    }
}

/// The kernel of a code object, ready to dispatch.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub name: String,
    pub arch: Arch,
    /// The machine code, from the entry point to the end of the function symbol.
    pub code: Vec<u8>,
    /// Byte offset of `code[0]` within `.text` (listings and errors speak in text offsets).
    pub text_offset: u64,
    pub descriptor: KernelDescriptor,
    pub args: Vec<KernArg>,
    pub kernarg_segment_size: u32,
    pub group_segment_size: u32,
    pub max_workgroup_size: u32,
    pub wavefront_size: u32,
    pub sgpr_count: u32,
    pub vgpr_count: u32,
    pub agpr_count: u32,
}

/// The architecture an `EF_AMDGPU_MACH` value names (AMDGPUUsage "AMDGPU ELF Header").
fn arch_of(flags: u32) -> Result<Arch, SimError> {
    match flags & 0xff {
        0x4c => Ok(Arch::Cdna3),
        0x4f => Ok(Arch::Cdna4),
        m => Err(SimError::UnsupportedTarget(format!(
            "EF_AMDGPU_MACH {m:#x} (only gfx942 = 0x4c and gfx950 = 0x4f are emulated)"
        ))),
    }
}

fn int(map: &Value, key: &str) -> Result<i64, SimError> {
    map.get(key)
        .and_then(Value::as_i64)
        .ok_or_else(|| SimError::BadMetadata(format!("kernel metadata has no integer {key}")))
}

fn u32_of(map: &Value, key: &str) -> Result<u32, SimError> {
    let v = int(map, key)?;
    u32::try_from(v).map_err(|_| SimError::BadMetadata(format!("{key} = {v} is not a u32")))
}

impl Kernel {
    /// Load the one kernel of a code object (our lowering emits exactly one per object).
    pub fn load(bytes: &[u8]) -> Result<Kernel, SimError> {
        let elf = Elf::parse(bytes)?;
        if elf.machine != EM_AMDGPU {
            return Err(SimError::BadElf(format!(
                "e_machine {} is not EM_AMDGPU",
                elf.machine
            )));
        }
        let arch = arch_of(elf.flags)?;
        let notes = elf.notes("AMDGPU", NT_AMDGPU_METADATA)?;
        let note = notes
            .first()
            .ok_or_else(|| SimError::BadMetadata("no AMDGPU metadata note".into()))?;
        let meta = msgpack::parse(note)?;
        let kernels = meta
            .get("amdhsa.kernels")
            .and_then(Value::as_array)
            .ok_or_else(|| SimError::BadMetadata("no amdhsa.kernels".into()))?;
        let [k] = kernels else {
            return Err(SimError::BadMetadata(format!(
                "{} kernels in one code object (expected 1)",
                kernels.len()
            )));
        };
        let name = k
            .get(".name")
            .and_then(Value::as_str)
            .ok_or_else(|| SimError::BadMetadata("kernel without .name".into()))?
            .to_string();
        let kd_name = k
            .get(".symbol")
            .and_then(Value::as_str)
            .unwrap_or(&format!("{name}.kd"))
            .to_string();
        let mut args = Vec::new();
        for a in k.get(".args").and_then(Value::as_array).unwrap_or(&[]) {
            args.push(KernArg {
                offset: u32_of(a, ".offset")?,
                size: u32_of(a, ".size")?,
                kind: a
                    .get(".value_kind")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            });
        }
        let syms = elf.symbols()?;
        let kd_sym = syms
            .iter()
            .find(|s| s.name == kd_name)
            .ok_or_else(|| SimError::BadElf(format!("no kernel descriptor symbol {kd_name}")))?;
        let kd = elf.at_addr(kd_sym.value, 64)?;
        let descriptor = KernelDescriptor {
            group_segment_fixed_size: u32_at(kd, 0)?,
            private_segment_fixed_size: u32_at(kd, 4)?,
            kernarg_size: u32_at(kd, 8)?,
            rsrc3: u32_at(kd, 44)?,
            rsrc1: u32_at(kd, 48)?,
            rsrc2: u32_at(kd, 52)?,
            code_properties: u16_at(kd, 56)?,
        };
        let entry_rel = u64_at(kd, 16)? as i64;
        let entry = kd_sym
            .value
            .checked_add_signed(entry_rel)
            .ok_or_else(|| SimError::BadElf("kernel entry offset overflows".into()))?;
        let func = syms
            .iter()
            .find(|s| s.kind == STT_FUNC && s.value == entry)
            .ok_or_else(|| SimError::BadElf(format!("no function symbol at entry {entry:#x}")))?;
        let text = elf
            .section(".text")
            .ok_or_else(|| SimError::BadElf("no .text".into()))?;
        if entry < text.addr || entry - text.addr + func.size > text.size {
            return Err(SimError::BadElf(format!(
                "kernel code {entry:#x}+{} is outside .text",
                func.size
            )));
        }
        let code = elf.at_addr(entry, func.size)?.to_vec();
        Ok(Kernel {
            name,
            arch,
            code,
            text_offset: entry - text.addr,
            descriptor,
            args,
            kernarg_segment_size: u32_of(k, ".kernarg_segment_size")?,
            group_segment_size: u32_of(k, ".group_segment_fixed_size")?,
            max_workgroup_size: u32_of(k, ".max_flat_workgroup_size")?,
            wavefront_size: u32_of(k, ".wavefront_size")?,
            sgpr_count: u32_of(k, ".sgpr_count")?,
            vgpr_count: u32_of(k, ".vgpr_count")?,
            agpr_count: k.get(".agpr_count").and_then(Value::as_i64).unwrap_or(0) as u32,
        })
    }
}
