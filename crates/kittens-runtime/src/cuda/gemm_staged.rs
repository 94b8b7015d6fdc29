//! The launch side of a GEMM that copies an operand onto 128-byte lines itself while it runs
//! (`kittens_ir::SlotFill::TmaStaged`, `kittens_codegen`'s `cuda/lower_staged.rs`): the copy's
//! scratch is the padded copy's ([`Mat::padded_at`]), and the chunk flags live here with the count
//! every launch leaves them at.
//!
//! Each launch adds the grid's blocks to each flag of its staged operands' chunks, so the flags are
//! zeroed once, when allocated, and the count carried from launch to launch ([`StageFlags::base`]).
//! That needs every launch on these flags to have the same chunks (the same K), and launches to
//! follow each other on one stream; [`StageFlags::values`] checks the first.

use std::cell::Cell;
use std::rc::Rc;

use super::driver::{Device, DeviceBuffer};
use super::gemm_pad::Mat;
use super::{invalid, CudaError};

/// Elements per chunk along K: the lowering's (`lower_staged::CHUNK`), which the kernel divides by.
pub const CHUNK: usize = 256;

/// The chunk flags of a GEMM's staged operands, for one K.
pub struct StageFlags {
    buf: DeviceBuffer,
    /// Per staged operand: its name and chunk count, in flag order.
    chunks: Vec<(String, usize)>,
    /// Every flag's value before the next launch (modulo 2³²).
    base: Cell<u32>,
}

/// The values of a launch's staging arguments (`kittens_codegen::StageArg`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StageValues {
    /// Per staged operand: name, copy address, copy pitch (elements), flags address.
    pub copies: Vec<(String, u64, u32, u64)>,
    pub base: u32,
}

impl StageFlags {
    /// Zeroed flags for operands `(name, elements along K)`.
    pub fn new(dev: &Rc<Device>, along_k: &[(&str, usize)]) -> Result<StageFlags, CudaError> {
        let chunks: Vec<(String, usize)> = along_k
            .iter()
            .map(|&(n, len)| (n.to_string(), len.div_ceil(CHUNK)))
            .collect();
        let total: usize = chunks.iter().map(|c| c.1).sum();
        let mut buf = dev.alloc(total.max(1) * 4)?;
        buf.fill_u16(0)?;
        Ok(StageFlags {
            buf,
            chunks,
            base: Cell::new(0),
        })
    }

    /// The staging arguments of a launch whose staged operands are `copies` (name, elements along K,
    /// the aligned copy): refused where an operand is not one of these flags' or has other chunks.
    pub fn values(&self, copies: &[(&str, usize, &Mat)]) -> Result<StageValues, CudaError> {
        let mut out = StageValues {
            copies: Vec::new(),
            base: self.base.get(),
        };
        for &(name, len, copy) in copies {
            let mut at = 0;
            let mut found = None;
            for (n, c) in &self.chunks {
                if n == name {
                    found = Some(*c);
                    break;
                }
                at += c;
            }
            match found {
                Some(c) if c == len.div_ceil(CHUNK) => {
                    let pitch = u32::try_from(copy.pitch)
                        .map_err(|_| invalid(format!("staged copy pitch {}", copy.pitch)))?;
                    out.copies.push((
                        name.to_string(),
                        copy.ptr,
                        pitch,
                        self.buf.ptr() + 4 * at as u64,
                    ));
                }
                _ => {
                    return Err(invalid(format!(
                        "staging flags {:?} do not cover `{name}` with {len} elements along K",
                        self.chunks
                    )))
                }
            }
        }
        Ok(out)
    }

    /// After a launch of `grid` blocks on these flags: every chunk's flag is `grid` higher.
    pub fn launched(&self, grid: u32) {
        self.base.set(self.base.get().wrapping_add(grid));
    }
}

/// Whether `m` can be the source of an in-kernel copy: dense rows (the kernel reads them at the
/// tile program's pitch), a 16-byte aligned base and whole 16-byte vectors per row.
pub fn stageable(m: &Mat) -> bool {
    m.pitch == m.cols && m.ptr.is_multiple_of(16) && m.cols.is_multiple_of(8)
}
