//! The kernarg segment of a launch, laid out from the code object's own metadata (`.args`: offset,
//! size and kind of every argument; AMDGPUUsage "Code Object V3+ Metadata"). The emulator and a HIP
//! launch pack arguments with this one function, so what the emulator runs is what a GPU would get.

use crate::code_object::Kernel;
use crate::SimError;

/// Zero bytes after the kernarg segment (a `s_load_dwordx16` reads at most 64 bytes).
pub const PAD: usize = 64;

/// One explicit kernel argument value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgValue {
    /// A device address (`global_buffer`, 8 bytes).
    Ptr(u64),
    /// A 32-bit integer (`by_value`, 4 bytes).
    I32(i32),
}

/// The kernarg bytes for `values`, given in the kernel's parameter order. Hidden arguments (kinds
/// `hidden_*`, which a HIP runtime fills) are zero; our kernels read none of them. The segment is
/// padded with [`PAD`] zero bytes: the compiler loads arguments with wide scalar loads
/// (`s_load_dwordx4` at the last argument) that read past `kernarg_segment_size`, which runtimes
/// allow by allocating kernarg memory in larger aligned blocks.
pub fn pack(kernel: &Kernel, values: &[ArgValue]) -> Result<Vec<u8>, SimError> {
    let explicit: Vec<_> = kernel
        .args
        .iter()
        .filter(|a| !a.kind.starts_with("hidden_"))
        .collect();
    if explicit.len() != values.len() {
        return Err(SimError::BadMetadata(format!(
            "`{}` takes {} explicit arguments, {} given",
            kernel.name,
            explicit.len(),
            values.len()
        )));
    }
    let mut out = vec![0u8; kernel.kernarg_segment_size as usize + PAD];
    for (k, (a, v)) in explicit.iter().zip(values).enumerate() {
        let bytes: Vec<u8> = match (*v, a.kind.as_str(), a.size) {
            (ArgValue::Ptr(p), "global_buffer", 8) => p.to_le_bytes().to_vec(),
            (ArgValue::I32(x), "by_value", 4) => x.to_le_bytes().to_vec(),
            _ => {
                return Err(SimError::BadMetadata(format!(
                    "argument {k} of `{}` is {} of {} bytes, given {v:?}",
                    kernel.name, a.kind, a.size
                )))
            }
        };
        let at = a.offset as usize;
        let slot = out.get_mut(at..at + bytes.len()).ok_or_else(|| {
            SimError::BadMetadata(format!(
                "argument {k} at {at}+{} is past the kernarg segment of {}",
                bytes.len(),
                kernel.kernarg_segment_size
            ))
        })?;
        slot.copy_from_slice(&bytes);
    }
    Ok(out)
}
