//! Device memory for the emulator: buffers at fixed device addresses (every access must fall inside
//! one, what a GPU's page tables would fault on), and a workgroup's LDS.

use super::ExecError;

/// One allocation.
#[derive(Debug, Clone)]
struct Buffer {
    base: u64,
    data: Vec<u8>,
}

/// Global memory: a set of allocations, each at an address no other one overlaps.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    buffers: Vec<Buffer>,
    next: u64,
}

/// Where the first allocation goes; allocations are 64 KiB aligned with a 64 KiB gap between them,
/// so an access running off the end of one lands in no buffer and faults.
const BASE: u64 = 0x7f00_0000_0000;
const ALIGN: u64 = 1 << 16;

impl Memory {
    pub fn new() -> Memory {
        Memory {
            buffers: Vec::new(),
            next: BASE,
        }
    }

    /// Place `data` in device memory and return its address.
    pub fn alloc(&mut self, data: Vec<u8>) -> u64 {
        let base = self.next;
        let len = data.len() as u64;
        self.next = base + len.div_ceil(ALIGN) * ALIGN + ALIGN;
        self.buffers.push(Buffer { base, data });
        base
    }

    /// The bytes of the allocation at `base`.
    pub fn get(&self, base: u64) -> Option<&[u8]> {
        self.buffers
            .iter()
            .find(|b| b.base == base)
            .map(|b| b.data.as_slice())
    }

    fn find(&self, addr: u64, len: u64) -> Option<(usize, usize)> {
        self.buffers.iter().enumerate().find_map(|(k, b)| {
            let end = b.base + b.data.len() as u64;
            (addr >= b.base && addr.checked_add(len)? <= end).then(|| (k, (addr - b.base) as usize))
        })
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), ExecError> {
        let (k, o) = self.find(addr, out.len() as u64).ok_or(ExecError::Fault {
            addr,
            len: out.len() as u64,
        })?;
        out.copy_from_slice(&self.buffers[k].data[o..o + out.len()]);
        Ok(())
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), ExecError> {
        let (k, o) = self.find(addr, data.len() as u64).ok_or(ExecError::Fault {
            addr,
            len: data.len() as u64,
        })?;
        self.buffers[k].data[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// A workgroup's LDS: `size` bytes (the kernel's group segment), zeroed at dispatch.
#[derive(Debug, Clone)]
pub struct Lds {
    pub bytes: Vec<u8>,
}

impl Lds {
    pub fn read(&self, addr: u32, out: &mut [u8]) -> Result<(), ExecError> {
        let a = addr as usize;
        let src = self
            .bytes
            .get(a..a + out.len())
            .ok_or(ExecError::LdsRange {
                addr,
                len: out.len() as u32,
                size: self.bytes.len() as u32,
            })?;
        out.copy_from_slice(src);
        Ok(())
    }

    pub fn write(&mut self, addr: u32, data: &[u8]) -> Result<(), ExecError> {
        let a = addr as usize;
        let size = self.bytes.len() as u32;
        let dst = self
            .bytes
            .get_mut(a..a + data.len())
            .ok_or(ExecError::LdsRange {
                addr,
                len: data.len() as u32,
                size,
            })?;
        dst.copy_from_slice(data);
        Ok(())
    }
}
