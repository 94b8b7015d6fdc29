//! The few parts of an AMDGPU code object (an ELF64 shared object, AMDGPUUsage "ELF Code Object")
//! the emulator needs: the sections, the symbol table and the notes. Every offset read from the file
//! is checked against its length, so a truncated or hostile file is an error, never a panic.

use crate::SimError;

/// One section: its name, file range and load address.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

/// One symbol of `.symtab`.
#[derive(Debug, Clone)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
    /// `STT_*` (low nibble of `st_info`).
    pub kind: u8,
}

/// A parsed ELF64 little-endian file (borrowing its bytes).
pub struct Elf<'a> {
    pub bytes: &'a [u8],
    /// `e_machine` (224 = EM_AMDGPU).
    pub machine: u16,
    /// `e_flags` (the low byte is `EF_AMDGPU_MACH`).
    pub flags: u32,
    pub sections: Vec<Section>,
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOTE: u32 = 7;
pub const EM_AMDGPU: u16 = 224;

fn bad(what: impl Into<String>) -> SimError {
    SimError::BadElf(what.into())
}

pub(crate) fn slice(bytes: &[u8], off: u64, len: u64) -> Result<&[u8], SimError> {
    let end = off
        .checked_add(len)
        .ok_or_else(|| bad("offset overflows"))?;
    if end > bytes.len() as u64 {
        return Err(bad(format!(
            "range {off}..{end} past the end of a {}-byte file",
            bytes.len()
        )));
    }
    Ok(&bytes[off as usize..end as usize])
}

pub(crate) fn u16_at(b: &[u8], off: u64) -> Result<u16, SimError> {
    let s = slice(b, off, 2)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

pub(crate) fn u32_at(b: &[u8], off: u64) -> Result<u32, SimError> {
    let s = slice(b, off, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn u64_at(b: &[u8], off: u64) -> Result<u64, SimError> {
    Ok(u32_at(b, off)? as u64 | (u32_at(b, off + 4)? as u64) << 32)
}

fn cstr(b: &[u8], off: u64) -> Result<String, SimError> {
    let rest = slice(b, off, (b.len() as u64).saturating_sub(off))?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| bad("unterminated string"))?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

impl<'a> Elf<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, SimError> {
        if slice(bytes, 0, 4)? != b"\x7fELF" {
            return Err(bad("no ELF magic"));
        }
        if bytes[4] != 2 || bytes[5] != 1 {
            return Err(bad("not a little-endian ELF64 file"));
        }
        let machine = u16_at(bytes, 18)?;
        let flags = u32_at(bytes, 48)?;
        let shoff = u64_at(bytes, 40)?;
        let shentsize = u16_at(bytes, 58)? as u64;
        let shnum = u16_at(bytes, 60)? as u64;
        let shstrndx = u16_at(bytes, 62)? as u64;
        if shentsize < 64 {
            return Err(bad(format!("section header size {shentsize} < 64")));
        }
        let mut raw = Vec::new();
        for i in 0..shnum {
            let h = shoff
                .checked_add(i * shentsize)
                .ok_or_else(|| bad("section header offset overflows"))?;
            raw.push((
                u32_at(bytes, h)?,
                u32_at(bytes, h + 4)?,
                u64_at(bytes, h + 16)?,
                u64_at(bytes, h + 24)?,
                u64_at(bytes, h + 32)?,
            ));
        }
        let strtab = raw
            .get(shstrndx as usize)
            .ok_or_else(|| bad("section name table index out of range"))?
            .3;
        let mut sections = Vec::new();
        for (name, kind, addr, offset, size) in raw {
            sections.push(Section {
                name: cstr(bytes, strtab + name as u64)?,
                kind,
                addr,
                offset,
                size,
            });
        }
        Ok(Elf {
            bytes,
            machine,
            flags,
            sections,
        })
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    pub fn data(&self, s: &Section) -> Result<&'a [u8], SimError> {
        slice(self.bytes, s.offset, s.size)
    }

    /// Every symbol of `.symtab` (names from `.strtab`).
    pub fn symbols(&self) -> Result<Vec<Symbol>, SimError> {
        let Some(symtab) = self.sections.iter().find(|s| s.kind == SHT_SYMTAB) else {
            return Ok(Vec::new());
        };
        let strtab = self
            .section(".strtab")
            .ok_or_else(|| bad("no .strtab beside .symtab"))?;
        let data = self.data(symtab)?;
        let strs = self.data(strtab)?;
        let mut out = Vec::new();
        for e in data.chunks_exact(24) {
            let name = u32_at(e, 0)? as u64;
            out.push(Symbol {
                name: cstr(strs, name)?,
                kind: e[4] & 0xf,
                value: u64_at(e, 8)?,
                size: u64_at(e, 16)?,
            });
        }
        Ok(out)
    }

    /// The descriptors of every note with this owner name and type: (name, type, descriptor bytes).
    pub fn notes(&self, owner: &str, kind: u32) -> Result<Vec<&'a [u8]>, SimError> {
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| s.kind == SHT_NOTE) {
            let d = self.data(s)?;
            let mut at = 0u64;
            while at + 12 <= d.len() as u64 {
                let namesz = u32_at(d, at)? as u64;
                let descsz = u32_at(d, at + 4)? as u64;
                let ty = u32_at(d, at + 8)?;
                let name_at = at + 12;
                let desc_at = name_at + namesz.div_ceil(4) * 4;
                let name = slice(d, name_at, namesz)?;
                let desc = slice(d, desc_at, descsz)?;
                let trimmed = name.strip_suffix(&[0]).unwrap_or(name);
                if trimmed == owner.as_bytes() && ty == kind {
                    out.push(desc);
                }
                at = desc_at + descsz.div_ceil(4) * 4;
            }
        }
        Ok(out)
    }

    /// The bytes at a load address (inside some section with file contents).
    pub fn at_addr(&self, addr: u64, len: u64) -> Result<&'a [u8], SimError> {
        let s = self
            .sections
            .iter()
            .find(|s| s.kind != 8 && addr >= s.addr && addr - s.addr + len <= s.size && s.size > 0)
            .ok_or_else(|| bad(format!("address {addr:#x} (+{len}) is in no section")))?;
        slice(self.bytes, s.offset + (addr - s.addr), len)
    }
}
